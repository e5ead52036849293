"""``otel-verl doctor``: reports what the instrumentation would do and fails on a problem."""

from __future__ import annotations

import io
import socket

import pytest

from otel_verl import cli
from otel_verl.hooks import Hook
from otel_verl.offline import doctor


def _noop(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs)


GOOD_HOOKS = [Hook("verl.utils.tracking", "Tracking.log", _noop)]


@pytest.fixture
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def env(monkeypatch):
    for var in (
        "OTEL_TRACES_EXPORTER",
        "OTEL_METRICS_EXPORTER",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_SDK_DISABLED",
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS",
        "OTEL_VERL_SHUTDOWN_TIMEOUT",
    ):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def _run(hooks=GOOD_HOOKS) -> tuple[int, str]:
    out = io.StringIO()
    rc = doctor.doctor(out=out, hooks=hooks)
    return rc, out.getvalue()


def test_healthy_setup_passes(env, listener):
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{listener}")
    rc, text = _run()
    assert rc == 0, text
    assert "ok  verl 0.9.1 (supported: <0.10,>=0.9.0)" in text
    assert "entry point opentelemetry_instrumentor: verl = otel_verl:VerlInstrumentor" in text
    assert "entry point verl.plugins: otel_verl = otel_verl._verl_plugin" in text
    assert f"traces: otlp_proto_grpc -> http://127.0.0.1:{listener} (reachable" in text
    assert "ok  hook verl.utils.tracking.Tracking.log" in text
    assert text.rstrip().endswith("no problems found.")


def test_credentials_in_the_endpoint_url_are_not_printed(env, listener):
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://alice:s3cret@127.0.0.1:{listener}/?api_key=s3cret")
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    rc, text = _run()
    assert rc == 0, text  # still probed (the host and port are what matters)
    assert "s3cret" not in text and "alice" not in text
    assert f"traces: otlp_proto_http -> http://[REDACTED]@127.0.0.1:{listener}/?[REDACTED] (reachable" in text


def test_every_real_hook_resolves_in_the_installed_verl(env, listener):
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{listener}")
    rc, text = _run(hooks=None)
    assert rc == 0, text
    for target in ("verl.utils.profiler.performance._timer", "verl.trainer.ppo.ray_trainer.RayPPOTrainer.fit"):
        assert f"ok  hook {target}" in text
    assert "(only in Ray worker actors)" in text


def test_unreachable_endpoint_is_a_problem(env):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    rc, text = _run()
    assert rc == 1
    assert f"!!  traces: otlp_proto_http -> http://127.0.0.1:{port}/v1/traces NOT reachable" in text
    assert f"!!  metrics: otlp_proto_http -> http://127.0.0.1:{port}/v1/metrics NOT reachable" in text


def test_file_exporter_needs_no_endpoint(env, tmp_path):
    env.setenv("OTEL_TRACES_EXPORTER", "otlp_json_file")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    env.setenv("OTEL_VERL_FILE_DIR", str(tmp_path / "new" / "dir"))
    rc, text = _run()
    assert rc == 0, text
    assert f"traces: otlp_json_file -> {tmp_path / 'new' / 'dir'}" in text
    assert "metrics: not exported" in text


def test_unknown_exporter_and_bad_setting_are_problems(env):
    env.setenv("OTEL_TRACES_EXPORTER", "jaeger_thrift")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    env.setenv("OTEL_VERL_SHUTDOWN_TIMEOUT", "soon")
    rc, text = _run()
    assert rc == 1
    assert "!!  traces: exporter 'jaeger_thrift' not installed" in text
    assert "!!  ignoring OTEL_VERL_SHUTDOWN_TIMEOUT='soon'" in text
    assert "OTEL_VERL_SHUTDOWN_TIMEOUT=5 s" in text  # the default it falls back to


def test_missing_hook_target_names_the_verl_version(env):
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    hooks = GOOD_HOOKS + [
        Hook("verl.utils.tracking", "Tracking.log_v2", _noop),
        Hook("verl.utils.tracking", "Gone.log", _noop, optional=True),
        Hook("verl.no_such_module", "f", _noop),
    ]
    rc, text = _run(hooks)
    assert rc == 1
    assert "!!  hook verl.utils.tracking.Tracking.log_v2: Tracking.log_v2 missing in verl 0.9.1" in text
    assert "--  hook verl.utils.tracking.Gone.log: Gone missing in verl 0.9.1 (optional: skipped)" in text
    assert "!!  hook verl.no_such_module.f: module verl.no_such_module not importable" in text
    assert "3 problem(s)" not in text and "2 problem(s) found." in text


def test_unsupported_verl_version_is_a_problem(env, monkeypatch):
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setattr(doctor, "_version", lambda dist: "0.11.0")
    rc, text = _run()
    assert rc == 1
    assert "!!  verl 0.11.0 is outside the supported range <0.10,>=0.9.0" in text


def test_disabled_switch_is_reported(env):
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    env.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "requests,verl")
    rc, text = _run()
    assert rc == 0
    assert "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS disables verl" in text


def test_cli_subcommand_returns_the_exit_code(env, monkeypatch, capsys):
    env.setenv("OTEL_TRACES_EXPORTER", "no_such_exporter")
    monkeypatch.setattr("otel_verl.hooks.all_hooks", lambda: GOOD_HOOKS)
    assert cli.main(["doctor"]) == 1
    assert "not installed" in capsys.readouterr().out


def test_sdk_switch_is_reported(env):
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    env.setenv("OTEL_SDK_DISABLED", "true")
    rc, text = _run()
    assert rc == 0
    assert "--  OTEL_SDK_DISABLED=true: no telemetry will be produced" in text


def test_grpc_endpoint_keeps_the_base_url(env, listener):
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{listener}")
    env.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"http://127.0.0.1:{listener}/custom")
    env.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf")
    rc, text = _run()
    assert rc == 0, text
    assert f"traces: otlp_proto_grpc -> http://127.0.0.1:{listener} (reachable" in text  # no /v1/traces for gRPC
    assert f"metrics: otlp_proto_http -> http://127.0.0.1:{listener}/custom (reachable" in text  # used as is
