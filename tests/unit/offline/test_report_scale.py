"""``summary`` and ``report`` hold about a step's spans at a time, whatever the run's length
(``offline.run_reader``): a run four times as long holds as many spans at once, and every step's
figures are still those of all its spans (the v1 rollout traces joined to it included)."""

from __future__ import annotations

import pytest
from support.otlp_json import T0, _attrs, gauge, llm_call, span, write_metrics, write_spans

from otel_verl import semconv
from otel_verl.offline.otlp_files import Skipped
from otel_verl.offline.run.model import build
from otel_verl.offline.run.text import lines

TRAJECTORIES = 6  # per step, each its own trace (v1), with two LLM calls


def _own(value: float, time_s: float) -> dict:
    """otel-verl's own cost counter, cumulative, as one process exports it."""
    point = {
        "asDouble": value,
        "attributes": _attrs({"component": "hooks"}),
        "timeUnixNano": str(T0 + int(time_s * 1e9)),
    }
    return {"name": semconv.M_OVERHEAD_CPU_TIME, "sum": {"aggregationTemporality": 2, "dataPoints": [point]}}


def _run(folder, steps: int, kl=lambda n: 0.01) -> None:
    """A v1-shaped run: per step a step trace (step, gen and update stages, a wait) in the
    TaskRunner's file and one trace per trajectory in the agent-loop worker's file, each step's spans
    in their own batches, as the exporters write them; gauges at each step's end."""
    for n in range(1, steps + 1):
        t = 10.0 * n
        trace = f"{n:016x}"
        sid, step = span(semconv.SPAN_STEP, trace, t, t + 8, verl__step=n, verl__driver="v1")
        _, gen = span("verl.gen", trace, t, t + 5, sid, verl__stage="gen")
        _, upd = span("verl.update_actor", trace, t + 5, t + 8, sid, verl__stage="update_actor")
        write_spans(folder, "taskrunner", 1, [gen, upd, step])
        rollouts = []
        for i in range(TRAJECTORIES):
            seconds = 1.0 + i + (n % 3)  # the last trajectory is the slowest
            tid, traj = span(
                semconv.SPAN_ROLLOUT_TRAJECTORY,
                f"{10_000 * n + i:016x}",
                t,
                t + seconds,
                verl__rollout__submit_step=n,
                verl__rollout__sample_index=i,
            )
            for c in range(2):
                _, call = llm_call(
                    f"{10_000 * n + i:016x}",
                    t + c * seconds / 2,
                    t + (c + 1) * seconds / 2,
                    tid,
                    verl__rollout__server__id="r0",
                    verl__rollout__submit_step=n,
                )
                rollouts.append(call)
            rollouts.append(traj)
        write_spans(folder, "agent_loop", 2, rollouts)
        write_metrics(
            folder,
            "taskrunner",
            1,
            t + 8.5,
            [
                gauge(semconv.M_TRAINING_STEP, n),
                gauge(semconv.M_REWARD, 0.1 * n),
                gauge(semconv.M_THROUGHPUT, 10.0 * n),
                gauge(semconv.metric_name("actor/ppo_kl"), kl(n)),
                _own(0.01 * n, t + 8.5),
            ],
        )
        # the agent-loop worker's cost: mid-step, and between this step's end and the next start,
        # where only the TaskRunner's export (t + 8.5) says which step it belongs to
        write_metrics(folder, "agent_loop", 2, t + 4, [_own(0.02 * (2 * n - 1), t + 4)])
        write_metrics(folder, "agent_loop", 2, t + 9, [_own(0.02 * 2 * n, t + 9)])


