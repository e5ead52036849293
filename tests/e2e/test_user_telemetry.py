"""End-to-end: user code with the plain OpenTelemetry API joins the run (real trainer on CPU).

OpenTelemetry is set up as its zero-code guide says: ``opentelemetry-distro`` is installed (the
test extra has it), so its configurator would build providers in every process at start-up.

The runs (tests/shared_runs.py's ``UserCodeRuns``: with the instrumentations of
``opentelemetry-bootstrap -a install`` too, shared with test_bootstrap_instrumentations) use
``verl_cpu_harness.user_telemetry``: a custom reward function (reward-loop worker processes) and a
custom agent loop (agent-loop worker processes), each recording spans and metrics through
``opentelemetry.trace`` / ``opentelemetry.metrics`` only. Ground truth: the
configuration (4 prompts x rollout.n 2 = 8 training trajectories per step, 16 validation ones
before training) and otel-verl's own trajectory spans of the same run.
"""

from __future__ import annotations

import importlib.metadata
from collections import Counter

import pytest
from support.shared_runs import STEPS, USER_CODE_PROTOCOLS
from verl_cpu_harness import user_telemetry as ut

from otel_verl import semconv

pytestmark = pytest.mark.e2e

PER_STEP = 4 * 2
VALIDATION = 16


@pytest.fixture(scope="module", params=sorted(USER_CODE_PROTOCOLS))
def run(request, user_code_runs):
    return user_code_runs.get(request.param)


def _run_id(run) -> str:
    (run_id,) = {s.resource[semconv.RES_RUN_ID] for s in run.spans if s.name == semconv.SPAN_STEP}
    return run_id


def _last_step_may_be_cut(run, spans: list) -> None:
    """Every trajectory is scored once; the reward worker's spans of the last step may be cut
    short: Ray ends that actor at the job's end without ``atexit``, ~0.5 s after the last score.
    Its spans are flushed as soon as it is idle (a 1 s metric gap before that lost all 8 of the
    last step in CI; since then 8 of 8 under a load average of 10), but that is still a race."""
    steps = [s.attributes.get(semconv.ATTR_STEP, 0) for s in spans]
    assert steps.count(0) == VALIDATION
    for step in range(1, STEPS):
        assert steps.count(step) == PER_STEP, (step, steps)
    assert 1 <= steps.count(STEPS) <= PER_STEP


def test_user_reward_spans_are_children_of_the_reward_worker_span_in_the_trajectory_trace(run):
    by_id = {s.span_id: s for s in run.spans}
    trajectories = [s for s in run.spans if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY]
    user = [s for s in run.spans if s.name == ut.SPAN_REWARD]
    assert len(trajectories) == STEPS * PER_STEP + VALIDATION
    _last_step_may_be_cut(run, user)
    run_id = _run_id(run)
    for span in user:
        worker = by_id[span.parent_id]
        assert worker.name == semconv.SPAN_REWARD_WORKER
        trajectory = by_id[worker.parent_id]  # in the agent-loop worker, across the Ray call
        assert trajectory.name == semconv.SPAN_ROLLOUT_TRAJECTORY
        assert span.trace_id == trajectory.trace_id
        assert span.resource[semconv.RES_RUN_ID] == run_id
        assert span.resource[semconv.RES_ROLE] == semconv.ROLE_REWARD_WORKER
        assert worker.resource["process.pid"] != trajectory.resource["process.pid"]
        # the helper: the trajectory's step, known in the reward process
        step = trajectory.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP]
        if step > 0:
            assert span.attributes[semconv.ATTR_STEP] == step


def test_user_agent_loop_spans_are_children_of_their_trajectory(run):
    by_id = {s.span_id: s for s in run.spans}
    user = [s for s in run.spans if s.name == ut.SPAN_AGENT]
    assert len(user) == STEPS * PER_STEP + VALIDATION
    for span in user:
        trajectory = by_id[span.parent_id]
        assert trajectory.name == semconv.SPAN_ROLLOUT_TRAJECTORY
        assert span.resource[semconv.RES_ROLE] == semconv.ROLE_AGENT_LOOP
        step = trajectory.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP]
        if step > 0:
            assert span.attributes[semconv.ATTR_STEP] == step


