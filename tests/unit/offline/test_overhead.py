"""Telemetry cost per step (``otel_verl.overhead.cpu_time``) in ``facts.overhead``, ``summary`` and the report."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from support.otlp_json import T0, _attrs, gauge, span, write_metrics, write_spans

from otel_verl import semconv
from otel_verl.offline.facts.overhead import OverheadFold, overhead
from otel_verl.offline.otlp_files import read_metric_points
from otel_verl.offline.run.model import build
from otel_verl.offline.run.page import render
from otel_verl.offline.summary import summary


def _sum(name: str, time_s: float, values: dict[str, float], key: str, temporality: int = 2) -> dict:
    points = [
        {"asDouble": v, "attributes": _attrs({key: k}), "timeUnixNano": str(T0 + int(time_s * 1e9))}
        for k, v in values.items()
    ]
    return {"name": name, "sum": {"aggregationTemporality": temporality, "isMonotonic": True, "dataPoints": points}}


def _own(time_s: float, **values: float) -> dict:
    return _sum(semconv.M_OVERHEAD_CPU_TIME, time_s, values, semconv.ATTR_OVERHEAD_COMPONENT)


def _cpu(time_s: float, user: float) -> dict:
    return _sum("process.cpu.time", time_s, {"user": user, "system": 0.0}, "cpu.mode")


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """Three 1 s steps (at 10, 12, 14 s); the TaskRunner exports at each step's end, a worker mid-step."""
    folder = tmp_path / "telemetry"
    folder.mkdir()
    spans = []
    for step, start in ((1, 10.0), (2, 12.0), (3, 14.0)):
        spans.append(span(semconv.SPAN_STEP, f"{step:016x}", start, start + 1.0, verl__step=step)[1])
    write_spans(folder, "taskrunner", 10, spans)
    # TaskRunner: before training (validation), then at each step's end; worker: mid-step, from step 1
    for t, step, recorder, hooks, cpu in (
        (5, 0, 0.01, 0.02, 1.0),
        (11.1, 1, 0.02, 0.03, 2.0),
        (13.1, 2, 0.03, 0.04, 3.0),
    ):
        write_metrics(folder, "taskrunner", 10, t, [gauge(semconv.M_TRAINING_STEP, step)])
        write_metrics(folder, "taskrunner", 10, t, [_own(t, recorder=recorder, hooks=hooks), _cpu(t, cpu)])
    write_metrics(folder, "taskrunner", 10, 15.1, [gauge(semconv.M_TRAINING_STEP, 3)])
    write_metrics(folder, "taskrunner", 10, 15.1, [_own(15.1, recorder=0.04, hooks=0.05), _cpu(15.1, 4.0)])
    for t, exporter in ((10.5, 0.1), (12.5, 0.11), (14.5, 0.13)):
        write_metrics(folder, "worker0", 11, t, [_own(t, exporter=exporter, hooks=0.0)])
    return folder


def test_each_steps_cost_is_what_every_processs_counter_grew_in_it(run):
    points = read_metric_points(run)
    steps = [(n, T0 + int(s * 1e9), T0 + int((s + 1) * 1e9)) for n, s in ((1, 10.0), (2, 12.0), (3, 14.0))]
    o = overhead(points, steps)
    assert o is not None and o.processes == 2
    # step 1: TaskRunner 0.02 (from its validation export); the worker's first export (0.1) is start-up
    assert o.per_step == pytest.approx({1: 0.02, 2: 0.03, 3: 0.04})
    assert o.components == pytest.approx({"recorder": 0.03, "hooks": 0.03, "exporter": 0.03})
    assert o.startup == pytest.approx(0.03 + 0.1)
    assert o.process_cpu == pytest.approx({1: 1.0, 2: 1.0, 3: 1.0})  # only processes reporting our metric
    assert o.median() == pytest.approx(0.03)
    assert o.cpu_share == pytest.approx(0.06 / 3.0)
    assert overhead([p for p in points if p.name != semconv.M_OVERHEAD_CPU_TIME], steps) is None


def test_the_headline_is_the_mean_because_idle_exporters_skip_steps(run):
    """A worker that exports when idle, at most once a second, may skip a short step: its cost then
    lands in the next one. The mean over the steps stays the total over their number; the median
    moves (here: the worker exports after steps 1 and 3 only)."""
    skipped = T0 + int(12.5e9)  # the worker's export in step 2
    points = [p for p in read_metric_points(run) if not (p.resource.get("process.pid") == 11 and p.time_ns == skipped)]
    steps = [(n, T0 + int(s * 1e9), T0 + int((s + 1) * 1e9)) for n, s in ((1, 10.0), (2, 12.0), (3, 14.0))]
    o = overhead(points, steps)
    assert o is not None
    assert o.per_step == pytest.approx({1: 0.02, 2: 0.02, 3: 0.05})  # the worker's 0.03 all in step 3
    assert o.mean() == pytest.approx(0.09 / 3)  # what every export at each step gave (0.02 + 0.03 + 0.04)
    assert o.median() == pytest.approx(0.02)


