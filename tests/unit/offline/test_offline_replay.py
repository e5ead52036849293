"""``otel-verl replay``: stored OTLP JSON lines to an OTLP/HTTP endpoint (hermetic, a local receiver)."""

from __future__ import annotations

import io
import json
import logging
import socket
import time
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter
from opentelemetry.exporter.otlp.json.file.metric_exporter import FileMetricExporter
from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from otlp_http_receiver import OtlpReceiver

from otel_verl import cli
from otel_verl.offline.otlp_files import read_metric_points, read_spans
from otel_verl.offline.replay import parse_headers, replay, signal_url


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """Files written by the real OTLP JSON file exporters, as a run writes them (two processes)."""
    folder = tmp_path / "telemetry"
    folder.mkdir()
    for role, pid in (("taskrunner", 11), ("worker0", 12)):
        resource = Resource.create({"service.name": "verl", "verl.process.role": role, "process.pid": pid})
        tp = TracerProvider(resource=resource)
        tp.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path=folder / f"traces-{role}-{pid}.jsonl")))
        tracer = tp.get_tracer("otel_verl")
        for step in (1, 2, 3):
            with tracer.start_as_current_span("verl.step", attributes={"verl.step": step}):
                with tracer.start_as_current_span("verl.gen"):
                    pass
        tp.shutdown()

        reader = InMemoryMetricReader()
        mp = MeterProvider(metric_readers=[reader], resource=resource)
        gauge = mp.get_meter("otel_verl").create_gauge("verl.training.step")
        hist = mp.get_meter("otel_verl").create_histogram("verl.stage.duration")
        exporter = FileMetricExporter(path=folder / f"metrics-{role}-{pid}.jsonl")
        for step in (1, 2):
            gauge.set(step)
            hist.record(0.5 * step, {"verl.stage": "gen"})
            exporter.export(reader.get_metrics_data())
        exporter.shutdown()
        mp.shutdown()

        lp = LoggerProvider(resource=resource)
        lp.add_log_record_processor(SimpleLogRecordProcessor(FileLogExporter(path=folder / f"logs-{role}-{pid}.jsonl")))
        log = logging.getLogger(f"test_replay.{role}")
        log.propagate = False
        handler = LoggingHandler(logger_provider=lp)
        log.addHandler(handler)
        log.warning("one")
        log.warning("two")
        log.removeHandler(handler)
        lp.shutdown()
    return folder


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_replay_delivers_every_span_point_and_log_record(run_dir):
    spans = read_spans(run_dir)
    points = read_metric_points(run_dir)
    assert len(spans) == 12 and len(points) == 8  # 2 processes x (3 steps x 2 spans), x 2 exports x 2 metrics
    out = io.StringIO()
    with OtlpReceiver() as rx:
        rc = replay(run_dir, endpoint=rx.url + "/", headers="authorization=Bearer%20t0ken,x-tenant=verl", out=out)
    assert rc == 0, out.getvalue()
    assert sorted(rx.span_ids()) == sorted(s.span_id for s in spans)
    assert rx.metric_points() == len(points)
    assert rx.log_records() == 4
    assert {p for p, _, _ in rx.requests} == {"/v1/traces", "/v1/metrics", "/v1/logs"}
    # one request per stored line, each an Export*ServiceRequest as stored
    stored = [json.loads(line) for p in sorted(run_dir.glob("traces-*.jsonl")) for line in p.read_text().splitlines()]
    assert rx.bodies("/v1/traces") == stored
    for _, headers, _ in rx.requests:
        assert headers["content-type"] == "application/json"
        assert headers["authorization"] == "Bearer t0ken" and headers["x-tenant"] == "verl"
    text = out.getvalue()
    assert "12 spans sent in 12 requests from 2 files" in text
    assert "8 data points sent in 4 requests" in text and "4 log records sent" in text


