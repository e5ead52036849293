"""``otel-verl doctor``: reports what the instrumentation would do and fails on a problem."""

from __future__ import annotations

import io
import re
import socket
import sys

import pytest

from otel_verl import cli, config
from otel_verl.exits import CommandError
from otel_verl.hooks.hookset import Hook
from otel_verl.live import doctor


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
    for var in list(sys.modules["os"].environ):
        if var.startswith(("OTEL_EXPORTER_OTLP_", "OTEL_VERL_")) or var.endswith("_EXPORTER"):
            monkeypatch.delenv(var, raising=False)
    for var in ("OTEL_SDK_DISABLED", "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")  # the tests below look at traces and metrics
    return monkeypatch


def _run(hooks=GOOD_HOOKS, verbose=True) -> tuple[int, str]:
    """doctor's exit code (as the CLI returns it) and output (every line: ``--verbose``, unless
    ``verbose=False``); a problem's one line is added last."""
    out = io.StringIO()
    try:
        rc = doctor.doctor(out=out, hooks=hooks, verbose=verbose)
    except CommandError as exc:
        return exc.code, out.getvalue() + f"ERROR {exc}\n"
    return rc, out.getvalue()


def test_healthy_setup_passes(env, listener):
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{listener}")
    rc, text = _run()
    assert rc == 0, text
    assert "ok  verl 0.9.1 (supported: <0.10,>=0.9.1)" in text
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
    assert text.endswith(
        f"ERROR 2 problem(s) found: traces: otlp_proto_http -> http://127.0.0.1:{port}/v1/traces NOT "
        "reachable: " + text.split("NOT reachable: ", 1)[1].split("\n", 1)[0] + " (and 1 more: the problems above)\n"
    )


def test_the_endpoint_is_judged_for_each_signal(env, listener):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{listener}")
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed}")
    env.delenv("OTEL_LOGS_EXPORTER")  # logs too, default otlp: same URL as metrics
    rc, text = _run()
    assert rc == 1
    assert f"ok  traces: otlp_proto_grpc -> http://127.0.0.1:{listener} (reachable" in text
    assert f"!!  metrics: otlp_proto_grpc -> http://127.0.0.1:{closed} NOT reachable" in text
    # probed once, judged again: never "ok" next to an unreachable URL
    logs = next(line for line in text.splitlines() if "logs: otlp_proto_grpc" in line)
    assert logs.startswith("  !!  ") and logs.endswith("(probed above)")
    assert "ERROR 2 problem(s) found: metrics:" in text


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "not a url",
            "OTEL_EXPORTER_OTLP_ENDPOINT='not a url' is not a valid URL (it contains a space)",
        ),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:70000", "its port is not a number from 0 to 65535"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "ftp://collector",
            "_TRACES_ENDPOINT='ftp://collector' is not a valid URL",
        ),
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "thrift",
            "OTEL_EXPORTER_OTLP_PROTOCOL='thrift' is not one of grpc, http/protobuf, http/json",
        ),
    ],
)
def test_a_malformed_endpoint_setting_is_named_not_probed(env, variable, value, expected):
    env.setenv(variable, value)
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    rc, text = _run()
    assert rc == 1
    assert "!!  traces: " in text and expected in text
    assert "reachable" not in text and ":80" not in text  # no DNS lookup of "not a url"


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
    assert "!!  ignoring OTEL_VERL_SHUTDOWN_TIMEOUT='soon' (not valid); using the default 5.0" in text
    assert f"ok  all {len(config.VARIABLES)} OTEL_VERL_* settings at their defaults" in text  # it fell back


def _non_default(variable: config.Variable) -> str:
    """A valid value of ``variable`` other than its default."""
    if isinstance(variable.default, bool):
        return str(not variable.default).lower()
    if isinstance(variable.default, float):
        return "7.5"
    if variable.name == config.LOG_LEVEL:
        return "INFO"
    if variable.name == config.GUARD_ACTION:
        return "stop"
    if variable.name == config.GUARD_RESUME:
        return "guard"
    if variable.name == config.GUARD_ACTIONS_BY_RULE:
        return "kl_blowup=stop"
    if variable.name == config.STALL_AFTER:
        return "120"
    if variable.name == config.ENGINE_TRACING:
        return "false"
    if variable.name == config.GUARD_RULES:  # a path doctor reads: the built-in rules file is a valid one
        from importlib import resources

        return str(resources.files("otel_verl.hooks.guard").joinpath("rules.yaml"))
    if isinstance(variable.default, int):
        return str(variable.default + 3)
    return "custom"


