"""``otel_verl.offline.otlp_files``: reading the OTLP JSON lines the file exporters write."""

from __future__ import annotations

import json
import math
import os

import pytest
from support.otlp_json import gauge, span, traj_hist, write_metrics, write_spans

from otel_verl import semconv
from otel_verl.exits import PROBLEM, USAGE, CommandError
from otel_verl.offline import otlp_files
from otel_verl.offline.otlp_files import (
    Skipped,
    count_items,
    iter_lines,
    read_metric_points,
    read_spans,
    run_folder,
    signal_files,
)


def test_spans_and_points_are_decoded(tmp_path):
    sid, root = span(semconv.SPAN_STEP, "c" * 16, 0, 2, verl__step=3, verl__ok=True)
    _, child = span("verl.gen", "c" * 16, 0.5, 1.5, sid, status="STATUS_CODE_ERROR", verl__stage="gen")
    write_spans(tmp_path, "taskrunner", 7, [root, child])
    write_metrics(tmp_path, "taskrunner", 7, 1, [gauge(semconv.M_TRAINING_STEP, 3), traj_hist([1, 2, 0, 0], 0.4)])
    spans = {s.name: s for s in read_spans(tmp_path)}
    step, gen = spans[semconv.SPAN_STEP], spans["verl.gen"]
    assert step.attributes == {"verl.step": 3, "verl.ok": True}  # int64 strings are ints again
    assert step.seconds == 2.0 and step.parent_id == "" and gen.parent_id == sid
    assert gen.status == "STATUS_CODE_ERROR" and step.status == "STATUS_CODE_UNSET"
    assert step.resource["process.pid"] == 7
    points = {p.name: p for p in read_metric_points(tmp_path)}
    assert points[semconv.M_TRAINING_STEP].kind == "gauge" and points[semconv.M_TRAINING_STEP].value == 3.0
    hist = points[semconv.M_ROLLOUT_TRAJECTORY_DURATION]
    assert (hist.kind, hist.count, hist.value, hist.temporality) == ("histogram", 3, 0.4, 2)
    assert hist.bounds == [0.1, 0.5, 1.0] and hist.bucket_counts == [1, 2, 0, 0]


def test_broken_lines_are_skipped_and_reported(tmp_path):
    write_metrics(tmp_path, "worker0", 1, 1, [gauge("verl.a", 1.0)])
    path = tmp_path / "metrics-worker0-1.jsonl"
    with open(path, "a") as f:
        f.write("\n[1, 2]\n")  # JSON, but not an export request
        f.write('{"resourceSpans": []}\n')  # a request of another signal
        f.write(
            '{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"gauge": {"dataPoints": [{}]}}]}]}]}\n'
        )  # no name
        f.write("[" * 100_000 + "\n")  # nested deeper than the JSON decoder recurses
        f.write('{"resourceMetrics": [{"reso')  # a process killed while writing
    skipped = Skipped()
    assert len(read_metric_points(tmp_path, skipped)) == 1
    assert skipped.lines == {
        path: [
            (3, "not an OTLP export request"),
            (4, "not an OTLP metrics request"),
            (5, "not an OTLP metrics request"),
            (6, "not JSON"),
            (7, "cut short"),
        ]
    }
    assert skipped.describe() == (
        "skipped 5 lines: metrics-worker0-1.jsonl 5 lines from line 3 "
        "(cut short; not JSON; not an OTLP export request; not an OTLP metrics request)"
    )
    assert signal_files(tmp_path, "metrics") == [path] and signal_files(tmp_path, "traces") == []


