"""End-to-end: where a step's time goes, on the real trainer on CPU (both drivers, and v1's
``colocate_async`` mode: the one async path of verl 0.9.1 that runs on the CPU harness).

A stage span's time is explained where a child span covers it: worker calls, the v0 rollout
batch, the v1 replay buffer's ``verl.wait`` for finished rollouts (``otel_verl.hooks.waits``).
Before the wait span, ~80% of a v1 step (its ``gen``: verl polling every 2 s) had no child span
in any process; ``otel_verl.offline.facts.time_went.attributed_seconds`` is the rule summary and report use.
The same runs carry the goodput account by role (``verl.goodput.time``), checked against their raw spans;
the ``colocate_async`` run also has DAPO's group filter on (``algorithm.filter_groups.enable``) and
a reward that gives no signal to every prompt whose answer is even (``VERL_CPU_HARNESS_FLAT_REWARD``):
verl drops those groups and generates others in their place, and the account calls their
generation ``wasted``.
"""

from __future__ import annotations

import pytest

from otel_verl import semconv
from otel_verl.offline.facts.time_went import attributed_seconds, covered_seconds

pytestmark = pytest.mark.e2e

MIN_EXPLAINED = 0.75  # of the run's steps together; measured on an idle machine: v0 ~0.92, v1 ~0.96 (0.23 before)
# colocate_async: 0.79 / 0.88 (load ~8) with the verl.replicas.* spans, 0.58-0.76 before them
MIN_EXPLAINED_ASYNC = 0.7
# Of each step on its own. A step here lasts ~1 s, and one pause of verl's driver thread inside a
# stage (scheduling on a busy machine, a garbage collection) leaves ~0.3 s unexplained: v0 step 2
# was 0.74 in CI and 0.67 once on an idle machine, 0.95 in the next run, with 0.29 s of verl's own
# tensor preparation before its update_actor call. A missing child span leaves a whole stage.
MIN_EXPLAINED_EACH = 0.5
SYNC = semconv.SPAN_REPLICAS_PREFIX + "update_weights"
BATCH = 4  # the harness's data.train_batch_size: the prompt groups a step trains on
ABORT = semconv.SPAN_REPLICAS_PREFIX + "abort"


# The async paths verl 0.9.1 ships that run on the CPU harness: only v1 ``colocate_async``
# (trainer.v1.trainer_mode). separate_async, one_step_off_policy and fully_async_policy need a
# checkpoint engine that moves weights between pools (nccl/nixl/mooncake: cupy / CUDA), which
# the CPU harness cannot provide; see the module's report in the issue 12 notes.
DAPO = ("algorithm.filter_groups.enable=True",)  # verl drops a group whose rewards are all equal
FLAT = {"VERL_CPU_HARNESS_FLAT_REWARD": "2"}  # ... every group of a prompt with an even answer
RUNS = {
    "v0": ("v0", (), {}),
    "v1": ("v1", (), {}),
    "v1-colocate_async": ("v1", ("trainer.v1.trainer_mode=colocate_async", *DAPO), FLAT),
}


def _get(verl_runs, name):
    driver, extra, env = RUNS[name]
    result = verl_runs.get(driver, "grpo", extra=extra, env=env) if extra else verl_runs.get(driver, "grpo")
    assert result.returncode == 0, result.output[-4000:]
    return result


@pytest.fixture(scope="module", params=list(RUNS))
def run(request, verl_runs):
    return _get(verl_runs, request.param)


def _trainer_class(run) -> str:
    (init,) = [s for s in run.spans if s.name == semconv.SPAN_INIT]
    return init.attributes[semconv.ATTR_TRAINER_CLASS]


def _steps(run):
    steps = [s for s in run.spans if s.name == semconv.SPAN_STEP]
    assert len(steps) == 2
    return steps


def test_most_of_each_step_is_explained_by_a_child_span(run):
    """(colocate_async: verl aborting and sleeping the replicas after each sample, and syncing and
    resuming them, are ``verl.replicas.*`` spans; preparing the next batch, between stages, is not.)"""
    least = MIN_EXPLAINED_ASYNC if _trainer_class(run) == "PPOTrainerColocateAsync" else MIN_EXPLAINED
    explained = total = 0.0
    for step in _steps(run):
        trace = [s for s in run.spans if s.trace_id == step.trace_id]
        seconds = attributed_seconds(step, trace)
        assert seconds / step.seconds >= MIN_EXPLAINED_EACH, (step.attributes[semconv.ATTR_STEP], seconds, step.seconds)
        explained, total = explained + seconds, total + step.seconds
    assert explained / total >= least, (round(explained, 3), round(total, 3))


