"""Exit is bounded whatever the endpoint does: the end-of-training flush and the process's
exit shutdown together add at most ``OTEL_VERL_SHUTDOWN_TIMEOUT`` (the SDK's own would block
10-25 s on a hung endpoint, see ENV_FACTS.md)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from otel_verl import config, semconv
from otel_verl.process.resource import Identity
from otel_verl.process.telemetry import build_own

BOUND_S = 1.0


@pytest.fixture
def hung_endpoint():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    conns = []

    def accept():
        while True:
            try:
                conns.append(sock.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield sock.getsockname()[1], conns
    sock.close()
    for c in conns:
        c.close()


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_flush_then_shutdown_share_one_bound_on_a_hung_collector(monkeypatch, tmp_path, hung_endpoint, protocol):
    port, conns = hung_endpoint
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    monkeypatch.setenv(config.SHUTDOWN_TIMEOUT, str(BOUND_S))
    config.settings.cache_clear()
    try:
        tel = build_own(Identity(role=semconv.ROLE_TASKRUNNER))
        gauge = tel.meter.create_gauge("verl.actor.kl_loss")
        worst = 0.0
        for step in range(20):  # the training thread never waits on the exporter
            start = time.monotonic()
            with tel.tracer.start_as_current_span("verl.step"):
                gauge.set(step * 0.1)
            tel.mark_step()
            tel.request_flush()
            if step:  # the first step pays one-time lazy imports (SDK encoders) on a loaded machine
                worst = max(worst, time.monotonic() - start)
        assert worst < 0.25, worst
        start = time.monotonic()
        tel.flush()  # end of fit
        tel.shutdown()  # atexit
        spent = time.monotonic() - start
    finally:
        config.settings.cache_clear()
    assert conns, "the exporters never reached the hung endpoint"
    assert spent <= BOUND_S + 0.3, f"exit took {spent:.2f} s, bound {BOUND_S} s"