def test_binary_oversized_and_unreadable_files_are_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(otlp_files, "MAX_LINE_BYTES", 4096)
    _, root = span(semconv.SPAN_STEP, "d" * 16, 0, 1, verl__step=1)
    write_spans(tmp_path, "taskrunner", 1, [root])
    big = {"resourceSpans": [{"scopeSpans": [{"spans": [root] * 40}]}]}
    with open(tmp_path / "traces-taskrunner-1.jsonl", "a") as f:
        f.write(json.dumps(big) + "\n")  # valid, but longer than the limit
        f.write(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [root]}]}]}) + "\n")  # read again after it
    (tmp_path / "traces-junk-2.jsonl").write_bytes(b"\x00\xff\xfe garbage \x80\n" * 3)
    (tmp_path / "traces-dir-3.jsonl").mkdir()
    (tmp_path / "traces-gone-4.jsonl").symlink_to(tmp_path / "nowhere")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    skipped = Skipped()
    assert [s.name for s in read_spans(tmp_path, skipped)] == [semconv.SPAN_STEP] * 2
    assert skipped.lines == {
        tmp_path / "traces-taskrunner-1.jsonl": [(2, "longer than 4096 bytes")],
        tmp_path / "traces-junk-2.jsonl": [(1, "not UTF-8 text"), (2, "not UTF-8 text"), (3, "not UTF-8 text")],
    }
    assert skipped.files == {
        tmp_path / "traces-dir-3.jsonl": "cannot read: Is a directory",
        tmp_path / "traces-gone-4.jsonl": "cannot read: No such file or directory",
    }
    assert skipped.describe().startswith("skipped 4 lines and 2 unreadable files: traces-dir-3.jsonl (cannot read")
    assert skipped.describe(most=3).endswith(", and 1 more files")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before  # read only


def test_run_folder_says_what_is_wrong(tmp_path):
    with pytest.raises(CommandError, match="does not exist") as exc:
        run_folder(tmp_path / "missing")
    assert exc.value.code == USAGE
    (tmp_path / "file").write_text("")
    with pytest.raises(CommandError, match="is not a folder") as exc:
        run_folder(tmp_path / "file")
    assert exc.value.code == USAGE
    with pytest.raises(CommandError, match=r"no telemetry files \(traces-\*.jsonl, metrics-\*.jsonl\)") as exc:
        run_folder(tmp_path, ("traces", "metrics"))
    assert exc.value.code == PROBLEM
    (tmp_path / "logs-a-1.jsonl").write_text("")
    assert run_folder(tmp_path) == tmp_path


def test_an_unreadable_folder_is_a_problem(tmp_path, monkeypatch):
    def denied(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(otlp_files.os, "scandir", denied)  # as chmod 000 does for a user other than root
    with pytest.raises(CommandError, match=f"cannot read {tmp_path}: Permission denied") as exc:
        run_folder(tmp_path)
    assert exc.value.code == PROBLEM


def test_count_items_per_signal(tmp_path):
    write_metrics(tmp_path, "worker0", 1, 1, [gauge("verl.a", 1.0), gauge("verl.b", 2.0)])
    ((number, _, batch),) = iter_lines(tmp_path / "metrics-worker0-1.jsonl")
    assert number == 1
    assert count_items("metrics", batch) == 2
    logs = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{}, {}, {}]}]}]}
    assert count_items("logs", json.loads(json.dumps(logs))) == 3
    assert count_items("traces", {"resourceSpans": [{"scopeSpans": [{"spans": [{}]}, {"spans": [{}]}]}]}) == 2
    with pytest.raises(ValueError, match="not an OTLP traces request"):
        count_items("traces", {"resourceSpans": 7})


def test_a_span_status_reads_the_same_as_number_or_name(tmp_path):
    """The JSON file exporter writes ``"code": 2``, protojson ``"STATUS_CODE_ERROR"``: both are read,
    as the name (a reader that refused numbers lost every batch holding a failed span)."""
    from otel_verl.offline.otlp_files import read_spans

    spans = [
        {"traceId": "ab" * 16, "spanId": f"{i:016x}", "name": f"s{i}", "startTimeUnixNano": "1",
         "endTimeUnixNano": "2", "status": status}
        for i, status in enumerate([{"code": 2, "message": "boom"}, {"code": "STATUS_CODE_ERROR"}, {}, {"code": 1}])
    ]  # fmt: skip
    line = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]}
    (tmp_path / "traces-taskrunner-1.jsonl").write_text(json.dumps(line) + "\n")
    assert [s.status for s in read_spans(tmp_path)] == [
        "STATUS_CODE_ERROR",
        "STATUS_CODE_ERROR",
        "STATUS_CODE_UNSET",
        "STATUS_CODE_OK",
    ]


