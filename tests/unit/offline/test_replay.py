"""``otel-verl replay``: stored OTLP JSON lines to an OTLP/HTTP endpoint (hermetic, a local receiver)."""

from __future__ import annotations

import io
import json
import logging
import socket
import threading
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
from support.hostile_http import ScriptedEndpoint, answer, endless, trickle
from verl_cpu_harness.otlp_receiver import OtlpReceiver

from otel_verl import cli
from otel_verl.exits import PROBLEM, USAGE, CommandError
from otel_verl.offline.http_post import MAX_ANSWER_BYTES
from otel_verl.offline.otlp_files import SIGNALS, read_metric_points, read_spans
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


# -- endpoints whose answers are hostile (tests/hostile_http.py: raw sockets, scripted answers)


def _socket_buffers() -> int:
    """The most a TCP connection's two kernel buffers hold on this machine (sender's and receiver's)."""
    try:
        return sum(int(Path(f"/proc/sys/net/ipv4/tcp_{b}").read_text().split()[2]) for b in ("rmem", "wmem"))
    except OSError:
        return 64 * 2**20


def _replay_in_thread(folder: Path, bound: float, **kwargs) -> tuple[float, tuple[int, str, str]]:
    """(seconds, ``_replay``'s result) of a replay that must end within ``bound`` seconds."""
    done: list[tuple[int, str, str]] = []
    start = time.monotonic()
    worker = threading.Thread(target=lambda: done.append(_replay(folder, **kwargs)), daemon=True)
    worker.start()
    worker.join(bound)
    elapsed = time.monotonic() - start
    assert not worker.is_alive(), f"replay still running after {bound:g} s"
    return elapsed, done[0]


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_fails_the_request_and_nothing_goes_where_it_points(run_dir, code):
    with ScriptedEndpoint(lambda n, r: answer("200 OK", b"{}")) as elsewhere:
        there = f"{elsewhere.url}/v1/traces"
        target = f"{there}?token=s3cret"
        with ScriptedEndpoint(lambda n, r: answer(f"{code} Moved", Location=target)) as ep:
            rc, text, err = _replay(run_dir, endpoint=ep.url, headers="authorization=Bearer%20t0ken")
    assert elsewhere.requests == []  # neither the data nor the credentials went to the other origin
    assert len(ep.requests) == 20 and all(r.headers["authorization"] == "Bearer t0ken" for r in ep.requests)
    assert rc == PROBLEM and "0 spans sent in 0 requests from 2 files; 12 requests failed" in text
    assert (
        f"HTTP {code} Moved: redirected to {there}?[REDACTED] (not followed: replay sends only to the configured URL)"
        in text
    )
    assert "s3cret" not in text + err
    assert err.startswith("otel-verl replay: 20 requests failed (0 items replayed")


