"""``otel-verl``: every command, given bad input, ends with one line on stderr and its exit code
(0 ok, 1 problem found, 2 usage error), never a traceback, and never changes the run's files.

Each case runs the real entry point ``otel_verl.cli.main`` (the last ones ``python -m
otel_verl.cli`` in a subprocess) on a small run written by the OpenTelemetry SDK's own file
exporters, spoiled as the case says.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.json.file.metric_exporter import FileMetricExporter
from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from verl_cpu_harness.otlp_receiver import OtlpReceiver

from otel_verl import cli, semconv
from otel_verl.exits import OK, PROBLEM, USAGE
from otel_verl.offline import otlp_files

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """Two training steps of one TaskRunner as its file exporters write them."""
    folder = tmp_path / "run"
    folder.mkdir()
    resource = Resource.create({"service.name": "verl", semconv.RES_ROLE: "taskrunner", semconv.RES_RUN_ID: "r1"})
    tp = TracerProvider(resource=resource)
    tp.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path=folder / "traces-taskrunner-1.jsonl")))
    tracer = tp.get_tracer("otel_verl")
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader], resource=resource)
    step_gauge = mp.get_meter("otel_verl").create_gauge(semconv.M_TRAINING_STEP)
    metrics = FileMetricExporter(path=folder / "metrics-taskrunner-1.jsonl")
    for step in (1, 2):
        with tracer.start_as_current_span(semconv.SPAN_STEP, attributes={semconv.ATTR_STEP: step}):
            with tracer.start_as_current_span("verl.gen", attributes={semconv.ATTR_STAGE: "gen"}):
                with tracer.start_as_current_span(semconv.SPAN_ROLLOUT_TRAJECTORY):
                    pass
        step_gauge.set(step)
        metrics.export(reader.get_metrics_data())
    tp.shutdown()
    metrics.shutdown()
    mp.shutdown()
    return folder


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spoil_all(folder: Path) -> None:
    """Every kind of damage at once, next to readable data."""
    with open(folder / "traces-taskrunner-1.jsonl", "a") as f:
        f.write('{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5}]}]}]}\n')  # JSON, not OTLP
        f.write('{"resourceSpans": [{"reso')  # cut short: a process killed while writing
    (folder / "metrics-junk-2.jsonl").write_bytes(bytes(range(256)) * 64)  # random bytes
    (folder / "traces-deep-3.jsonl").write_text("[" * 3000 + "\n")  # nested past the JSON decoder's depth limit
    (folder / "traces-dir-4.jsonl").mkdir()  # unreadable: a folder
    (folder / "traces-gone-5.jsonl").symlink_to(folder / "nowhere")  # unreadable: dangling link
    big = {"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x" * 10_000}]}]}]}
    (folder / "traces-big-6.jsonl").write_text(json.dumps(big) + "\n")  # above MAX_LINE_BYTES (patched)


# (id, argv with {run}/{tmp}, env, prepare(run, tmp), exit code, what stderr's one line must say)
Case = tuple[str, list[str], dict[str, str], Callable[[Path, Path], None] | None, int, str]
CASES: list[Case] = [
    # -- usage errors (2): the command line
    ("no-command", [], {}, None, USAGE, "otel-verl: error: the following arguments are required: COMMAND"),
    ("unknown-command", ["bogus"], {}, None, USAGE, "argument COMMAND: invalid choice: 'bogus'"),
    ("unknown-option", ["summary", "{run}", "--bogus"], {}, None, USAGE, "unrecognized arguments: --bogus"),
    ("missing-folder-arg", ["report"], {}, None, USAGE, "give a run folder or --jaeger URL --run RUN_ID"),
    ("doctor-extra-arg", ["doctor", "now"], {}, None, USAGE, "otel-verl: error: unrecognized arguments: now"),
    ("timeout-negative", ["replay", "{run}", "--timeout", "-1"], {}, None, USAGE, "'-1' is not a number of seconds"),
    ("timeout-word", ["replay", "{run}", "--timeout", "soon"], {}, None, USAGE, "argument --timeout: 'soon' is not"),
    ("timeout-nan", ["replay", "{run}", "--timeout", "nan"], {}, None, USAGE, "argument --timeout: 'nan' is not"),
    ("timeout-zero", ["replay", "{run}", "--timeout", "0"], {}, None, USAGE, "argument --timeout: '0' is not"),
    ("timeout-huge", ["replay", "{run}", "--timeout", "1e30"], {}, None, USAGE, "'1e30' is not a number of seconds"),
    (
        "headers-crlf",
        ["replay", "{run}", "--headers", "x=a%0D%0AHost:%20evil"],
        {},
        None,
        USAGE,
        "--headers: entry 1: the value has a character an HTTP header cannot carry",
    ),
    (
        "headers-name",
        ["replay", "{run}", "--headers", "bad name=1"],
        {},
        None,
        USAGE,
        "--headers: entry 1: the header name is not an HTTP token",
    ),
    ("headers-unicode", ["replay", "{run}", "--headers", "x=%E2%82%AC"], {}, None, USAGE, "cannot carry"),
    ("max-request-tiny", ["replay", "{run}", "--max-request-bytes", "10"], {}, None, USAGE, "'10' is not a number"),
    ("endpoint-not-url", ["replay", "{run}", "--endpoint", "not a url"], {}, None, USAGE, "--endpoint='not a url' is"),
    ("endpoint-scheme", ["replay", "{run}", "--endpoint", "ftp://c:4318"], {}, None, USAGE, "the scheme is 'ftp'"),
    ("endpoint-port", ["replay", "{run}", "--endpoint", "http://c:99999"], {}, None, USAGE, "its port is not"),
    ("headers-flag", ["replay", "{run}", "--headers", "Bearer s3cret"], {}, None, USAGE, "--headers: entry 1 is not"),
    # -- usage errors (2): the environment the command reads
    (
        "env-endpoint",
        ["replay", "{run}"],
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"},
        None,
        USAGE,
        "OTEL_EXPORTER_OTLP_ENDPOINT='not a url' is not a valid URL (it contains a space)",
    ),
    (
        "env-signal-endpoint",
        ["replay", "{run}"],
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"},
        None,
        USAGE,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT='collector:4318' is not a valid URL",
    ),
    (
        "env-headers",
        ["replay", "{run}"],
        {"OTEL_EXPORTER_OTLP_HEADERS": "s3cret"},
        None,
        USAGE,
        "OTEL_EXPORTER_OTLP_HEADERS: entry 1 is not key=value (values not shown)",
    ),
    # -- usage errors (2): paths
    ("summary-missing", ["summary", "{tmp}/nothing"], {}, None, USAGE, "/nothing does not exist"),
    ("report-missing", ["report", "{tmp}/nothing"], {}, None, USAGE, "/nothing does not exist"),
    ("replay-missing", ["replay", "{tmp}/nothing"], {}, None, USAGE, "/nothing does not exist"),
    ("summary-a-file", ["summary", "{run}/traces-taskrunner-1.jsonl"], {}, None, USAGE, "is not a folder"),
    (
        "report-over-input",
        ["report", "{run}", "-o", "{run}/metrics-taskrunner-1.jsonl"],
        {},
        None,
        USAGE,
        "is one of the run's telemetry files; the report never writes over them",
    ),
    ("report-into-folder", ["report", "{run}", "-o", "{tmp}"], {}, None, USAGE, "is a folder; give the HTML file"),
    # -- problems found (1)
    (
        "summary-empty",
        ["summary", "{tmp}/empty"],
        {},
        lambda r, t: (t / "empty").mkdir(),
        PROBLEM,
        "no telemetry files (traces-*.jsonl, metrics-*.jsonl) in",
    ),
    ("report-empty", ["report", "{tmp}/empty"], {}, lambda r, t: (t / "empty").mkdir(), PROBLEM, "no telemetry"),
    ("replay-empty", ["replay", "{tmp}/empty"], {}, lambda r, t: (t / "empty").mkdir(), PROBLEM, "no telemetry"),
    (
        "summary-empty-files",
        ["summary", "{tmp}/e"],
        {},
        lambda r, t: (t / "e").mkdir() or (t / "e" / "traces-a.jsonl").touch(),
        PROBLEM,
        "no spans or metric points could be read from",
    ),
    (
        "summary-only-garbage",
        ["summary", "{tmp}/g"],
        {},
        lambda r, t: (t / "g").mkdir() or (t / "g" / "traces-a.jsonl").write_bytes(bytes(range(256)) * 8),
        PROBLEM,
        "no spans or metric points could be read from",
    ),
    (
        "report-only-truncated",
        ["report", "{tmp}/c", "-o", "{tmp}/c.html"],
        {},
        lambda r, t: (t / "c").mkdir() or (t / "c" / "metrics-a.jsonl").write_text('{"resourceMetrics": [{'),
        PROBLEM,
        "hold no spans and no metric points (skipped 1 line: metrics-a.jsonl line 1 (cut short))",
    ),
    (
        "report-unwritable",
        ["report", "{run}", "-o", "{tmp}/blocker/page.html"],
        {},
        lambda r, t: (t / "blocker").write_text(""),
        PROBLEM,
        "cannot write the report to",
    ),
    (
        "replay-refused",
        ["replay", "{run}", "--endpoint", "http://127.0.0.1:{closed}", "--timeout", "2"],
        {},
        None,
        PROBLEM,
        "requests failed (0 items replayed from",
    ),
    (
        "doctor-env-url",
        ["doctor"],
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url", "OTEL_METRICS_EXPORTER": "none"},
        None,
        PROBLEM,
        "traces: OTEL_EXPORTER_OTLP_ENDPOINT='not a url' is not a valid URL",
    ),
    (
        "doctor-env-setting",
        ["doctor"],
        {"OTEL_VERL_SHUTDOWN_TIMEOUT": "soon", "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
        None,
        PROBLEM,
        "ignoring OTEL_VERL_SHUTDOWN_TIMEOUT='soon'",
    ),
    (
        "doctor-env-protocol",
        ["doctor"],
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "thrift", "OTEL_METRICS_EXPORTER": "none"},
        None,
        PROBLEM,
        "OTEL_EXPORTER_OTLP_PROTOCOL='thrift' is not one of grpc, http/protobuf, http/json",
    ),
    # -- done (0), with what was skipped named on stderr
    (
        "summary-spoiled",
        ["summary", "{run}"],
        {},
        lambda r, t: _spoil_all(r),
        OK,
        "otel-verl summary: warning: skipped 69 lines and 2 unreadable files: ",
    ),
    (
        "report-spoiled",
        ["report", "{run}", "-o", "{tmp}/r.html"],
        {},
        lambda r, t: _spoil_all(r),
        OK,
        "otel-verl report: warning: skipped 69 lines and 2 unreadable files: ",
    ),
]


def _fill(arg: str, run: Path, tmp: Path, closed: int) -> str:
    return arg.replace("{run}", str(run)).replace("{tmp}", str(tmp)).replace("{closed}", str(closed))


def _snapshot(folder: Path) -> dict[str, str]:
    """Every regular file under ``folder`` (links not followed) -> its bytes' hash."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def quiet_env(monkeypatch):
    """No OTLP/otel-verl settings from the machine; doctor's hook list cut to nothing (verl's import is slow)."""
    for var in list(os.environ):
        if var.startswith(("OTEL_EXPORTER_OTLP_", "OTEL_VERL_")) or var.endswith("_EXPORTER"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
    monkeypatch.setattr("otel_verl.hooks.all_hooks", lambda: [])
    monkeypatch.setattr(otlp_files, "MAX_LINE_BYTES", 4096)
    return monkeypatch


@pytest.mark.parametrize(
    ("argv", "env", "prepare", "code", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_ends_in_one_line_and_an_exit_code(
    run, tmp_path, quiet_env, capsys, argv, env, prepare, code, message
):
    if prepare is not None:
        prepare(run, tmp_path)
    for k, v in env.items():
        quiet_env.setenv(k, v)
    before = _snapshot(tmp_path)
    closed = _closed_port()
    try:
        rc = cli.main([_fill(a, run, tmp_path, closed) for a in argv])
    except SystemExit as exc:  # argparse's own exits
        rc = exc.code
    captured = capsys.readouterr()
    err = captured.err
    assert rc == code, err
    assert err.count("\n") == 1 and err.endswith("\n"), err  # one line
    assert _fill(message, run, tmp_path, closed) in err
    assert "Traceback" not in err + captured.out and "unexpected error" not in err
    assert " cmd" not in err and "s3cret" not in err  # argparse's dest; header values
    after = _snapshot(tmp_path)
    written = {k for k in after if k not in before}
    assert {k: after[k] for k in before} == before  # no input changed
    assert written <= {"run/report.html", "r.html"}, written


def test_the_spoiled_run_names_each_skipped_place(run, quiet_env, capsys):
    _spoil_all(run)
    assert cli.main(["summary", str(run)]) == OK
    captured = capsys.readouterr()
    assert "gen" in captured.out and "2 training steps" in captured.out  # the readable part is shown
    for place in (
        "traces-dir-4.jsonl (cannot read: Is a directory)",
        "traces-gone-5.jsonl (cannot read: No such file or directory)",
        "metrics-junk-2.jsonl 65 lines from line 1 (not JSON; not UTF-8 text)",
        "traces-deep-3.jsonl line 1 (not JSON)",
        "traces-big-6.jsonl line 1 (longer than 4096 bytes)",
        "traces-taskrunner-1.jsonl 2 lines from line 7 (cut short; not an OTLP traces request)",
    ):
        assert place in captured.err


def test_replay_of_the_spoiled_run_sends_the_rest_and_names_what_it_skipped(run, tmp_path, quiet_env, capsys):
    _spoil_all(run)
    before = _snapshot(tmp_path)
    with OtlpReceiver() as rx:
        assert cli.main(["replay", str(run), "--endpoint", rx.url]) == OK
    assert len(rx.span_ids()) == 6 and rx.metric_points() == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("otel-verl replay: warning: skipped 69 lines and 2 unreadable files")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("command", ["", "summary", "report", "replay", "doctor"])
def test_help_has_no_rst_markup_and_states_the_exit_codes(command, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"] if command else ["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text and "cmd" not in text
    assert "exit codes: 0 ok, 1 problem found (named on stderr), 2 usage error" in " ".join(text.split())


def test_an_unexpected_error_is_one_line_too(run, quiet_env, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    quiet_env.setattr("otel_verl.offline.summary.build", broken)
    assert cli.main(["summary", str(run)]) == PROBLEM
    err = capsys.readouterr().err
    assert err == "otel-verl summary: unexpected error RuntimeError: boom (a bug in otel-verl: please report it)\n"


@pytest.mark.parametrize(
    ("argv", "env", "code", "message"),
    [
        ([], {}, USAGE, "the following arguments are required: COMMAND"),
        (["replay", "{run}"], {"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"}, USAGE, "is not a valid URL"),
        (["summary", "{run}/nothing"], {}, USAGE, "does not exist"),
    ],
)
def test_the_module_entry_point_in_a_subprocess(run, argv, env, code, message):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-m", "otel_verl.cli", *(a.replace("{run}", str(run)) for a in argv)],
        env={**clean, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == code
    assert result.stderr.count("\n") == 1 and message in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_closed_pipe_is_not_an_error(run):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    reader = subprocess.Popen(
        [sys.executable, "-m", "otel_verl.cli", "summary", str(run)],
        env={**clean, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    reader.stdout.close()  # `otel-verl summary DIR | head -0`
    _, err = reader.communicate(timeout=120)
    assert b"Traceback" not in err and reader.returncode in (0, 1)