def test_the_settings_line_shows_every_setting_that_differs_from_its_default(env, tmp_path):
    env.chdir(tmp_path)
    (tmp_path / "custom").write_text("x-team=rl\n")  # OTEL_VERL_OTLP_HEADERS_FILE=custom: a usable file
    (tmp_path / "custom").chmod(0o600)
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    rc, text = _run()
    assert rc == 0 and f"ok  all {len(config.VARIABLES)} OTEL_VERL_* settings at their defaults" in text
    for variable in config.VARIABLES:  # every one of them, from config's own list
        env.setenv(variable.name, _non_default(variable))
    env.setenv(config.STEP_EXPORT, "true")  # set, but to its default: not listed
    env.setenv("OTEL_VERL_SAMPLE", "true")  # a typo
    for tool in config.TOOL_VARIABLES:  # the commands' own variables are no typo
        env.setenv(tool.name, "/somewhere")
    rc, text = _run()
    assert rc == 0, text
    line = next(line for line in text.splitlines() if "differ from their defaults" in line)
    n = len(config.VARIABLES)
    assert line.startswith(f"  ok  {n - 1} of {n} OTEL_VERL_* settings differ from their defaults: ")
    for variable in config.VARIABLES:
        shown = f"{variable.name}={_non_default(variable)}"
        assert (shown in line) == (variable.name != config.STEP_EXPORT), variable.name
    assert "--  OTEL_VERL_SAMPLE is not an otel-verl setting (ignored); did you mean OTEL_VERL_SAMPLES?" in text
    assert not any(f"{tool.name} is not" in text for tool in config.TOOL_VARIABLES), text


def test_warnings_from_verl_imports_come_after_the_hook_list(env, tmp_path, monkeypatch, capsys):
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    (tmp_path / "noisy_engine.py").write_text(
        "import warnings\nwarnings.warn('engine X is not available', UserWarning)\ndef f(): pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    hooks = [GOOD_HOOKS[0], Hook("noisy_engine", "f", _noop), GOOD_HOOKS[0]]
    rc, text = _run(hooks)
    assert rc == 0, text
    lines = text.splitlines()
    hook_lines = [i for i, line in enumerate(lines) if line.startswith("  ok  hook ")]
    assert hook_lines == list(range(hook_lines[0], hook_lines[0] + 2))  # nothing between them; the repeated one once
    i = lines.index("warnings while importing verl's modules (1; not otel-verl problems):")
    assert i > hook_lines[-1] and lines[i + 1] == "  --  UserWarning: engine X is not available"
    assert capsys.readouterr().err == ""


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
    assert "ERROR 2 problem(s) found: hook verl.utils.tracking.Tracking.log_v2: " in text


def test_an_untested_verl_version_is_said_and_otel_verl_starts(env, monkeypatch):
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setattr(doctor, "_version", lambda dist: "0.11.0")
    rc, text = _run()
    assert rc == 0
    assert "--  verl 0.11.0 is outside the tested range <0.10,>=0.9.1: otel-verl starts anyway" in text


def test_an_untested_verl_version_is_a_problem_when_otel_verl_stays_off_there(env, monkeypatch):
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    env.setenv("OTEL_VERL_UNTESTED_VERL", "false")
    monkeypatch.setattr(doctor, "_version", lambda dist: "0.11.0")
    rc, text = _run()
    assert rc == 1
    assert "!!  verl 0.11.0 is outside the tested range <0.10,>=0.9.1 and OTEL_VERL_UNTESTED_VERL=false" in text


def test_disabled_switch_is_reported(env):
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    env.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "requests,verl")
    rc, text = _run()
    assert rc == 0
    assert "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS disables verl" in text