def test_a_map_body_is_read_as_json_text_and_keeps_its_batch(tmp_path):
    """A sampled generation's body is an OTLP map ({prompt, response}); the stall report sent in
    the same export must not be lost with it (it once was: the whole line was skipped)."""
    kv = {"kvlistValue": {"values": [{"key": "prompt", "value": {"stringValue": "p"}}]}}
    records = [
        {"eventName": "verl.rollout.sample", "body": kv, "timeUnixNano": "1"},
        {"eventName": "verl.stall.stacks", "body": {"stringValue": "Thread main"}, "timeUnixNano": "2"},
    ]
    line = {"resourceLogs": [{"resource": {"attributes": []}, "scopeLogs": [{"logRecords": records}]}]}
    (tmp_path / "logs-worker-1.jsonl").write_text(json.dumps(line) + "\n")
    skipped = otlp_files.Skipped()
    got = otlp_files.read_log_records(tmp_path, skipped)
    assert [(r.event_name, r.body) for r in got] == [
        ("verl.rollout.sample", '{"prompt": "p"}'),
        ("verl.stall.stacks", "Thread main"),
    ]
    assert not skipped.lines


def _span_line(**fields) -> str:
    s = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "s", "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    s.update(fields)
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [s]}]}]}) + "\n"


XSS = "<img src=x onerror=document.title='XSS'>"
ID_REASON = "an id that is not hex of its length (32 digits for a trace, 16 for a span)"


def test_ids_that_are_not_hex_of_their_length_are_refused(tmp_path):
    """An id goes into the page's attributes and the timeline: only 32/16 hex digits are ids."""
    link = {"traceId": "ab" * 16, "spanId": XSS}
    lines = [
        _span_line(spanId=XSS),
        _span_line(traceId=XSS),
        _span_line(parentSpanId='"><script>'),
        _span_line(spanId="ab" * 4),  # hex, but 8 digits
        _span_line(traceId="g" * 32),
        _span_line(links=[link]),
        _span_line(spanId="AB" * 8, parentSpanId="EF" * 8, name="upper"),  # OTLP: case-insensitive hex
    ]
    (tmp_path / "traces-a-1.jsonl").write_text("".join(lines))
    record = {"eventName": "e", "traceId": XSS, "body": {"stringValue": "b"}}
    logs = {"resourceLogs": [{"resource": {"attributes": []}, "scopeLogs": [{"logRecords": [record]}]}]}
    (tmp_path / "logs-a-1.jsonl").write_text(json.dumps(logs) + "\n")
    skipped = Skipped()
    (upper,) = read_spans(tmp_path, skipped)
    assert (upper.name, upper.span_id, upper.parent_id) == ("upper", "ab" * 8, "ef" * 8)
    assert otlp_files.read_log_records(tmp_path, skipped) == []
    assert skipped.lines == {
        tmp_path / "traces-a-1.jsonl": [(n, ID_REASON) for n in range(1, 7)],
        tmp_path / "logs-a-1.jsonl": [(1, ID_REASON)],
    }