def test_delta_points_are_added_up_inside_the_step():
    folder_points = []
    from otel_verl.offline.otlp_files import MetricPoint

    for t, v in ((10.5, 0.01), (11.0, 0.02), (12.5, 0.5)):
        folder_points.append(
            MetricPoint(
                semconv.M_OVERHEAD_CPU_TIME,
                "sum",
                v,
                None,
                {"otel_verl.component": "hooks"},
                {},
                T0 + int(t * 1e9),
                temporality=1,
            )
        )
    o = overhead(folder_points, [(1, T0 + int(10e9), T0 + int(11e9))])
    assert o is not None and o.per_step == pytest.approx({1: 0.02})  # the first point is start-up
    assert o.startup == pytest.approx(0.01)


def test_summary_and_report_show_the_cost_at_the_end_in_one_plain_line(run, tmp_path):
    """The telemetry's own cost matters to otel-verl, not to a user's first look: the last line of
    ``summary``, and one small plain line at the end of the page (after every section)."""
    out = io.StringIO()
    assert summary(run, out=out, err=io.StringIO()) == 0
    lines = out.getvalue().splitlines()
    line = lines[-1]
    assert line.startswith("telemetry cost per step: 0.0300 CPU-s (mean of 3 steps; median 0.0300, 0.0200 to 0.0400)")
    assert sum("telemetry cost per step" in x for x in lines) == 1
    assert "3.00% of the mean step time 1.00 s" in line
    # the TaskRunner alone exports process.cpu.time: 0.06 of its 3.0 CPU-s in the steps
    assert "from the 2 of the run's 2 processes that report otel_verl.overhead.cpu_time (2.0% of their CPU" in line
    assert line.endswith(
        "; exporter 33%, hooks 33%, recorder 33%; plus 0.130 CPU-s once, until each process's first export"
    )
    page = render(build(run))
    cost = page.index('<p id="overhead"><small>telemetry cost per step: 0.0300 CPU-s')
    assert 'id="overhead-table"' not in page and "<b>telemetry cost" not in page
    assert cost > max(page.index(f'<section id="{s}"') for s in ("stages", "timeline", "curves", "guard", "explore"))


def test_no_metric_no_line(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    write_spans(folder, "taskrunner", 10, [span(semconv.SPAN_STEP, "1" * 16, 0, 1, verl__step=1)[1]])
    rep = build(folder)
    assert rep.overhead is None and rep.overhead_line() is None
    assert 'id="overhead"' not in render(rep)
    json.dumps(rep.notes)  # nothing about it in the notes either


def test_the_fold_gives_the_same_cost_whichever_process_is_read_first(run):
    """``OverheadFold`` as the run reader uses it: a process read before the TaskRunner holds its
    increments near a step's end until the TaskRunner's exports set the boundary; after, none."""
    points = read_metric_points(run)
    for p in points:  # the worker's step-2 export moved between step 1's end (11 s) and step 2's start
        if p.resource.get("process.pid") == 11 and p.time_ns == T0 + int(12.5e9):
            p.time_ns = T0 + int(11.5e9)  # after the TaskRunner's export at 11.1 s: step 2's
    steps = [(n, T0 + int(s * 1e9), T0 + int((s + 1) * 1e9)) for n, s in ((1, 10.0), (2, 12.0), (3, 14.0))]
    runner_first = OverheadFold(steps)
    worker_first = OverheadFold(steps)
    held = []
    for fold, order in ((runner_first, (10, 11)), (worker_first, (11, 10))):
        for pid in order:
            for p in points:
                if p.resource.get("process.pid") == pid:
                    fold.add(p)
                    held.append((fold is runner_first, fold.holding))
    assert max(h for first, h in held if first) == 0
    assert max(h for first, h in held if not first) > 0
    a, b = runner_first.close(), worker_first.close()
    assert a is not None and b is not None and a == b
    assert a.per_step == pytest.approx({1: 0.02, 2: 0.03, 3: 0.04})


def test_a_counter_that_restarts_counts_what_it_grew_after(run):
    """A process whose counter starts again (the same instance restarted) adds nothing for the drop."""
    steps = [(1, T0 + int(10e9), T0 + int(20e9))]
    points = read_metric_points(run)
    points = [p for p in points if p.attributes.get(semconv.ATTR_OVERHEAD_COMPONENT) == "exporter"]
    assert [p.value for p in points] == [0.1, 0.11, 0.13]  # the worker's
    points[1].value = 0.01  # 0.1 -> 0.01 -> 0.13
    o = overhead(points, steps)
    assert o is not None and o.components["exporter"] == pytest.approx(0.12)