def test_replay_uses_the_sdk_environment_without_flags(run_dir):
    with OtlpReceiver() as rx, OtlpReceiver() as traces_rx:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": rx.url,
            "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=abc",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": traces_rx.url + "/custom/traces",  # used as is
            "OTEL_EXPORTER_OTLP_LOGS_HEADERS": "x-api-key=logs",
        }
        assert replay(run_dir, env=env, out=io.StringIO()) == 0
    assert {p for p, _, _ in traces_rx.requests} == {"/custom/traces"} and len(traces_rx.span_ids()) == 12
    assert {p for p, _, _ in rx.requests} == {"/v1/metrics", "/v1/logs"}
    for path, headers, _ in rx.requests:
        assert headers["x-api-key"] == ("logs" if path == "/v1/logs" else "abc")
    assert signal_url("metrics", None, {}) == "http://localhost:4318/v1/metrics"


def test_replay_fails_fast_on_a_refused_endpoint(run_dir):
    out = io.StringIO()
    start = time.monotonic()
    rc = replay(run_dir, endpoint=f"http://127.0.0.1:{_closed_port()}", timeout=2, out=out)
    assert rc == 1
    assert time.monotonic() - start < 5
    text = out.getvalue()
    assert "0 spans sent in 0 requests" in text and "12 requests failed" in text and "refused" in text
    assert text.rstrip().endswith(f"FAILED: 0 items replayed from {run_dir}")


def test_replay_is_bounded_by_its_timeout(run_dir):
    out = io.StringIO()
    with OtlpReceiver(delay=5) as rx:
        start = time.monotonic()
        rc = replay(run_dir, endpoint=rx.url, timeout=0.3, out=out)
        elapsed = time.monotonic() - start
    assert rc == 1
    # one timed-out request per signal, then that signal gives up: 3 x 0.3 s
    assert elapsed < 3, elapsed
    assert len(rx.requests) == 3
    assert "timed out" in out.getvalue()


def test_replay_retries_throttling_and_reports_http_errors_and_rejections(run_dir):
    with OtlpReceiver(fail_first=1) as rx:  # first answer 503, then 200
        assert replay(run_dir, endpoint=rx.url, out=io.StringIO()) == 0
    assert len(rx.span_ids()) == 12 + 1  # the refused first request was sent again

    out = io.StringIO()
    with OtlpReceiver(status=400) as rx:
        assert replay(run_dir, endpoint=rx.url, out=out) == 1
    assert "HTTP 400" in out.getvalue() and "12 requests failed" in out.getvalue()

    out = io.StringIO()
    answer = {"partialSuccess": {"rejectedSpans": "1", "errorMessage": "too old"}}
    with OtlpReceiver(answer=answer) as rx:
        assert replay(run_dir, endpoint=rx.url, out=out) == 1
    assert "12 spans rejected by the endpoint" in out.getvalue() and "too old" in out.getvalue()


def test_replay_skips_broken_lines_and_needs_files(run_dir, tmp_path):
    with open(next(run_dir.glob("traces-*.jsonl")), "a") as f:
        f.write('{"resourceSpans": [{"resou')  # a process killed while writing
    out = io.StringIO()
    with OtlpReceiver() as rx:
        assert replay(run_dir, endpoint=rx.url, out=out) == 0
    assert len(rx.span_ids()) == 12 and "1 lines that are not JSON skipped" in out.getvalue()

    empty = tmp_path / "empty"
    empty.mkdir()
    out = io.StringIO()
    assert replay(empty, endpoint="http://127.0.0.1:9", out=out) == 1
    assert "no telemetry files" in out.getvalue()


def test_headers_format(run_dir):
    assert parse_headers("a=1, b = x%3Dy ,") == {"a": "1", "b": "x=y"}
    with pytest.raises(ValueError):
        parse_headers("novalue")
    out = io.StringIO()
    assert replay(run_dir, endpoint="http://127.0.0.1:9", headers="broken", out=out) == 2
    assert "bad headers" in out.getvalue()


def test_cli_replay(run_dir, capsys):
    with OtlpReceiver() as rx:
        assert cli.main(["replay", str(run_dir), "--endpoint", rx.url, "--timeout", "5"]) == 0
    assert len(rx.span_ids()) == 12
    assert "12 spans sent" in capsys.readouterr().out