def test_cli_subcommand_returns_the_exit_code(env, monkeypatch, capsys):
    env.setenv("OTEL_TRACES_EXPORTER", "no_such_exporter")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setattr("otel_verl.hooks.all_hooks", lambda: GOOD_HOOKS)
    assert cli.main(["doctor"]) == 1
    captured = capsys.readouterr()
    assert "not installed" in captured.out
    assert (
        captured.err
        == "otel-verl doctor: 1 problem(s) found: traces: exporter 'no_such_exporter' not installed "
        + captured.out.split("exporter 'no_such_exporter' not installed ", 1)[1].split("\n", 1)[0]
        + "\n"
    )


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


def test_missing_extras_are_named_for_the_settings_that_need_them(env, monkeypatch):
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda dist: None if dist in ("nvidia-ml-py",) else real(dist))
    rc, text = _run()
    assert rc == 0, text  # a note, not a problem: traces and verl's metrics need no extra
    assert "--  otel-verl[gpu] not installed (nvidia-ml-py): no hw.gpu.utilization" in text
    assert 'pip install "otel-verl[gpu]"' in text
    assert "ok  otel-verl[system]: opentelemetry-instrumentation-system-metrics " in text
    env.setenv("OTEL_VERL_GPU_METRICS", "false")  # turned off: nothing to say about its extra
    assert "otel-verl[gpu]" not in _run()[1]


def test_the_guard_rules_file_is_checked_as_the_guard_reads_it(env, tmp_path):
    import os

    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    good = tmp_path / "rules.yaml"
    good.write_text("rules: [{name: kl, kind: above, keys: [actor/ppo_kl], threshold: 0.1}]\n")
    env.setenv(config.GUARD_RULES, str(good))
    rc, text = _run()
    assert rc == 0 and f"ok  guard rules: 1 from {good}" in text, text
    fifo = tmp_path / "rules.fifo"
    os.mkfifo(fifo)
    for path, why in ((fifo, "is not a regular file"), (tmp_path / "missing.yaml", "cannot read")):
        env.setenv(config.GUARD_RULES, str(path))
        rc, text = _run()
        assert rc == 1
        assert f"!!  {config.GUARD_RULES}: " in text and why in text and "built-in rules" in text


def test_the_guard_actions_are_checked_against_the_guards_rules(env):
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    env.setenv(config.GUARD_ACTIONS_BY_RULE, "*=record,kl_blowup=stop,grad_norm_*=alert")
    rc, text = _run()
    assert rc == 0, text
    line = next(ln for ln in text.splitlines() if "guard actions:" in ln)
    assert "stop: kl_blowup;" in line and "alert: grad_norm_spike, grad_norm_rise" in line
    assert "record: nonfinite" in line
    env.setenv(config.GUARD_ACTIONS_BY_RULE, "kl_blwup=stop")  # a typo: no rule of that name
    rc, text = _run()
    assert rc == 1 and f"!!  {config.GUARD_ACTIONS_BY_RULE}: kl_blwup=stop name(s) no rule" in text, text


@pytest.mark.parametrize("raw", ["abc", "-1", "70000"])
def test_a_bad_prometheus_port_is_a_problem(env, raw):
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    env.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", raw)
    rc, text = _run()
    assert rc == 1
    assert f"!!  metrics: prometheus: OTEL_EXPORTER_PROMETHEUS_PORT={raw!r} is not a port from 1 to 65535" in text
    assert "ok  metrics: prometheus pull endpoint on 127.0.0.1:9464-9495" in text
    env.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "9600")
    rc, text = _run()
    assert rc == 0 and "ok  metrics: prometheus pull endpoint on 127.0.0.1:9600-9631" in text, text


def test_the_opentelemetry_setup_per_process_kind(env, listener):
    """With opentelemetry-distro installed (the test extra): its configurator in the launcher, none in
    the Ray workers unless OTEL_PYTHON_CONFIGURATOR names one; the instrumentations it loads."""
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{listener}")
    env.delenv("OTEL_PYTHON_CONFIGURATOR", raising=False)
    rc, text = _run()
    assert rc == 0, text
    assert "--  distro: distro (opentelemetry-distro)" in text
    assert "launcher: the configurator configurator (opentelemetry-distro) builds the SDK providers" in text
    assert "Ray workers: no distro or configurator" in text
    loaded = next(line for line in text.splitlines() if "instrumentations loaded in every process" in line)
    assert "verl" in loaded.split(": ", 1)[1].split(", ")
    assert "but not in Ray's processes: system_metrics" in text
    env.setenv("OTEL_PYTHON_CONFIGURATOR", "configurator")
    env.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "system_metrics")
    rc, text = _run()
    assert "named by OTEL_PYTHON_CONFIGURATOR, runs there too" in text
    assert "system_metrics (disabled)" in text


