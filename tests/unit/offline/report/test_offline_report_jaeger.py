"""``otel-verl report --jaeger URL --run RUN_ID`` (``otel_verl.live.jaeger_report``) against a stand-in
Jaeger: an HTTP server that answers API v3 as Jaeger v2 does (the traces as OTLP JSON under
``result``), and the hostile answers it may give instead. The real Jaeger with a real run:
``tests/e2e/test_live_stack.py``."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support.otlp_json import span

from otel_verl import cli, semconv
from otel_verl.exits import USAGE, CommandError
from otel_verl.live.jaeger_report import jaeger_report
from otel_verl.offline.report import build


class FakeJaeger(ThreadingHTTPServer):
    """Jaeger's API v3 over the resources of ``folder``'s trace files; ``mode`` makes it misbehave."""

    def __init__(self, folder: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.resource_spans = [
            rs
            for path in sorted(folder.glob("traces-*.jsonl"))
            for line in path.read_text().splitlines()
            for rs in json.loads(line)["resourceSpans"]
        ]
        self.mode = "ok"
        self.asked: list[tuple[str, dict[str, str]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeJaeger

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        parts = urllib.parse.urlsplit(self.path)
        self.server.asked.append((parts.path, dict(urllib.parse.parse_qsl(parts.query))))
        mode = self.server.mode
        if parts.path == "/api/v3/services":
            return self._send(200, json.dumps({"services": ["verl", 7, "other"]}).encode())
        if mode == "redirect":
            self.send_response(302)
            self.send_header("Location", "http://example.invalid/steal")
            self.end_headers()
            return None
        if mode == "not-json":
            return self._send(200, b"<html>a proxy's login page</html>")
        if mode == "nothing":
            return self._send(404, b'{"error":{"httpCode":404,"message":"No traces found"}}')
        if self.server.asked[-1][1].get("query.service_name") != "verl":
            return self._send(404, b'{"error":{"httpCode":404,"message":"No traces found"}}')
        # a span Jaeger holds twice (an export the Collector sent again) is one span of the run
        found = [*self.server.resource_spans, self.server.resource_spans[0]]
        _, other = span(semconv.SPAN_STEP, "e" * 16, 0, 1, verl__step=1)
        found.append(
            {
                "resource": {"attributes": [{"key": semconv.RES_RUN_ID, "value": {"stringValue": "other-run"}}]},
                "scopeSpans": [{"spans": [other]}],
            }
        )
        found.append({"resource": "not a resource", "scopeSpans": 5})  # hostile: neither kept nor fatal
        self._send(200, json.dumps({"result": {"resourceSpans": found}}).encode())

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def jaeger(v1_run: Path) -> Iterator[FakeJaeger]:
    server = FakeJaeger(v1_run)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_the_page_from_jaeger_is_the_page_of_the_run_files(jaeger, v1_run, tmp_path):
    from_files = build(v1_run)
    path, rep, fetched = jaeger_report(jaeger.url, "run-1", tmp_path / "page.html")
    # the run's resources only, each span once: the other run's step, the malformed resource and
    # the repeated one are left out
    assert rep.spans == from_files.spans and fetched.other_runs == {"other-run"}
    assert [s.step for s in rep.steps] == [s.step for s in from_files.steps] == [1, 2]
    assert rep.default_step == from_files.default_step
    assert rep.slowest.span_id == from_files.slowest.span_id
    # every service was searched over a window, with a bound on the traces
    searches = [q for p, q in jaeger.asked if p == "/api/v3/traces"]
    assert sorted(q["query.service_name"] for q in searches) == ["other", "verl"]
    assert all(q["query.start_time_min"] < q["query.start_time_max"] for q in searches)
    assert {q["query.num_traces"] for q in searches} == {"5000"}
    page = path.read_text()
    assert f"<dd>Jaeger at {jaeger.url}: 1 trace, 0 metric, 0 log files" in page
    assert "curves are not read from the stack: Prometheus has them" in page
    assert "metrics-*.jsonl missing" not in page  # the folder's note, not true of a page from Jaeger
    assert '<section class="timeline shown" data-step="2">' in page


def test_a_run_jaeger_does_not_have_names_the_runs_it_has(jaeger, tmp_path):
    with pytest.raises(CommandError, match="no spans of run nope .* the runs it has there: other-run, run-1"):
        jaeger_report(jaeger.url, "nope", tmp_path / "page.html", service="verl")
    jaeger.mode = "nothing"
    with pytest.raises(CommandError, match=r"no spans of run run-1 in the last 24 h \(0 traces of verl\)$"):
        jaeger_report(jaeger.url, "run-1", tmp_path / "page.html", service="verl")
    assert not (tmp_path / "page.html").exists()


@pytest.mark.parametrize(
    ("mode", "max_bytes", "why"),
    [
        ("ok", 4096, "went past --max-bytes; raise it"),  # the whole answer or none: never part of a run
        ("redirect", None, r"answered /api/v3/traces with 302 \(redirect to http://example.invalid/steal\)"),
        ("not-json", None, "with something that is not JSON"),
    ],
)
def test_hostile_answers_end_in_one_line_and_no_page(jaeger, tmp_path, mode, max_bytes, why):
    jaeger.mode = mode
    kwargs = {"max_bytes": max_bytes} if max_bytes else {}
    with pytest.raises(CommandError, match=why):
        jaeger_report(jaeger.url, "run-1", tmp_path / "page.html", service="verl", **kwargs)
    assert not (tmp_path / "page.html").exists()


def test_a_jaeger_that_does_not_answer_in_time(tmp_path):
    import socket

    with socket.socket() as s:  # listens, never answers
        s.bind(("127.0.0.1", 0))
        s.listen()
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(CommandError, match="gave no answer to /api/v3/traces: timed out"):
            jaeger_report(url, "run-1", tmp_path / "page.html", service="verl", timeout=0.5)


def test_command_line(jaeger, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "--jaeger", jaeger.url, "--run", "run-1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("wrote report-run-1.html: 2 steps, ") and "note: spans from Jaeger" in out
    assert (tmp_path / "report-run-1.html").read_text().startswith("<!DOCTYPE html>")
    for argv, message in [
        (["report"], "give a run folder or --jaeger URL --run RUN_ID"),
        (["report", str(tmp_path), "--jaeger", jaeger.url], "give a run folder or --jaeger URL --run RUN_ID"),
        (
            ["report", "--jaeger", jaeger.url],
            f"give --run RUN_ID; the runs Jaeger at {jaeger.url} has: other-run, run-1",
        ),
        (["report", "--jaeger", "http://u:secret@127.0.0.1:1", "--run", "r"], "without credentials"),
        (["report", "--jaeger", "localhost:16686", "--run", "r"], "is not an http"),
    ]:
        assert cli.main(argv) == USAGE, argv
        err = capsys.readouterr().err
        assert message in err and "secret" not in err, (argv, err)
