"""``OTEL_VERL_OTLP_HEADERS_FILE``: a process's OTLP exporters send the file's headers, the file is hostile input."""

from __future__ import annotations

import logging
import os
import socket

import pytest
from verl_cpu_harness.otlp_receiver import OtlpReceiver

from otel_verl import config, semconv
from otel_verl.process import otlp_headers
from otel_verl.process.resource import Identity
from otel_verl.process.telemetry import build_own


@pytest.fixture
def fresh(monkeypatch):
    for var in (config.OTLP_HEADERS_FILE, otlp_headers.GENERIC_VAR, "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        monkeypatch.delenv(var, raising=False)
    config.settings.cache_clear()
    otlp_headers.file_headers.cache_clear()
    yield monkeypatch
    config.settings.cache_clear()
    otlp_headers.file_headers.cache_clear()


def _headers_file(path, text: str, mode: int = 0o600):
    path.write_text(text)
    path.chmod(mode)
    return path


def _exported_headers(monkeypatch, protocol: str) -> dict[str, str]:
    """The headers of the request one finished span makes, through build_own's OTLP/HTTP exporter."""
    with OtlpReceiver() as rx:
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
        monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.url)
        telemetry = build_own(Identity(role=semconv.ROLE_WORKER, rank=1))
        with telemetry.tracer.start_as_current_span("verl.worker.update_actor"):
            pass
        assert telemetry.tracer_provider.force_flush(10_000)
        telemetry.shutdown(5.0)
        (request,) = [r for r in rx.requests if r[0] == "/v1/traces"]
    return request[1]


def test_the_files_headers_reach_the_collector_with_those_of_the_environment(fresh, tmp_path):
    path = _headers_file(tmp_path / "headers", "# the job's token\nAuthorization=Bearer%20s3cret\n\nx-tenant=verl\n")
    fresh.setenv(config.OTLP_HEADERS_FILE, str(path))
    fresh.setenv(otlp_headers.GENERIC_VAR, "x-tenant=other,x-team=rl")
    headers = _exported_headers(fresh, "http/protobuf")
    assert headers["authorization"] == "Bearer s3cret"
    assert headers["x-tenant"] == "verl"  # the file wins over the environment
    assert headers["x-team"] == "rl"  # and the environment's other headers stay


def test_without_the_setting_the_exporters_read_the_environment_as_always(fresh):
    fresh.setenv(otlp_headers.GENERIC_VAR, "authorization=Bearer%20from-env")
    assert otlp_headers.headers_for("traces") is None
    assert _exported_headers(fresh, "http/protobuf")["authorization"] == "Bearer from-env"


def test_the_signal_specific_variable_wins_over_the_generic_one_as_in_the_sdk(fresh, tmp_path):
    fresh.setenv(config.OTLP_HEADERS_FILE, str(_headers_file(tmp_path / "h", "authorization=Bearer%20t")))
    fresh.setenv(otlp_headers.GENERIC_VAR, "x-a=generic")
    fresh.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-a=traces")
    assert otlp_headers.headers_for("traces") == {"x-a": "traces", "authorization": "Bearer t"}
    assert otlp_headers.headers_for("metrics") == {"x-a": "generic", "authorization": "Bearer t"}


def test_grpc_exporters_get_them_too(fresh, tmp_path):
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    from otel_verl.process import exporters

    fresh.setenv(config.OTLP_HEADERS_FILE, str(_headers_file(tmp_path / "h", "Authorization=Bearer%20g")))
    exporter = exporters.make_exporter("otlp_proto_grpc", OTLPSpanExporter, "traces", Identity())
    try:
        inner = getattr(exporter, "inner", exporter)  # behind the spool (spool_export)
        assert dict(inner._headers) == {"authorization": "Bearer g"}  # gRPC metadata keys: lower case
    finally:
        exporter.shutdown()


def _warned(caplog) -> str:
    return " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


@pytest.mark.parametrize(
    "make,why",
    [
        (lambda p: p, "cannot be opened"),  # missing
        (lambda p: (p.mkdir(), p)[1], "is not a regular file"),
        (lambda p: (os.mkfifo(p), p)[1], "is not a regular file"),
        (lambda p: _headers_file(p, "a=" + "x" * otlp_headers.MAX_BYTES), "is larger than"),
        (lambda p: (p.write_bytes(b"authorization=\xff\xfe"), p)[1], "is not UTF-8"),
        (lambda p: _headers_file(p, "authorization=Bearer\x1b[2Jx"), "control characters"),
    ],
    ids=["missing", "folder", "fifo", "too-big", "not-utf8", "control-chars"],
)
def test_an_unusable_file_is_one_warning_and_no_headers(fresh, tmp_path, caplog, make, why):
    path = make(tmp_path / "headers")
    fresh.setenv(config.OTLP_HEADERS_FILE, str(path))
    with caplog.at_level(logging.WARNING):
        assert otlp_headers.headers_for("traces") == {}
        assert otlp_headers.headers_for("logs") == {}
    text = _warned(caplog)
    assert why in text and str(path) in text and text.count("OTEL_VERL_OTLP_HEADERS_FILE") == 1, text
    assert "xxxx" not in text and "Bearer" not in text  # never the content


def test_a_file_every_user_can_read_is_used_with_one_warning(fresh, tmp_path, caplog):
    path = _headers_file(tmp_path / "headers", "authorization=Bearer%20s3cret", mode=0o644)
    fresh.setenv(config.OTLP_HEADERS_FILE, str(path))
    with caplog.at_level(logging.WARNING):
        assert otlp_headers.headers_for("traces") == {"authorization": "Bearer s3cret"}
        assert otlp_headers.headers_for("metrics") == {"authorization": "Bearer s3cret"}
    text = _warned(caplog)
    assert "every user" in text and text.count("chmod 600") == 1 and "s3cret" not in text


def test_a_symlink_to_a_regular_file_is_read(fresh, tmp_path):
    """Kubernetes mounts a secret's files as symlinks (``token -> ..data/token``)."""
    target = _headers_file(tmp_path / "real", "authorization=Bearer%20k8s")
    link = tmp_path / "token"
    link.symlink_to(target)
    fresh.setenv(config.OTLP_HEADERS_FILE, str(link))
    assert otlp_headers.headers_for("traces") == {"authorization": "Bearer k8s"}


def test_the_path_travels_in_the_runtime_env_and_the_token_does_not(fresh, tmp_path):
    from otel_verl.hooks import ray_launch

    path = _headers_file(tmp_path / "headers", "authorization=Bearer%20s3cret")
    fresh.setenv(config.OTLP_HEADERS_FILE, str(path))
    fresh.setenv(otlp_headers.GENERIC_VAR, "authorization=Bearer%20s3cret")
    env = ray_launch.otel_env()
    assert env[config.OTLP_HEADERS_FILE] == str(path)
    assert "s3cret" not in repr(env)


def test_only_the_sdks_otlp_exporters_take_headers():
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    assert otlp_headers.applies(OTLPMetricExporter) and otlp_headers.applies(OTLPLogExporter)
    assert not otlp_headers.applies(ConsoleSpanExporter) and not otlp_headers.applies(socket.socket)