def test_by_default_only_the_problems_and_first(env, listener, tmp_path):
    """Quiet when all is well: no ``ok`` line, one count; a problem comes first, before any other line."""
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{listener}")
    rc, text = _run(verbose=False)
    assert rc == 0, text
    lines = text.splitlines()
    assert lines[0].startswith("otel-verl ") and " doctor (python " in lines[0]
    assert re.fullmatch(r"\d+ checks ok, \d+ notes \(otel-verl doctor --verbose lists them\)", lines[1])
    assert lines[2:] == ["no problems found."]
    env.setenv("OTEL_VERL_STALL_AFTER", "soon")  # a bad setting: a problem of the settings section
    rc, text = _run(verbose=False)
    assert rc == 1
    lines = text.splitlines()
    assert lines[1] == "problems:" and lines[2].startswith("  !!  ignoring OTEL_VERL_STALL_AFTER='soon'")
    assert not any(line.startswith("  ok  ") for line in lines)
    # --verbose: the problems still first, then every line by section
    rc, text = _run(verbose=True)
    lines = text.splitlines()
    assert lines[1] == "problems:" and "  ok  entry point verl.plugins: otel_verl = otel_verl._verl_plugin" in lines
    assert lines.index("problems:") < lines.index("package:")


def test_a_hook_shared_by_two_targets_is_listed_once(env, listener):
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{listener}")
    rc, text = _run(hooks=GOOD_HOOKS * 2)
    assert rc == 0 and text.count("ok  hook verl.utils.tracking.Tracking.log") == 1, text


def test_the_default_endpoint_nobody_asked_for_is_not_judged(env, tmp_path):
    """After a run that wrote files: no exporter variable, no endpoint; localhost:4317 does not
    answer. That is a note (what a job here would do), not a problem."""
    env.delenv("OTEL_LOGS_EXPORTER", raising=False)
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env.setattr(doctor.endpoints, "DEFAULT_GRPC", f"http://127.0.0.1:{port}", raising=False)
    env.setattr(doctor, "_reachable", lambda url: (False, "127.0.0.1:4317 (ConnectionRefusedError)"))
    rc, text = _run()
    assert rc == 0, text
    assert "!!" not in text
    assert "--  traces: otlp_proto_grpc (the default: OTEL_TRACES_EXPORTER and the OTLP endpoint are unset)" in text
    # asked for: the exporter named, or an endpoint set: judged
    env.setenv("OTEL_TRACES_EXPORTER", "otlp")
    rc, text = _run()
    assert rc == 1 and "!!  traces: otlp_proto_grpc -> " in text and "!!  metrics" not in text
    env.delenv("OTEL_TRACES_EXPORTER")
    env.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://127.0.0.1:9")
    rc, text = _run()
    assert rc == 1 and "!!  metrics: otlp_proto_grpc -> " in text and "!!  traces" not in text


def test_the_otlp_headers_are_checked_by_name_and_no_value_is_printed(env, tmp_path):
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    token = "s3cr3t-T0ken-9f8e7d"
    good = tmp_path / "token"
    good.write_text(token + "\n")  # the token alone, as `otel-verl stack --token-file` takes it
    good.chmod(0o600)
    env.setenv(config.OTLP_HEADERS_FILE, str(good))
    env.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-tenant={token}")
    rc, text = _run()
    assert rc == 0, text
    assert f"ok  OTLP headers from {good}: authorization (values not shown)" in text
    assert "ok  OTEL_EXPORTER_OTLP_HEADERS: x-tenant (values not shown)" in text
    bad = tmp_path / "headers"
    bad.write_text(f"{token}\n{token}\n")
    bad.chmod(0o600)
    env.setenv(config.OTLP_HEADERS_FILE, str(bad))
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"Authorization: Bearer {token}")
    rc, text = _run()
    assert rc == 1
    assert f"!!  {config.OTLP_HEADERS_FILE}={bad} line 1 is neither" in text
    assert "!!  OTEL_EXPORTER_OTLP_TRACES_HEADERS has 1 entries that are not `name=value`" in text
    assert token not in text