def test_a_longer_run_holds_no_more_spans_at_once(tmp_path):
    short, long = tmp_path / "short", tmp_path / "long"
    short.mkdir(), long.mkdir()
    _run(short, 10)
    _run(long, 40)
    per_step = 3 + TRAJECTORIES * 3
    a, b = build(short), build(long)
    assert (a.spans, b.spans) == (10 * per_step, 40 * per_step)
    assert [r.step for r in b.steps] == list(range(1, 41))
    # each step's figures are those of all of its spans: its trace and its rollout traces
    assert {r.spans for r in b.steps} == {per_step}
    assert {r.trajectories for r in b.steps} == {TRAJECTORIES}
    for r in b.steps:
        assert r.slowest is not None and r.slowest.attributes[semconv.ATTR_ROLLOUT_SAMPLE_INDEX] == TRAJECTORIES - 1
        assert r.slowest.seconds == TRAJECTORIES + r.step % 3
        assert r.tree_spans == 2  # its slowest trajectory's kept tree: counted, held only for the run's slowest
        run_slowest = r.slowest.span_id == b.slowest.span_id
        assert [s.name for s in r.tree] == (
            [semconv.llm_call_span_name("Qwen/Qwen2.5-0.5B")] * 2 if run_slowest else []
        )
        assert list(r.stages) == ["gen", "update_actor"]
    assert b.slowest is not None and b.slowest.seconds == TRAJECTORIES + 2
    assert sum(1 for r in b.steps if r.tree) == 1
    assert len(b.trajectory_seconds) == 40 * TRAJECTORIES
    assert b.gauges[semconv.M_REWARD] == {n: 0.1 * n for n in range(1, 41)}
    # bounded: at most two steps' spans at once (a step's rollouts may end after the next one's
    # step span), the same for 10 and for 40 steps
    assert 0 < b.held.spans <= 2 * per_step
    assert b.held.spans == a.held.spans
    assert b.held.points <= a.held.points + 2 * 40  # the step gauges kept for the other facts
    # otel-verl's cost folds per step (step 1: every first point is start-up; the worker's export
    # after a step's end counts in the next step), none of its points held beyond the fold
    assert b.overhead is not None
    assert b.overhead.per_step == pytest.approx({1: 0.0} | {n: 0.05 for n in range(2, 41)})
    assert "40 training steps, 320.0 s in steps" in lines(b)[0]


def test_a_long_runs_tables_and_charts_are_bounded_and_its_checks_see_every_step(tmp_path, monkeypatch):
    """Past the bounds, the tables show the first, the slowest and the last steps, the charts each
    run of steps' extremes; the totals, the health checks and the alert rules still see every step."""
    from otel_verl.offline import bounded
    from otel_verl.offline.run import model
    from otel_verl.offline.run.page import render

    monkeypatch.setattr(model, "MAX_ROWS", 20)
    monkeypatch.setattr(model, "MAX_TIMELINE_STEPS", 10)
    monkeypatch.setattr(model, "MAX_COLUMNS", 8)
    monkeypatch.setattr(bounded, "MAX_RUNS", 8)
    monkeypatch.setattr(bounded, "EDGE", 4)
    steps = 60
    _run(tmp_path, steps, kl=lambda n: 0.5 if 33 <= n <= 38 else 0.01)  # KL above 0.2 for 6 steps
    rep = build(tmp_path)
    shown = bounded.pick_steps([(n, 8.0) for n in range(1, steps + 1)], 20)
    assert {r.step for r in rep.steps} == shown and len(shown) <= 20  # equal times: the first 10 slowest
    assert {1, 2, *range(51, 61)} <= shown and 37 not in shown
    assert len(rep.timelines) <= 10 and set(rep.timelines) <= shown
    assert rep.totals.count == steps and rep.totals.seconds == pytest.approx(8.0 * steps)
    assert len(rep.totals.columns.items()) <= 8
    # a series the tables show keeps their rows' values exactly; another one only its runs' extremes
    throughput, reward = rep.gauges[semconv.M_THROUGHPUT], rep.gauges[semconv.M_REWARD]
    assert throughput.thinned and len(throughput) <= 2 * 8 + 2 * 4 + 20
    assert all(throughput[n] == pytest.approx(10.0 * n) for n in shown)
    assert reward.thinned and len(reward) <= 2 * 8 + 2 * 4 and not shown <= set(reward)
    assert reward[steps] == pytest.approx(0.1 * steps) and reward[1] == pytest.approx(0.1)  # first and last
    # the alert rule counts 5 steps above 0.2 from step 33: step 37, which no table shows
    (hit,) = rep.health.alerts
    assert (hit.alert, hit.step) == ("VerlKLDivergenceHigh", 37)
    assert rep.overhead is not None and len(rep.overhead.per_step) == steps
    text = "\n".join(lines(rep))
    assert f": {steps} training steps, 480.0 s in steps" in text.splitlines()[0]
    assert "VerlKLDivergenceHigh from step 37" in text
    assert f"(steps 1-6 and 55-60 of {steps}; the report has more)" in text
    assert f"({len(shown)} of {steps} steps: the first 2, the 8 slowest and the last 10;" in text
    page = render(rep)
    assert f"The tables show {len(shown)} of {steps} steps" in page
    assert page.count('<tr data-step="') == len(shown) + len(throughput)  # the stage table's, the curves'


