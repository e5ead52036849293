"""The OTLP exporters' own warnings: one of a kind each 5 minutes per process, on the SDK's real paths."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_verl import config, semconv
from otel_verl.process import logs, sdk_log_throttle
from otel_verl.process.resource import Identity
from otel_verl.process.sdk_log_throttle import Throttle
from otel_verl.process.telemetry import build_own


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def captured() -> Iterator[Captured]:
    """What reaches a handler on the loggers the throttle guards, from no throttle on."""
    sdk_log_throttle.detach()  # an earlier test's pipeline attached it
    handler = Captured()
    loggers = [logging.getLogger(name) for name in sdk_log_throttle.LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        sdk_log_throttle.detach()


def _record(
    msg: str, *args: object, name: str = "opentelemetry.exporter.otlp.proto.grpc.exporter"
) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, args, None)


def test_first_of_a_kind_passes_then_one_per_interval_saying_how_many_were_held_back():
    now = [100.0]
    throttle = Throttle(clock=lambda: now[0])
    template = "Transient error %s encountered while exporting %s to %s, retrying in %.2fs."
    assert throttle.filter(_record(template, "UNAVAILABLE", "traces", "host:4317", 1.0))
    held = [throttle.filter(_record(template, "UNAVAILABLE", "metrics", "host:4317", 2.0)) for _ in range(99)]
    assert not any(held)
    # other kinds pass on their own: another template, or the same one on another logger
    assert throttle.filter(_record("Failed to export %s to %s", "traces", "host:4317"))
    assert throttle.filter(_record(template, "x", "y", "z", 1.0, name="opentelemetry.exporter.otlp.proto.http.x"))
    now[0] += 299.0
    assert not throttle.filter(_record(template, "UNAVAILABLE", "traces", "host:4317", 4.0))
    now[0] += 2.0  # 301 s after the first
    record = _record(template, "UNAVAILABLE", "logs", "host:4317", 1.0)
    assert throttle.filter(record)
    assert record.getMessage() == (
        "Transient error UNAVAILABLE encountered while exporting logs to host:4317, retrying in 1.00s."
        " [otel-verl: 100 more like this in the last 301 s not shown]"
    )
    # a message that is not a string (unhashable, even) is a kind of its own, never an error
    assert throttle.filter(_record({"not": "a template"})) and not throttle.filter(_record({"other": 1}))
    # the count starts again after a record passed
    now[0] += 301.0
    record = _record(template, "UNAVAILABLE", "logs", "host:4317", 1.0)
    assert throttle.filter(record) and record.getMessage().endswith("retrying in 1.00s.")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _refused_exports(n: int) -> str:
    """``n`` gRPC span exports to a port nobody listens on. A 2.5 s deadline: each makes one
    retry (backoff 0.8-1.2 s, "Transient error ...") and gives up at the next ("Failed to export
    ..."), so its two messages alternate as in a long outage."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    endpoint = f"127.0.0.1:{_closed_port()}"
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=2.5)
    try:
        assert [exporter.export([]) for _ in range(n)] == [SpanExportResult.FAILURE] * n
    finally:
        exporter.shutdown()
    return endpoint


def _kinds(lines: list[str], endpoint: str) -> list[str]:
    """The kinds of line about ``endpoint`` (an earlier test's exporters may still be retrying)."""
    return [line.split(" ")[0] for line in lines if endpoint in line]


def test_a_refused_endpoint_logs_each_kind_once_with_the_pipeline(monkeypatch, tmp_path, captured):
    endpoint = _refused_exports(3)  # the SDK alone: its DuplicateFilter lets alternating messages through
    # (it drops a repeat of the last record only: that may be a "Transient" of an earlier test)
    kinds = _kinds(captured.lines, endpoint)
    assert len(kinds) >= 5 and kinds[-1] == "Failed", kinds
    captured.lines.clear()

    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-throttle")
    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    for signal in ("TRACES", "METRICS", "LOGS"):
        monkeypatch.setenv(f"OTEL_{signal}_EXPORTER", "otlp_json_file")
    config.settings.cache_clear()
    tel = build_own(Identity(role=semconv.ROLE_TASKRUNNER))  # attaches the throttle
    captured.lines.clear()
    try:
        _refused_exports(3)
        # one line of each kind in the process: this test's, or one of an earlier test's exporters
        # still retrying in its thread (the first of its kind then, and this test's held back)
        exporters_lines = [line.split(" ")[0] for line in captured.lines if " to 127.0.0.1:" in line]
        assert sorted(exporters_lines) == ["Failed", "Transient"], captured.lines
    finally:
        tel.shutdown(5)
        logs.detach()
        config.settings.cache_clear()
