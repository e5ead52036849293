"""``otel_verl.offline.run.model``: what the report shows, from small synthetic OTLP JSON files."""

from __future__ import annotations

import json

import pytest
from support.otlp_json import span, write_spans

from otel_verl import semconv
from otel_verl.offline.exports import step_gauges
from otel_verl.offline.facts.latency import trajectory_histogram
from otel_verl.offline.otlp_files import MetricPoint
from otel_verl.offline.report import build, render
from otel_verl.offline.run.model import MAX_TRAJECTORY_ROWS


@pytest.mark.parametrize("files", ["v1_run", "v1_run_legacy"])  # LLM calls as otel-verl names them, and as it did
def test_build_reads_steps_stages_timelines_and_curves(files, request):
    v1_run = request.getfixturevalue(files)
    rep = build(v1_run)
    slowest = {int(k): v for k, v in json.loads((v1_run / "expected.json").read_text()).items()}
    assert [r.step for r in rep.steps] == [1, 2]
    one, two = rep.steps
    assert one.stages == pytest.approx({"gen": 1.0, "old_log_prob": 0.25, "update_actor": 0.5})
    assert two.stages == pytest.approx({"gen": 2.0, "adv": 0.1})
    assert one.other == pytest.approx(0.2) and two.span.seconds == pytest.approx(2.3)
    assert rep.stage_order == ["gen", "old_log_prob", "update_actor", "adv"]
    assert rep.default_step == 2  # the slowest
    for n in (1, 2):
        assert rep.steps[n - 1].slowest.span_id == slowest[n][0]
        tl = rep.timelines[n]
        assert tl.rows[0].span.name == semconv.SPAN_STEP
        assert not [r for r in tl.rows if semconv.is_llm_call(r.span.name, r.span.attributes)]  # drawn inside
        trajs = [r for r in tl.rows if r.kind == "traj"]
        assert len(trajs) == 4 and all(r.linked for r in trajs)
        segments = [c for r in trajs for c in r.segments]
        assert len(segments) == 3 and all(semconv.is_llm_call(c.name, c.attributes) for c in segments)
        gen = next(i for i, r in enumerate(tl.rows) if r.span.name == "verl.gen")
        assert all(r.depth == tl.rows[gen].depth + 1 for r in trajs)  # hung under the gen stage
        assert [r.span.span_id for r in tl.rows if r.slowest] == [slowest[n][0]]
        worker = next(r for r in tl.rows if r.kind == "worker") if n == 1 else None
        if worker:
            assert worker.depth == 3  # step > stage > wg > worker
    assert sorted(rep.trajectory_seconds) == pytest.approx(sorted([0.2, 0.7, 0.4, 0.2, 1.4, 0.4]))
    assert rep.validation_trajectories == 2
    assert rep.trajectory_metric.count == 6 and rep.trajectory_metric.counts == [2, 3, 1, 0]
    curves = {title: dict(lines) for title, _, lines in rep.curves}
    assert curves["Reward"]["critic/score/mean"] == {1: 0.25, 2: 0.75}
    assert curves["KL"]["actor/kl_loss"] == pytest.approx({1: 0.025, 2: 0.075})
    assert curves["Throughput"][semconv.THROUGHPUT_KEY] == {1: 100.0, 2: 200.0}
    assert curves["Entropy"]["actor/entropy"] == {1: 4.0, 2: 3.0}
    assert rep.meta["run id"] == "run-1" and rep.meta["driver"] == "v1"


def test_trajectory_rows_are_capped_to_the_slowest(tmp_path):
    sid, root = span(semconv.SPAN_STEP, "b" * 16, 0, 10, verl__step=1)
    gen_id, gen = span("verl.gen", "b" * 16, 0, 9, sid, verl__stage="gen")
    trajs = [
        span(semconv.SPAN_ROLLOUT_TRAJECTORY, "b" * 16, 0.1, 0.1 + 0.01 * i, gen_id)[1]
        for i in range(MAX_TRAJECTORY_ROWS + 12)
    ]
    write_spans(tmp_path, "taskrunner", 1, [root, gen, *trajs])
    rep = build(tmp_path)
    tl = rep.timelines[1]
    rows = [r for r in tl.rows if r.kind == "traj"]
    assert len(rows) == MAX_TRAJECTORY_ROWS and tl.trajectories == MAX_TRAJECTORY_ROWS + 12
    assert min(r.span.seconds for r in rows) == pytest.approx(0.01 * 12, abs=1e-6)  # the 12 fastest dropped
    assert [r.span.span_id for r in rows if r.slowest] == [trajs[-1]["spanId"]]
    assert not any(r.linked for r in rows)  # v0: inside the step's trace
    assert f"Showing the {MAX_TRAJECTORY_ROWS} slowest of {MAX_TRAJECTORY_ROWS + 12} trajectories" in render(rep)


def test_step_gauges_and_histograms_from_points():
    def point(name, value, t, pid=1, kind="gauge", **attrs):
        return MetricPoint(name, kind, value, None, attrs, {"service.instance.id": f"i{pid}"}, t)

    points = [
        point(semconv.M_TRAINING_STEP, 1.0, 100),
        point("verl.a", 0.5, 100),
        point("verl.a", 9.0, 50),  # an export without verl.training.step (validation before training)
        point(semconv.M_TRAINING_STEP, 2.0, 200),
        point("verl.a", 0.7, 200),
        point("verl.a", 3.0, 200, pid=2),  # another process's export at the same time: no step there
    ]
    assert step_gauges(points) == {("verl.a", ()): {1: 0.5, 2: 0.7}}

    def hist(counts, t, pid, start=0, temporality=2, validate=False):
        return MetricPoint(
            semconv.M_ROLLOUT_TRAJECTORY_DURATION,
            "histogram",
            float(sum(counts)),
            sum(counts),
            {semconv.ATTR_ROLLOUT_VALIDATE: validate},
            {"service.instance.id": f"i{pid}"},
            t,
            [1.0, 2.0],
            counts,
            start,
            temporality,
        )

    cumulative = [
        hist([1, 0, 0], 1, 1),
        hist([2, 1, 0], 2, 1),
        hist([0, 0, 4], 2, 2),
        hist([9, 9, 9], 2, 3, validate=True),
    ]
    h = trajectory_histogram(cumulative)
    assert h.counts == [2, 1, 4] and h.count == 7
    delta = [hist([1, 0, 0], 1, 1, temporality=1), hist([0, 2, 0], 2, 1, temporality=1)]
    assert trajectory_histogram(delta).counts == [1, 2, 0]
    assert trajectory_histogram([]) is None