def test_the_weight_sync_and_replica_control_are_spans_under_their_stage(run):
    """``verl.replicas.update_weights`` (verl's CheckpointEngineManager) under each step's
    ``update_weights`` stage, carrying the step; colocate_async also aborts the replicas in ``gen``."""
    by_id = {s.span_id: s for s in run.spans}
    for step in _steps(run):
        n = step.attributes[semconv.ATTR_STEP]
        syncs = [s for s in run.spans if s.name == SYNC and s.attributes.get(semconv.ATTR_STEP) == n]
        (sync,) = syncs
        stage = by_id[sync.parent_id]
        assert stage.attributes[semconv.ATTR_STAGE] == "update_weights" and stage.parent_id == step.span_id
        assert sync.seconds <= stage.seconds
        if _trainer_class(run) == "PPOTrainerColocateAsync":
            aborts = [s for s in run.spans if s.name == ABORT and s.trace_id == step.trace_id]
            assert aborts and {by_id[a.parent_id].attributes[semconv.ATTR_STAGE] for a in aborts} == {"gen"}


def test_v1_gen_is_the_replay_buffer_waiting_for_rollouts(verl_runs):
    """(v0's gen stage waits inside its verl.rollout.generate child instead.)"""
    run = verl_runs.get("v1", "grpo")
    assert run.returncode == 0, run.output[-4000:]
    for step in _steps(run):
        (gen,) = [s for s in run.spans if s.parent_id == step.span_id and s.name == semconv.SPAN_GEN]
        waits = [s for s in run.spans if s.parent_id == gen.span_id and s.name == semconv.SPAN_WAIT]
        assert len(waits) == 1
        (wait,) = waits
        assert wait.attributes[semconv.ATTR_WAIT_FOR] == "rollouts"
        assert wait.attributes[semconv.ATTR_WAIT_PARTITION] == "train"
        assert wait.attributes[semconv.ATTR_STEP] == step.attributes[semconv.ATTR_STEP]
        assert covered_seconds(gen, waits) >= 0.9 * gen.seconds


def test_step_time_categories_add_up_and_match_the_raw_spans(run):
    """``verl.step.time`` / ``verl.time.*``: the categories partition each step; the v1 ``waiting``
    and the idle ratio equal what the raw ``verl.wait`` spans give, computed independently."""
    from otel_verl.hooks import accounting
    from otel_verl.offline.exports import step_gauges

    gauges = step_gauges(run.points)
    for step in _steps(run):
        n = step.attributes[semconv.ATTR_STEP]
        seconds = {c: step.attributes[semconv.ATTR_TIME_PREFIX + c] for c in accounting.CATEGORIES}
        assert sum(seconds.values()) == pytest.approx(step.seconds, rel=0.02, abs=0.005)
        for category, value in seconds.items():
            exported = gauges[(semconv.M_STEP_TIME, ((semconv.ATTR_TIME_CATEGORY, category),))][n]
            assert exported == pytest.approx(value, abs=1e-5)
        # v1: the replay buffer's wait; both drivers: the wait before the agent-loop workers start a
        # dispatched batch. One wait inside another counts once; v1's poll lag is its own category.
        waits = [s for s in run.spans if s.trace_id == step.trace_id and s.name == semconv.SPAN_WAIT]
        waited = covered_seconds(step, waits)
        assert seconds[accounting.WAITING] + seconds[accounting.POLL_LAG] == pytest.approx(waited, abs=0.02)
        idle = gauges[(semconv.M_TRAINER_IDLE_RATIO, ())][n]
        assert idle == pytest.approx(waited / step.seconds, abs=0.02)
        stages = {
            s.attributes[semconv.ATTR_STAGE]: s.seconds
            for s in run.spans
            if s.parent_id == step.span_id and semconv.ATTR_STAGE in s.attributes
        }
        assert seconds[accounting.TRAINING] == pytest.approx(
            sum(v for k, v in stages.items() if accounting.category_of(k) == accounting.TRAINING), abs=0.02
        )


