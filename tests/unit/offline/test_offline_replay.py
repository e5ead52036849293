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
from otel_verl.offline.errors import PROBLEM, USAGE, CommandError
from otel_verl.offline.otlp_files import read_metric_points, read_spans
from otel_verl.offline.replay import MAX_REQUEST_BYTES, parse_headers, replay, signal_url, split_request


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


def _replay(folder: Path, **kwargs) -> tuple[int, str, str]:
    """(exit code as the CLI returns it, stdout, stderr) of ``replay``."""
    out, err = io.StringIO(), io.StringIO()
    try:
        rc = replay(folder, out=out, err=err, **kwargs)
    except CommandError as exc:
        rc = exc.code
        err.write(f"otel-verl replay: {exc}\n")
    return rc, out.getvalue(), err.getvalue()


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
        assert _replay(run_dir, env=env)[0] == 0
    assert {p for p, _, _ in traces_rx.requests} == {"/custom/traces"} and len(traces_rx.span_ids()) == 12
    assert {p for p, _, _ in rx.requests} == {"/v1/metrics", "/v1/logs"}
    for path, headers, _ in rx.requests:
        assert headers["x-api-key"] == ("logs" if path == "/v1/logs" else "abc")
    assert signal_url("metrics", None, {}) == "http://localhost:4318/v1/metrics"


def test_replay_fails_fast_on_a_refused_endpoint(run_dir):
    start = time.monotonic()
    rc, text, err = _replay(run_dir, endpoint=f"http://127.0.0.1:{_closed_port()}", timeout=2)
    assert rc == PROBLEM
    assert time.monotonic() - start < 5
    assert "0 spans sent in 0 requests" in text and "12 requests failed" in text and "refused" in text
    assert err == f"otel-verl replay: 20 requests failed (0 items replayed from {run_dir}; details above)\n"


def test_replay_is_bounded_by_its_timeout(run_dir):
    with OtlpReceiver(delay=5) as rx:
        start = time.monotonic()
        rc, text, _ = _replay(run_dir, endpoint=rx.url, timeout=0.3)
        elapsed = time.monotonic() - start
    assert rc == PROBLEM
    # one timed-out request per signal, then that signal gives up: 3 x 0.3 s
    assert elapsed < 3, elapsed
    assert len(rx.requests) == 3
    assert "timed out" in text


def test_replay_retries_throttling_and_reports_http_errors_and_rejections(run_dir):
    with OtlpReceiver(fail_first=1) as rx:  # first answer 503, then 200
        assert _replay(run_dir, endpoint=rx.url)[0] == 0
    assert len(rx.span_ids()) == 12 + 1  # the refused first request was sent again

    with OtlpReceiver(status=400) as rx:
        rc, text, _ = _replay(run_dir, endpoint=rx.url)
    assert rc == PROBLEM and "HTTP 400" in text and "12 requests failed" in text

    answer = {"partialSuccess": {"rejectedSpans": "1", "errorMessage": "too old"}}
    with OtlpReceiver(answer=answer) as rx:
        rc, text, err = _replay(run_dir, endpoint=rx.url)
    assert rc == PROBLEM and "12 spans rejected by the endpoint" in text and "too old" in text
    assert err.startswith("otel-verl replay: 12 items rejected (")


def test_replay_skips_broken_lines_and_needs_files(run_dir, tmp_path):
    with open(next(run_dir.glob("traces-*.jsonl")), "a") as f:
        f.write('{"resourceSpans": [{"resou')  # a process killed while writing
    with OtlpReceiver() as rx:
        rc, _, err = _replay(run_dir, endpoint=rx.url)
    assert rc == 0 and len(rx.span_ids()) == 12
    assert err == "otel-verl replay: warning: skipped 1 line: traces-taskrunner-11.jsonl line 7 (cut short)\n"

    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = _replay(empty, endpoint="http://127.0.0.1:9")
    assert rc == PROBLEM and "no telemetry files" in err


def test_headers_format(run_dir):
    assert parse_headers("a=1, b = x%3Dy ,") == {"a": "1", "b": "x=y"}
    with pytest.raises(ValueError, match="entry 2 is not key=value"):
        parse_headers("a=1,s3cret-token")
    rc, _, err = _replay(run_dir, endpoint="http://127.0.0.1:9", headers="Bearer s3cret")
    assert (rc, err) == (USAGE, "otel-verl replay: --headers: entry 1 is not key=value (values not shown)\n")
    rc, _, err = _replay(run_dir, env={"OTEL_EXPORTER_OTLP_LOGS_HEADERS": "a=1,s3cret"})
    assert rc == USAGE and "OTEL_EXPORTER_OTLP_LOGS_HEADERS: entry 2" in err and "s3cret" not in err