@pytest.mark.parametrize(
    "head",
    [b"HTTP/1.1 200 OK\r\nX-Slow: ", b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"],
    ids=["headers", "body"],
)
def test_a_trickling_answer_ends_at_the_deadline(run_dir, head):
    timeout = 1.0
    with ScriptedEndpoint(lambda n, r: trickle(head, 0.2, ep.closed)) as ep:  # a byte each 0.2 s, for ever
        # one deadline per signal (a request's retries are inside it), then that signal gives up
        bound = len(SIGNALS) * timeout + 10
        elapsed, (rc, text, _) = _replay_in_thread(run_dir, bound, endpoint=ep.url, timeout=timeout)
    assert rc == PROBLEM and text.count(f"timed out: no complete answer within {timeout:g} s") == 3
    assert len(ep.requests) == 3 and elapsed >= 3 * timeout


@pytest.mark.parametrize("status", ["200 OK", "400 Bad Request"])
def test_an_endless_answer_is_read_only_up_to_the_limit(run_dir, status):
    most = 256 * 2**20
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n".encode()
    with ScriptedEndpoint(lambda n, r: endless(head, most) if n == 1 else answer("200 OK", b"{}")) as ep:
        rc, text, err = _replay(run_dir, endpoint=ep.url)
        assert ep.sent[0].done.wait(30)  # the client left: the endpoint's next write failed
    # what the endpoint got out before that: the bounded read and what the sockets' buffers held
    assert ep.sent[0].size < MAX_ANSWER_BYTES + _socket_buffers() < most, ep.sent[0].size
    assert rc == PROBLEM and len(ep.requests) == 20
    if status == "200 OK":  # delivered; whether anything was rejected is unknown
        assert "12 spans sent in 12 requests from 2 files; 1 answers unreadable (rejections unknown)" in text
        assert "HTTP 200 OK: accepted, but its answer is longer than 65536 bytes (partialSuccess not read)" in text
        assert err.startswith("otel-verl replay: 1 answers unreadable (24 items replayed")
    else:
        assert "11 spans sent in 11 requests from 2 files; 1 requests failed" in text
        assert f"HTTP 400 Bad Request: {'x' * 300}..." in text


def test_retry_after_is_waited_within_the_deadline(run_dir):
    with ScriptedEndpoint(lambda n, r: answer("429 Slow Down", Retry_After="1") if n == 1 else answer("200 OK")) as ep:
        rc, text, err = _replay(run_dir, endpoint=ep.url, timeout=10)
    assert rc == 0, text + err
    assert len(ep.requests) == 21  # the first one twice
    assert ep.requests[0].body == ep.requests[1].body
    assert 1 <= ep.requests[1].at - ep.requests[0].at < 10  # as asked, and inside the request's deadline


def test_a_retry_after_past_the_deadline_fails_that_request_at_once(run_dir):
    timeout = 5
    with ScriptedEndpoint(lambda n, r: answer("503 Later", Retry_After="3600") if n == 1 else answer("200 OK")) as ep:
        rc, text, err = _replay(run_dir, endpoint=ep.url, timeout=timeout)
    assert rc == PROBLEM and len(ep.requests) == 20  # not sent again
    assert ep.requests[1].at - ep.requests[0].at < timeout  # the next request did not wait
    assert f"HTTP 503 Later: the endpoint asked to retry after 3600 s, past the {timeout} s deadline" in text
    assert "11 spans sent in 11 requests from 2 files; 1 requests failed" in text
    assert err.startswith("otel-verl replay: 1 requests failed (23 items replayed")


@pytest.mark.parametrize(
    ("count", "why"),
    [("abc", "its partialSuccess is not OTLP: "), (-5, "its partialSuccess rejectedSpans is -5, not a count")],
)
def test_a_malformed_partial_success_is_named_and_the_tally_kept(run_dir, capsys, count, why):
    with OtlpReceiver(answer={"partialSuccess": {"rejectedSpans": count}}) as rx:
        rc = cli.main(["replay", str(run_dir), "--endpoint", rx.url])
    out, err = capsys.readouterr()
    assert rc == PROBLEM and len(rx.span_ids()) == 12
    assert "12 spans sent in 12 requests from 2 files; 12 answers unreadable (rejections unknown)" in out
    assert f"HTTP 200 OK: accepted, but {why}" in out
    assert "8 data points sent in 4 requests from 2 files\n" in out  # rejectedSpans is no field of theirs
    assert err == f"otel-verl replay: 12 answers unreadable (24 items replayed from {run_dir}; details above)\n"


def test_what_the_endpoint_says_is_shown_escaped_on_one_line(run_dir):
    body = b"bad\x1b]0;owned\x07\r\nok: 24 items replayed"
    with ScriptedEndpoint(lambda n, r: answer("400 Bad\x1b[2J Request", body)) as ep:
        rc, text, _ = _replay(run_dir, endpoint=ep.url)
    assert rc == PROBLEM and len(ep.requests) == 20
    assert "HTTP 400 Bad\\x1b[2J Request: bad\\x1b]0;owned\\x07 ok: 24 items replayed\n" in text
    assert not any(c in text for c in "\x1b\x07\r")


def test_replay_goes_through_the_proxy_variables_as_urllib_does(run_dir, monkeypatch):
    with ScriptedEndpoint(lambda n, r: answer("200 OK", b"{}")) as proxy:
        for name in ("no_proxy", "NO_PROXY", "HTTP_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("http_proxy", proxy.url.replace("://", "://u:p%40ss@"))
        rc, text, err = _replay(run_dir, endpoint="http://collector.invalid:4318", headers="x-tenant=verl")
    assert rc == 0, text + err
    assert {r.target for r in proxy.requests} == {f"http://collector.invalid:4318/v1/{s}" for s in SIGNALS}
    assert all(r.headers["proxy-authorization"] == "Basic dTpwQHNz" for r in proxy.requests)  # u:p@ss