def test_training_rewards_reach_the_step_trace(run):
    """v0: in the step's trace; v1: in the trajectory's trace, linked to the step's gen span."""
    by_id = {s.span_id: s for s in run.spans}
    steps = {s.trace_id: s.attributes[semconv.ATTR_STEP] for s in run.spans if s.name == semconv.SPAN_STEP}
    gen_spans = {s.span_id: s for s in run.spans if s.name == semconv.SPAN_GEN}
    train = [s for s in run.spans if s.name == ut.SPAN_REWARD and s.attributes.get(semconv.ATTR_STEP, 0) > 0]
    assert len(train) > (STEPS - 1) * PER_STEP  # the last step's may be cut short (see above)
    for span in train:
        if run.driver == "v0":
            assert steps.get(span.trace_id) == span.attributes[semconv.ATTR_STEP]
            continue
        trajectory = by_id[by_id[span.parent_id].parent_id]  # user span -> reward worker -> trajectory
        (gen,) = [gen_spans[link.span_id] for link in trajectory.links if link.span_id in gen_spans]
        assert steps[gen.trace_id] == span.attributes[semconv.ATTR_STEP]


def test_user_metrics_arrive_with_the_run_id_for_every_step(run):
    run_id = _run_id(run)
    calls = sorted((p for p in run.points if p.name == ut.COUNTER), key=lambda p: p.time_ns)
    hist = sorted((p for p in run.points if p.name == ut.HISTOGRAM), key=lambda p: p.time_ns)
    assert calls and hist
    for p in calls + hist:
        assert p.resource[semconv.RES_RUN_ID] == run_id
        assert p.resource[semconv.RES_ROLE] == semconv.ROLE_REWARD_WORKER
        assert p.attributes == {"data_source": "tiny_add"}
    total = STEPS * PER_STEP + VALIDATION
    # cumulative (one reward worker: reward.num_workers=1); the export after the last step's
    # calls may be cut short like its spans (see above)
    assert VALIDATION + PER_STEP <= calls[-1].value <= total
    assert hist[-1].count == calls[-1].value
    values = [p.value for p in calls]
    assert values == sorted(values)
    if run.driver == "v0":  # steps do not overlap: each step's end is exported at the next step's start
        assert {VALIDATION, VALIDATION + PER_STEP} <= set(values), values


def test_a_user_gauge_in_the_agent_loop_is_exported_every_step(run):
    points = [p for p in run.points if p.name == ut.GAUGE]
    assert points
    assert all(p.resource[semconv.RES_RUN_ID] == _run_id(run) for p in points)
    # one export at least per batch of trajectories: validation and each step
    assert len({p.time_ns for p in points}) >= STEPS + 1, Counter(p.time_ns for p in points)


def test_with_opentelemetry_distro_each_process_has_one_pipeline_otel_verls(run):
    """The distro's configurator runs in the launcher only; in the Ray workers otel-verl's pipeline is
    the global one (``process.worker_bootstrap``): user spans carry the run's identity (above), their
    process runs one span export thread per trace exporter (the files and OTLP here) and no periodic
    metric reader, and no process had to leave a provider someone else set (otel-verl would say so
    once)."""
    assert importlib.metadata.version("opentelemetry-distro")  # the common set-up, not a bare SDK
    user = [s for s in run.spans if s.name == ut.SPAN_REWARD]
    assert user
    assert {s.attributes[ut.ATTR_SPAN_THREADS] for s in user} == {2}
    assert {s.attributes[ut.ATTR_PERIODIC_THREADS] for s in user} == {0}
    assert "global OpenTelemetry provider was already set" not in run.output
    assert "not loaded because" not in run.output  # the skipped configurator is not announced