def test_a_request_with_a_value_no_reader_can_use_is_skipped_and_named(tmp_path):
    """One rule in the reader for what would stop summary or report further on: a span that ends
    before it starts, text that is not UTF-8 (a lone surrogate). NaN and infinities are values a
    run's record must keep (a NaN loss, an infinite grad norm: what the guard fires on)."""
    gauge_line = {
        "resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "verl.g", "gauge": {"dataPoints": [{}]}}]}]}]
    }
    point = gauge_line["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["gauge"]["dataPoints"][0]
    metric_lines = []
    for value in ("NaN", "Infinity", "-Infinity", 1.5):
        point["asDouble"] = value
        metric_lines.append(json.dumps(gauge_line) + "\n")
    metric_lines.append('{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "x", "gauge": {"dataPoints": '
                        '[{"asDouble": 1e999}]}}]}]}]}\n')  # fmt: skip
    (tmp_path / "metrics-a-1.jsonl").write_text("".join(metric_lines))
    attrs = [{"key": "k", "value": {"doubleValue": "NaN"}}]
    (tmp_path / "traces-a-1.jsonl").write_text(
        _span_line(startTimeUnixNano="20", endTimeUnixNano="10")
        + _span_line(name="\ud800")  # json.dumps writes the escape
        + _span_line(attributes=attrs)
        + _span_line(name="ok")
    )
    skipped = Skipped()
    spans = read_spans(tmp_path, skipped)
    assert len(spans) == 2 and spans[-1].name == "ok"
    assert math.isnan(spans[0].attributes["k"])
    values = [p.value for p in read_metric_points(tmp_path, skipped)]
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf, 1.5]
    assert skipped.lines == {
        tmp_path / "traces-a-1.jsonl": [
            (1, "a span that ends before it starts"),
            (2, "text that is not UTF-8 (a lone surrogate)"),
        ],
        tmp_path / "metrics-a-1.jsonl": [
            (5, "not an OTLP metrics request"),  # 1e999: JSON's own infinity, refused by the message's double
        ],
    }


def test_only_regular_files_are_read_and_only_as_long_as_they_were(tmp_path):
    """A FIFO or a link to a device in a run folder is named, never read: reading /dev/zero or a
    FIFO nobody writes would never end."""
    (tmp_path / "traces-null-1.jsonl").symlink_to("/dev/null")
    skipped = Skipped()
    assert list(iter_lines(tmp_path / "traces-null-1.jsonl", skipped)) == []
    assert skipped.files == {tmp_path / "traces-null-1.jsonl": "cannot read: not a regular file (a character device)"}
    (tmp_path / "traces-zero-2.jsonl").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "traces-fifo-3.jsonl")
    _, root = span(semconv.SPAN_STEP, "e" * 16, 0, 1, verl__step=1)
    write_spans(tmp_path, "taskrunner", 4, [root])
    skipped = Skipped()
    assert [s.name for s in read_spans(tmp_path, skipped)] == [semconv.SPAN_STEP]
    assert skipped.files == {
        tmp_path / "traces-null-1.jsonl": "cannot read: not a regular file (a character device)",
        tmp_path / "traces-zero-2.jsonl": "cannot read: not a regular file (a character device)",
        tmp_path / "traces-fifo-3.jsonl": "cannot read: not a regular file (a FIFO)",
    }


def test_a_file_is_read_as_long_as_it_was_when_opened(tmp_path):
    """A file another job keeps appending to (a live run, or something writing without end) is
    read up to its length at opening: the reader always ends."""
    path = tmp_path / "traces-live-1.jsonl"
    path.write_text(_span_line(name="first") + _span_line(name="second"))
    lines = iter_lines(path)
    assert next(lines)[2]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] == "first"
    with open(path, "a") as f:
        f.write(_span_line(name="written after") * 3)
    assert [batch["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] for _, _, batch in lines] == ["second"]


def test_replay_refuses_a_message_given_as_text_with_a_lone_surrogate():
    """protobuf's json_format walks a string given for a message as a list of field names, and one
    holding a lone surrogate made it raise SystemError: replay stopped there."""
    line = json.loads(_span_line())
    line["resourceSpans"][0]["scopeSpans"][0]["scope"] = "\ud800"
    batch = otlp_files.fields.parse(json.dumps(line))
    assert len(otlp_files.decode("traces", batch)) == 1  # the readers read no scope
    with pytest.raises(otlp_files.BadRequest, match="not an OTLP traces request"):
        otlp_files.check_request("traces", batch)
