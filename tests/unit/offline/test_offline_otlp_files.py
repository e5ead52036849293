"""``otel_verl.offline.otlp_files``: reading the OTLP JSON lines the file exporters write."""

from __future__ import annotations

import json

from offline_otlp_json import gauge, span, traj_hist, write_metrics, write_spans

from otel_verl import semconv
from otel_verl.offline.otlp_files import count_items, iter_lines, read_metric_points, read_spans, signal_files


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
        f.write('{"resourceMetrics": [{"reso')  # a process killed while writing
    bad: list = []
    assert len(read_metric_points(tmp_path, bad)) == 1
    assert bad == [(path, 3), (path, 4)]
    assert signal_files(tmp_path, "metrics") == [path] and signal_files(tmp_path, "traces") == []


def test_count_items_per_signal(tmp_path):
    write_metrics(tmp_path, "worker0", 1, 1, [gauge("verl.a", 1.0), gauge("verl.b", 2.0)])
    ((_, batch),) = iter_lines(tmp_path / "metrics-worker0-1.jsonl")
    assert count_items("metrics", batch) == 2
    logs = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{}, {}, {}]}]}]}
    assert count_items("logs", json.loads(json.dumps(logs))) == 3
    assert count_items("traces", {"resourceSpans": [{"scopeSpans": [{"spans": [{}]}, {"spans": [{}]}]}]}) == 2