def test_pool_time_adds_up_per_role_and_matches_the_raw_spans(run):
    """``verl.pool.time``: for every role busy + waiting + idle = the step; busy equals the role's
    stage spans, the trainer roles' waiting the raw ``verl.wait`` spans, and ``verl.rollout.idle_ratio``
    the rollout role's idle share, each computed here from the raw spans."""
    from otel_verl.hooks import accounting
    from otel_verl.offline.exports import step_gauges

    gauges = step_gauges(run.points)
    for step in _steps(run):
        n = step.attributes[semconv.ATTR_STEP]
        pools = {
            (dict(attrs)[semconv.ATTR_POOL_ROLE], dict(attrs)[semconv.ATTR_POOL_STATE]): values[n]
            for (name, attrs), values in gauges.items()
            if name == semconv.M_POOL_TIME and n in values
        }
        roles = {role for role, _ in pools}
        assert {accounting.POOL_ACTOR, accounting.POOL_ROLLOUT} <= roles <= set(accounting.POOL_ROLES)
        stages = [s for s in run.spans if s.parent_id == step.span_id and semconv.ATTR_STAGE in s.attributes]
        # their union: DAPO's refills dispatch (a verl.wait for the agent-loop workers) inside the replay
        # buffer's wait, and a wait inside a wait is no more waiting
        waits = [s for s in run.spans if s.trace_id == step.trace_id and s.name == semconv.SPAN_WAIT]
        waited = covered_seconds(step, waits)
        for role in roles:
            assert sum(pools[(role, state)] for state in accounting.POOL_STATES) == pytest.approx(
                step.seconds, rel=0.02, abs=0.005
            )
            busy = sum(
                s.seconds for s in stages if role in accounting.ROLES_OF_STAGE.get(s.attributes[semconv.ATTR_STAGE], ())
            )
            assert pools[(role, accounting.BUSY)] == pytest.approx(busy, abs=0.02), role
            expected_wait = 0.0 if role == accounting.POOL_ROLLOUT else waited
            assert pools[(role, accounting.POOL_WAITING)] == pytest.approx(expected_wait, abs=0.02), role
        assert (
            pools[(accounting.POOL_ACTOR, accounting.BUSY)] > 0
            and pools[(accounting.POOL_ROLLOUT, accounting.BUSY)] > 0
        )
        rollout_busy = sum(
            s.seconds
            for s in stages
            if accounting.POOL_ROLLOUT in accounting.ROLES_OF_STAGE.get(s.attributes[semconv.ATTR_STAGE], ())
        )
        idle = gauges[(semconv.M_ROLLOUT_IDLE_RATIO, ())][n]
        assert idle == pytest.approx((step.seconds - rollout_busy) / step.seconds, abs=0.02)


def test_rollout_replicas_busy_time_from_the_llm_call_spans(run):
    """Per replica (``otel_verl.offline.facts.pools``): the union of its in-flight LLM calls. On the sync
    drivers all of it lies in the stages that hold the rollout role, so ``verl.pool.time{role=rollout}``
    misses none; colocate_async's replicas run ahead into the training stages, which only the
    replica view shows."""
    from otel_verl.hooks import accounting
    from otel_verl.offline.facts.pools import replica_busy_seconds, replica_idle_ratio

    ahead = 0.0
    for step in _steps(run):
        busy = replica_busy_seconds(run.spans, step.start_ns, step.end_ns)
        assert busy, "no LLM call in the step's window"
        held = [
            s
            for s in run.spans
            if s.parent_id == step.span_id
            and accounting.POOL_ROLLOUT in accounting.ROLES_OF_STAGE.get(s.attributes.get(semconv.ATTR_STAGE, ""), ())
        ]
        in_held: dict[str, float] = {}
        for stage in held:
            for replica, sec in replica_busy_seconds(run.spans, stage.start_ns, stage.end_ns).items():
                in_held[replica] = in_held.get(replica, 0.0) + sec
        for replica, sec in busy.items():
            assert 0 < sec <= step.seconds + 1e-6
            ahead = max(ahead, sec - in_held.get(replica, 0.0))
        for ratio in replica_idle_ratio(run.spans, step.start_ns, step.end_ns, busy).values():
            assert 0.0 <= ratio < 1.0
    if _trainer_class(run) == "PPOTrainerColocateAsync":
        assert ahead > 0.1, ahead
    else:
        assert ahead == pytest.approx(0.0, abs=0.02)


def test_each_replicas_own_clock_agrees_with_the_llm_call_spans(run):
    """``verl.rollout.replica.busy_time``, counted in the rollout server actor
    (``otel_verl.hooks.rollout.server``), against the union of the agent-loop workers' LLM-call
    spans (client side: the Ray call and the load balancer's hand-out around the server's
    ``generate``, so the server's own figure is lower: by how much depends on the machine's load),
    at each export of the counter: never above the client's, and grown since the last export
    whenever the client made calls in between."""
    from otel_verl.offline.facts.pools import replica_busy_seconds

    points = sorted((p for p in run.points if p.name == semconv.M_ROLLOUT_REPLICA_BUSY_TIME), key=lambda p: p.time_ns)
    assert len(points) >= 2, points  # exported each time the replica went idle (validation, steps)
    assert {p.attributes.get(semconv.ATTR_ROLLOUT_REPLICA) for p in points} == {0}  # one replica, rank 0
    assert [p.value for p in points] == sorted(p.value for p in points)  # a counter
    start = min(s.start_ns for s in run.spans)
    before, client_before = 0.0, 0.0
    for p in points:
        client = sum(replica_busy_seconds(run.spans, start, p.time_ns).values())
        assert 0 < p.value <= client + 0.01, (p.value, client)
        if client > client_before + 0.01:
            assert p.value > before, (p.value, before, client, client_before)
        before, client_before = p.value, client