def test_of_a_cumulative_trajectory_histogram_only_the_latest_point_is_held():
    """Each export repeats the whole cumulative count: the latest point per series is all the
    histogram needs, so a long run holds one point per series, not one per export; delta points
    each hold their own part and are added up into one."""
    from otel_verl.offline.facts.latency import Durations, trajectory_histogram
    from otel_verl.offline.otlp_files import MetricPoint

    def point(i: int, temporality: int, pid: int) -> MetricPoint:
        counts = [i, 2 * i, 0] if temporality == 2 else [1, 2, 0]
        resource = {semconv.RES_SERVICE_INSTANCE_ID: f"w{pid}", semconv.RES_PROCESS_PID: pid}
        return MetricPoint(
            semconv.M_ROLLOUT_TRAJECTORY_DURATION, "histogram", 1.5 * sum(counts), sum(counts),
            {semconv.ATTR_ROLLOUT_VALIDATE: False}, resource, T0 + i, [1.0, 10.0], counts, T0, temporality,
        )  # fmt: skip

    every = [point(i, 2, 1) for i in range(1, 201)] + [point(i, 2, 2) for i in range(1, 101)]
    every += [point(i, 1, 3) for i in range(1, 51)]
    fold = Durations()
    for p in every:
        fold.on_point(p)
    kept = [p for p in fold.close() if p.name == semconv.M_ROLLOUT_TRAJECTORY_DURATION]
    assert len(kept) == 2 + 1  # one per cumulative series, one for the delta points
    assert trajectory_histogram(kept) == trajectory_histogram(every)
    assert trajectory_histogram(kept).counts == [200 + 100 + 50, 400 + 200 + 100, 0]


def test_a_trace_whose_root_never_comes_is_not_held_by_the_second_reading(tmp_path, monkeypatch):
    """A trace without a root (its root was never exported, a process killed) is decided at the end
    of the first reading; the second one is told, and lets its spans go as they come."""
    from otel_verl.offline import run_reader

    monkeypatch.setattr(run_reader, "LARGE_TRACE", 5)
    _run(tmp_path, 10)
    for n in range(1, 11):  # a few spans each step, of one trace that belongs to no step
        t = 10.0 * n
        write_spans(
            tmp_path, "agent_loop", 3, [span("orphan", "f" * 16, t, t + 1, "0" * 15 + "1")[1] for _ in range(8)]
        )
    rep = build(tmp_path)
    per_step = 3 + TRAJECTORIES * 3
    assert rep.spans == 10 * (per_step + 8) and [r.spans for r in rep.steps] == [per_step] * 10
    assert rep.held.spans <= 2 * per_step + 8  # not the orphan trace's 80 spans


def test_a_span_that_comes_after_its_trace_was_forgotten_is_counted_alike_by_both_readings(tmp_path, monkeypatch):
    """A span that comes long after its trace was decided opens the trace again (the first reading
    remembers only the last ``MAX_DECIDED`` traces); the second reading, told of the long traces,
    must still decide every span as the first one did, or a step would never be complete."""
    from otel_verl.offline import run_reader

    monkeypatch.setattr(run_reader, "MAX_DECIDED", 2)
    monkeypatch.setattr(run_reader, "LARGE_TRACE", 2)  # every trajectory trace (3 spans) is a long one
    _run(tmp_path, 6)
    # a late span of step 1's first trajectory trace, with the last step's spans
    late = span("late", f"{10_000 * 1 + 0:016x}", 61.0, 62.0, "0" * 15 + "7")[1]
    write_spans(tmp_path, "agent_loop", 2, [late])
    per_step = 3 + TRAJECTORIES * 3
    index = run_reader.index_spans(tmp_path, Skipped())
    assert index.long_traces  # the mechanism is in play
    seen: list[int] = []
    for n, members in run_reader.step_spans(tmp_path, index):
        seen.append(n)
        assert len(members) == index.expected[n]
    assert sorted(seen) == list(range(1, 7))  # each step once, complete
    assert index.expected == dict.fromkeys(range(1, 7), per_step)  # the late span is of no step in both


def test_each_sender_is_named_by_its_own_resource_though_a_freed_ones_id_comes_again():
    """The readers name a request's process once per run of items sharing its resource; a resource
    let go before the next arrives may leave its id to that one (CPython reuses the memory), which
    must not pass the next process's items off as the first's."""
    from otel_verl.offline.run_reader import Senders

    senders = Senders()
    senders.add({semconv.RES_ROLE: "taskrunner", "process.pid": 1})  # let go after the call
    senders.add({semconv.RES_ROLE: "worker", "process.pid": 2}, items=3)
    assert dict(senders.counts) == {"taskrunner pid 1": 1, "worker pid 2": 3}