@pytest.mark.parametrize(
    ("endpoint", "env", "message"),
    [
        ("not a url", {}, "--endpoint='not a url' is not a valid URL (it contains a space)"),
        ("collector:4318", {}, "--endpoint='collector:4318' is not a valid URL (OTLP/HTTP needs http:// or https://)"),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"}, "OTEL_EXPORTER_OTLP_ENDPOINT='not a url' is not a valid"),
        (None, {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:123456"}, "_METRICS_ENDPOINT='http://c:123456' is"),
        ("http://u:s3cret@c:99999", {}, "--endpoint='http://[REDACTED]@c:99999' is not a valid URL (its port"),
    ],
)
def test_a_malformed_endpoint_is_a_usage_error_before_anything_is_sent(run_dir, endpoint, env, message):
    rc, out, err = _replay(run_dir, endpoint=endpoint, env=env)
    assert rc == USAGE and out == ""
    assert err.startswith("otel-verl replay: ") and message in err and err.count("\n") == 1


def test_a_line_above_the_request_limit_is_split_and_every_span_arrives(run_dir):
    path = next(run_dir.glob("traces-*.jsonl"))
    spans = [
        s
        for line in path.read_text().splitlines()
        for s in json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    ]
    first = json.loads(path.read_text().splitlines()[0])
    first["resourceSpans"][0]["scopeSpans"][0]["spans"] = spans * 20  # 120 spans in one stored line
    big = json.dumps(first)
    with open(path, "a") as f:
        f.write(big + "\n")
    limit = len(big) // 5
    with OtlpReceiver(max_body=limit) as rx:  # refuses what is above the limit, as a Collector does
        rc, text, err = _replay(run_dir, endpoint=rx.url, max_request_bytes=limit)
    assert rc == 0, text + err
    assert max(rx.sizes) <= limit and len(rx.sizes) >= 12 + 5 + 4 + 4
    assert sorted(rx.span_ids()) == sorted(s.span_id for s in read_spans(run_dir))  # every stored span, once
    assert f"; 1 stored lines above {limit} bytes split into " in text
    pieces = [b for b in rx.bodies("/v1/traces") if len(b["resourceSpans"][0]["scopeSpans"][0]["spans"]) > 1]
    assert len(pieces) >= 5  # the stored lines of SimpleSpanProcessor hold one span each
    for body in pieces:  # the split requests keep their resource and scope
        for rs in body["resourceSpans"]:
            assert rs["resource"] == first["resourceSpans"][0]["resource"]
            assert rs["scopeSpans"][0]["scope"] == first["resourceSpans"][0]["scopeSpans"][0]["scope"]


def test_split_request_sends_a_single_oversized_item_alone_and_replay_warns(run_dir):
    request = {
        "resourceLogs": [
            {
                "resource": {},
                "scopeLogs": [{"scope": {}, "logRecords": [{"body": {"stringValue": "x" * 5000}}, {"body": {}}]}],
            }
        ]
    }
    bodies = split_request("logs", request, 2048)
    assert [n for _, n in bodies] == [1, 1] and len(bodies[0][0]) > 2048 >= len(bodies[1][0])
    assert MAX_REQUEST_BYTES == 20 * 1024 * 1024  # the Collector's default max_request_body_size
    with open(next(run_dir.glob("logs-*.jsonl")), "a") as f:
        f.write(json.dumps(request) + "\n")
    with OtlpReceiver() as rx:
        rc, _, err = _replay(run_dir, endpoint=rx.url, max_request_bytes=2048)
    assert rc == 0 and rx.log_records() == 4 + 2
    assert err == (
        "otel-verl replay: warning: 1 requests hold one item larger than 2048 bytes alone; "
        "the endpoint may refuse them\n"
    )


def test_cli_replay(run_dir, capsys):
    with OtlpReceiver() as rx:
        assert cli.main(["replay", str(run_dir), "--endpoint", rx.url, "--timeout", "5"]) == 0
    assert len(rx.span_ids()) == 12
    captured = capsys.readouterr()
    assert "12 spans sent" in captured.out and captured.err == ""