def test_goodput_by_role_partitions_each_step_and_summary_says_the_run_s_shares(run, request):
    """``verl.goodput.time`` (``instruments/goodput.py``): for every step each role's four buckets add up
    to the step; checked against the raw spans: the trainer is productive in its training stages,
    idle in ``gen`` and the waits for rollouts (their union), and the rollout role's overhead is the
    weight sync. The rollout role's wasted share of its generation is verl's own count of the step's
    dropped groups D (and aborted samples a) over the groups it generated: (D + a x 4) / (D + 4); on
    v0 and plain v1 verl dropped none (nothing wasted), on the DAPO run it dropped some (wasted > 0,
    ``verl.goodput.dropped_groups`` their sum). The report's account (``facts.goodput``) adds the
    run's time outside its steps as overhead and summary's health line gives each role's shares and
    the groups verl dropped."""
    from otel_verl.hooks import accounting
    from otel_verl.instruments import goodput
    from otel_verl.offline.exports import StepGauges
    from otel_verl.offline.facts.goodput import GoodputFold, percent
    from otel_verl.offline.run.model import build
    from otel_verl.offline.run.text import lines

    steps = _steps(run)
    dropped_in_run = 0
    fold = GoodputFold(keep={s.attributes[semconv.ATTR_STEP] for s in steps})
    gauges = StepGauges(listeners=(fold,))
    for p in sorted(run.points, key=lambda p: p.time_ns):
        gauges.add(p)
    gauges.close()
    for step in steps:
        got = fold.per_step[step.attributes[semconv.ATTR_STEP]]
        for role in goodput.ROLES:
            total = sum(got.get((role, b), 0.0) for b in goodput.BUCKETS)
            assert total == pytest.approx(step.seconds, rel=0.02, abs=0.005), role
        logged = run.console[step.attributes[semconv.ATTR_STEP]]
        dropped = sum(logged.get(k, 0) for k in semconv.DROPPED_GROUP_KEYS)
        aborted = logged.get(semconv.ABORTED_RATIO_KEY, 0.0)
        share = (dropped + aborted * BATCH) / (dropped + BATCH)
        generation = got[("rollout", "productive")] + got.get(("rollout", "wasted"), 0.0)
        assert got.get(("rollout", "wasted"), 0.0) == pytest.approx(share * generation, abs=0.005), (logged, got)
        assert got.get(("trainer", "wasted"), 0.0) == 0.0
        dropped_in_run += dropped
        trace = [s for s in run.spans if s.trace_id == step.trace_id]
        stages = [s for s in trace if s.parent_id == step.span_id and semconv.ATTR_STAGE in s.attributes]
        training = sum(
            s.seconds for s in stages if accounting.category_of(s.attributes[semconv.ATTR_STAGE]) == accounting.TRAINING
        )
        assert got[("trainer", "productive")] == pytest.approx(training, abs=0.02)
        waiting = [s for s in stages if s.attributes[semconv.ATTR_STAGE] == "gen"]
        waiting += [s for s in trace if s.name == semconv.SPAN_WAIT]
        assert got[("trainer", "idle")] == pytest.approx(covered_seconds(step, waiting), abs=0.02)
        sync = sum(s.seconds for s in stages if s.attributes[semconv.ATTR_STAGE] == "update_weights")
        assert got[("rollout", "overhead")] == pytest.approx(sync, abs=0.02)
        assert got[("rollout", "productive")] > 0

    report = build(run.telemetry_dir)
    account = report.health.goodput
    assert account is not None and account.steps == 2 and account.dropped_groups == dropped_in_run
    counted = [p.value for p in run.points if p.name == semconv.M_GOODPUT_DROPPED_GROUPS]
    assert (max(counted) if counted else 0) == dropped_in_run  # the counter, cumulative
    if DAPO[0] in RUNS[request.node.callspec.params["run"]][1]:  # verl dropped groups: their generation wasted
        assert dropped_in_run > 0 and account.run_s()[("rollout", "wasted")] > 0, dropped_in_run
    else:
        assert dropped_in_run == 0
    cover = max(s.end_ns for s in run.spans) - min(s.start_ns for s in run.spans)
    for role in goodput.ROLES:
        run_s = account.run_s()
        assert sum(run_s[(role, b)] for b in goodput.BUCKETS) == pytest.approx(cover / 1e9, rel=0.01)
    (line,) = [text for text in lines(report) if "goodput:" in text]
    shares = account.shares("rollout")
    assert f"rollout productive {percent(shares['productive'])}, overhead {percent(shares['overhead'])}" in line
    assert f"{dropped_in_run:g} prompt group{'s' if dropped_in_run != 1 else ''} dropped by verl" in line
