"""End-to-end: the long tail always in view, on the real trainer (both drivers).

One run per driver (tests/shared_runs.py's ``tail_run``) with a span budget below the trajectories
per step (3 trees of 4 prompts x ``rollout.n`` 2 = 8 trajectories, the slowest 1 of them kept as
such) and the harness's switch that makes every 5th sampled request wait 1 s (so every step has a
slow trajectory, whichever it is); on v1 every 7th sampled request also fails (v1 keeps training: a
failed prompt group is padded; on v0 a failed trajectory fails the step, so that run has none). The
same runs carry the harness's rollout/training mismatch (``VERL_CPU_HARNESS_LOGPROB_NOISE``: noisy
rollout log-probs, which verl compares with the trainer's and does not train on), checked in
test_mismatch_e2e.py, and sampled generations, checked in test_logs_e2e.py. Checked on each step:

* the step's slowest trajectory, named by its ``verl.rollout.slowest_trajectory`` event, is
  exported with ``kept_because=slowest`` and its whole tree: its LLM call and the reward worker's
  span (handed back across the Ray reply);
* no more trees than the budget besides failed ones, and every failed one, whole;
* the histograms count every trajectory;
* the TaskRunner's ``verl.rollout.dispatch`` span with the wait before the workers start, counted in
  the step's ``waiting``;
* v0: trajectories are in the step's trace; v1: their own traces, linked to the step's gen span;
* generation health: the harness's switch that makes every 2nd sampled request answer a loop (one
  token up to the length limit) or an empty response, in turn, shows in each step's
  ``verl.rollout.degenerate_ratio`` and on the kept trajectories' spans, without their token ids;
  ``summary``'s health line names each kind with its share of the training responses as those
  points say it; the guard's ``degenerate_responses`` rule fires on the TaskRunner's own measure of
  the training batch, with the action chosen for that rule (``record``), and
  ``VerlRolloutDegenerateResponses`` fires on the run's own series;
* goodput (v1): ``summary`` names the failed trajectories (not trained on, not counted by verl)
  beside the goodput buckets.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

import pytest
from support.opskit import require_tool
from support.points import latest_count
from support.promreplay import Replay, run_series
from support.shared_runs import (
    GUARD_DEGENERATE_RULE,
    STEPS,
    TAIL_BUDGET,
    TAIL_DEGENERATE_EVERY,
    TAIL_FAIL_EVERY,
    TAIL_SLOW_S,
    tail_run,
)

from otel_verl import semconv
from otel_verl.offline.facts.generation import percent
from otel_verl.offline.run.model import build
from otel_verl.offline.run.text import lines

pytestmark = pytest.mark.e2e

PER_STEP = 4 * 2  # train_batch_size x rollout.n
MAX_RESPONSE = 16  # the harness's data.max_response_length
MIN = 60


def _train(spans):
    return [s for s in spans if not s.attributes.get(semconv.ATTR_ROLLOUT_VALIDATE)]


def _check_tail(run, driver):
    by_id = {s.span_id: s for s in run.spans}
    children = defaultdict(list)
    for s in run.spans:
        children[s.parent_id].append(s)
    trajs = _train([s for s in run.spans if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY])
    by_step = defaultdict(list)
    for t in trajs:
        by_step[t.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP]].append(t)
    carrier = semconv.SPAN_ROLLOUT_BATCH if driver == "v0" else semconv.SPAN_ROLLOUT_TAIL
    events = {}
    for s in _train([s for s in run.spans if s.name == carrier]):
        for e in s.event_attributes(semconv.EVENT_SLOWEST_TRAJECTORY):
            events.setdefault(e[semconv.ATTR_ROLLOUT_SUBMIT_STEP], []).append(e)
    assert set(range(1, STEPS + 1)) <= set(events), sorted(events)
    errors = 0
    for step in range(1, STEPS + 1):
        # one agent-loop worker: one event per step, or one per round when the step's trajectories
        # ended before all had started (keep.py: rounds share the budget, each keeps its slowest)
        rounds = events[step]
        event = max(rounds, key=lambda e: e[semconv.ATTR_ROLLOUT_DURATION])
        slowest = by_id[event[semconv.ATTR_ROLLOUT_SLOWEST_SPAN_ID]]
        assert slowest.trace_id == event[semconv.ATTR_ROLLOUT_SLOWEST_TRACE_ID]
        assert slowest.name == semconv.SPAN_ROLLOUT_TRAJECTORY
        assert slowest.seconds == pytest.approx(event[semconv.ATTR_ROLLOUT_DURATION], abs=0.01)
        assert event[semconv.ATTR_ROLLOUT_DURATION] >= TAIL_SLOW_S  # the slow request's, whichever it was
        if slowest.attributes[semconv.ATTR_ROLLOUT_STATUS] == semconv.STATUS_OK:
            assert slowest.attributes[semconv.ATTR_ROLLOUT_KEPT_BECAUSE] == semconv.KEPT_SLOWEST
            assert slowest.attributes[semconv.ATTR_ROLLOUT_SLOWEST_RANK] == 1
        # the step's others are no slower (those exported), and the budget holds besides failed ones
        group = by_step[step]
        assert all(t.seconds <= slowest.seconds + 0.01 for t in group)
        because = defaultdict(list)
        for t in group:
            because[t.attributes[semconv.ATTR_ROLLOUT_KEPT_BECAUSE]].append(t)
        failed = because.pop(semconv.KEPT_ERROR, [])
        assert len(because[semconv.KEPT_SLOWEST]) == len(rounds)
        ok = sum(e[semconv.ATTR_ROLLOUT_TRAJECTORIES] for e in rounds) - len(failed)
        kept = sum(len(v) for v in because.values())
        assert kept <= TAIL_BUDGET + len(rounds) - 1 and (len(rounds) > 1 or kept == min(TAIL_BUDGET, ok))
        assert sum(e[semconv.ATTR_ROLLOUT_KEPT_PREFIX + semconv.KEPT_ERROR] for e in rounds) == len(failed)
        assert sum(e[semconv.ATTR_ROLLOUT_NOT_KEPT] for e in rounds) == ok - kept
        for t in because[semconv.KEPT_SAMPLE]:
            assert 0 < t.attributes[semconv.ATTR_ROLLOUT_SAMPLE_RATE] < 1
        for t in failed:
            assert t.attributes[semconv.ATTR_ROLLOUT_STATUS] == semconv.STATUS_ERROR and t.status == "STATUS_CODE_ERROR"
        errors += len(failed)
        # every kept tree is whole: its LLM call, and (if it was scored) the reward worker's span
        for t in group:
            below = children[t.span_id]
            (call,) = [c for c in below if semconv.is_llm_call(c.name, c.attributes)]
            assert call.trace_id == t.trace_id and call.resource["process.pid"] == t.resource["process.pid"]
            rewards = [c for c in below if c.name == semconv.SPAN_REWARD_WORKER]
            if t.attributes[semconv.ATTR_ROLLOUT_STATUS] == semconv.STATUS_OK:
                (reward,) = rewards
                assert reward.resource[semconv.RES_ROLE] == semconv.ROLE_REWARD_WORKER
                assert reward.resource["process.pid"] != t.resource["process.pid"]
                assert t.start_ns <= reward.start_ns <= reward.end_ns <= t.end_ns
            else:
                assert call.status == "STATUS_CODE_ERROR" and rewards == []
    # no reward span outside a kept tree: the others were dropped with their trajectories
    exported = {t.span_id for t in run.spans if t.name == semconv.SPAN_ROLLOUT_TRAJECTORY}
    assert all(r.parent_id in exported for r in run.spans if r.name == semconv.SPAN_REWARD_WORKER)
    # the histograms count every trajectory, kept or not; every failed one was kept
    counted = latest_count(run, semconv.M_ROLLOUT_TRAJECTORY_DURATION, **{semconv.ATTR_ROLLOUT_VALIDATE: False})
    assert counted >= STEPS * PER_STEP > len(trajs)
    failed_counted = latest_count(
        run,
        semconv.M_ROLLOUT_TRAJECTORY_DURATION,
        **{semconv.ATTR_ROLLOUT_VALIDATE: False, semconv.ATTR_ROLLOUT_STATUS: semconv.STATUS_ERROR},
    )
    assert failed_counted == errors
    return by_step


def _check_health(run):
    """Each step's shares of degenerate responses (the harness's loops and empty answers: 4 of each
    step's 8 sampled requests), and the kept trajectories that are degenerate say so."""
    shares = defaultdict(set)
    for p in run.points:
        if p.name == semconv.M_ROLLOUT_DEGENERATE_RATIO and not p.attributes[semconv.ATTR_ROLLOUT_VALIDATE]:
            shares[p.attributes[semconv.ATTR_ROLLOUT_DEGENERATE_KIND]].add(p.value)
    assert set(shares) == {semconv.DEGENERATE_LENGTH_LIMIT, semconv.DEGENERATE_EMPTY, semconv.DEGENERATE_REPETITIVE}
    assert all(0.0 <= v <= 1.0 for values in shares.values() for v in values)
    assert max(shares[semconv.DEGENERATE_REPETITIVE]) >= 1 / PER_STEP, shares
    assert max(shares[semconv.DEGENERATE_EMPTY]) >= 1 / PER_STEP, shares
    # a loop runs to the limit: the length-limit share is never below the repetitive one's
    assert max(shares[semconv.DEGENERATE_LENGTH_LIMIT]) >= max(shares[semconv.DEGENERATE_REPETITIVE])
    for t in _train([s for s in run.spans if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY]):
        kinds = set(t.attributes.get(semconv.ATTR_ROLLOUT_DEGENERATE, ()))
        tokens = t.attributes.get(semconv.ATTR_ROLLOUT_RESPONSE_TOKENS)
        if semconv.DEGENERATE_REPETITIVE in kinds:
            assert semconv.DEGENERATE_LENGTH_LIMIT in kinds and tokens == MAX_RESPONSE
            assert t.attributes[semconv.ATTR_ROLLOUT_REPETITION] > 0.9  # one token repeated: 1 - 1/13
        if semconv.DEGENERATE_EMPTY in kinds:
            assert tokens == 1
        if tokens is not None:
            assert (semconv.DEGENERATE_LENGTH_LIMIT in kinds) == (tokens >= MAX_RESPONSE)
            assert 0.0 <= t.attributes[semconv.ATTR_ROLLOUT_REPETITION] <= 1.0
    line = next(x for x in lines(build(run.telemetry_dir)) if "generation health:" in x).split("; validation")[0]
    assert all(f" {kind}" in line for kind in degenerate_shares(run)) and "repetitive 0%" not in line, line


def degenerate_shares(run) -> list[str]:
    """Each degenerate kind's share of the training responses, as the run's own
    ``verl.rollout.degenerate_ratio`` points say it and as summary writes it ("repetitive 12.5%"): a
    point belongs to the last step span that started at or before it (step 0 before the first), a
    worker's share in a step is its latest point there, a step's is the mean over its workers, the
    run's the mean over its steps."""
    starts = sorted((s.start_ns, s.attributes[semconv.ATTR_STEP]) for s in run.spans if s.name == semconv.SPAN_STEP)
    latest = {}  # (kind, step, worker) -> (time, share)
    for p in run.points:
        if p.name == semconv.M_ROLLOUT_DEGENERATE_RATIO and not p.attributes[semconv.ATTR_ROLLOUT_VALIDATE]:
            step = ([n for t, n in starts if t <= p.time_ns] or [0])[-1]
            key = (p.attributes[semconv.ATTR_ROLLOUT_DEGENERATE_KIND], step, p.resource.get("process.pid"))
            if key not in latest or p.time_ns >= latest[key][0]:
                latest[key] = (p.time_ns, p.value)
    steps = defaultdict(list)  # (kind, step) -> the workers' shares
    for (kind, step, _), (_, share) in latest.items():
        steps[(kind, step)].append(share)
    runs = defaultdict(list)
    for (kind, _), shares in steps.items():
        runs[kind].append(sum(shares) / len(shares))
    return [f"{kind} {percent(sum(v) / len(v))}" for kind, v in sorted(runs.items())]


def _check_dispatch(run, driver):
    steps = {s.attributes[semconv.ATTR_STEP]: s for s in run.spans if s.name == semconv.SPAN_STEP}
    by_id = {s.span_id: s for s in run.spans}
    dispatches = [s for s in run.spans if s.name == semconv.SPAN_ROLLOUT_DISPATCH]
    waits = [s for s in run.spans if s.name == semconv.SPAN_WAIT and s.parent_id in {d.span_id for d in dispatches}]
    for n, step in steps.items():
        mine = [d for d in dispatches if d.trace_id == step.trace_id]
        assert mine, f"step {n}: no dispatch span"
        for d in mine:
            assert d.resource[semconv.RES_ROLE] == semconv.ROLE_TASKRUNNER
            parent = by_id[d.parent_id]
            assert parent.name == (semconv.SPAN_GEN if driver == "v0" else semconv.SPAN_STEP)
        mine_waits = [w for w in waits if w.trace_id == step.trace_id]
        assert mine_waits and all(
            w.attributes[semconv.ATTR_WAIT_FOR] == semconv.WAIT_AGENT_LOOP_WORKERS for w in mine_waits
        )
        # the wait is the step's waiting (v0: inside gen; v1: in prepare_step, between stages)
        waited = sum(w.seconds for w in mine_waits)
        assert step.attributes[semconv.ATTR_TIME_PREFIX + "waiting"] >= waited - 0.01
        if driver == "v0":
            (d,) = mine
            batches = [s for s in run.spans if s.name == semconv.SPAN_ROLLOUT_BATCH and s.parent_id == d.span_id]
            (batch,) = batches  # the worker's batch span is the dispatch's child: the gap is the queue
            queued = (batch.start_ns - d.start_ns) / 1e9
            assert d.attributes[semconv.ATTR_ROLLOUT_QUEUED] == pytest.approx(queued, abs=1e-3)


def test_v0_every_steps_slowest_trajectory_keeps_its_tree_in_the_step_trace(verl_runs):
    run = tail_run(verl_runs, "v0")
    by_step = _check_tail(run, "v0")
    steps = {s.attributes[semconv.ATTR_STEP]: s for s in run.spans if s.name == semconv.SPAN_STEP}
    by_id = {s.span_id: s for s in run.spans}
    for step, trajs in by_step.items():
        for t in trajs:  # v0: children of the step's trace, under the worker's batch span
            assert t.trace_id == steps[step].trace_id and t.links == []
            assert by_id[t.parent_id].name == semconv.SPAN_ROLLOUT_BATCH
    _check_dispatch(run, "v0")
    _check_health(run)


def test_v1_every_steps_slowest_trajectory_keeps_its_tree_in_its_own_linked_trace(verl_runs):
    run = tail_run(verl_runs, "v1")
    by_step = _check_tail(run, "v1")
    assert any(
        t.attributes[semconv.ATTR_ROLLOUT_KEPT_BECAUSE] == semconv.KEPT_ERROR for ts in by_step.values() for t in ts
    ), "no failed trajectory: the harness's failure switch did not apply"
    gens = {}
    for s in sorted(run.spans, key=lambda s: s.start_ns):
        if s.name == semconv.SPAN_GEN:
            gens.setdefault(s.attributes[semconv.ATTR_STEP], s)
    for step, trajs in by_step.items():
        for t in trajs:  # v1: roots of their own traces, linked to the gen span of the step that submitted them
            assert t.parent_id == "" and t.trace_id != gens[step].trace_id
            (link,) = t.links
            assert link.span_id == gens[step].span_id
    _check_dispatch(run, "v1")
    # goodput: the failed trajectories were not trained on, and verl counts them nowhere (it refills
    # none: sync_refill_failed_groups is off); summary names them beside the buckets
    failed = [t for ts in by_step.values() for t in ts if t.attributes[semconv.ATTR_ROLLOUT_STATUS] != "ok"]
    line = next(x for x in lines(build(run.telemetry_dir)) if "goodput:" in x)
    named = re.search(r"; (\d+) trajector(?:y|ies) failed in the agent loop \(([\d.]+) s\)", line)
    assert named is not None, line
    assert int(named.group(1)) == len(failed)
    assert float(named.group(2)) == pytest.approx(sum(t.seconds for t in failed), abs=0.02)
    _check_health(run)


def _harness_shares(driver: str, monkeypatch) -> dict[int, dict[str, float]]:
    """Each step's repetitive and empty shares of the training batch, as the harness makes them: the
    rollout server numbers its sampled requests (8 per step, one server), every
    ``TAIL_DEGENERATE_EVERY``-th answers a loop or an empty response in turn (``hfcpu._degenerate``),
    and on v1 every ``TAIL_FAIL_EVERY``-th fails: that trajectory is not in the batch."""
    from verl_cpu_harness import hfcpu

    monkeypatch.setenv(hfcpu.DEGENERATE_EVERY, str(TAIL_DEGENERATE_EVERY))
    kinds = {hfcpu.LOOP: semconv.DEGENERATE_REPETITIVE, hfcpu.EMPTY: semconv.DEGENERATE_EMPTY}
    out = {}
    for step in range(1, STEPS + 1):
        numbers = range(PER_STEP * (step - 1) + 1, PER_STEP * step + 1)
        trained = [n for n in numbers if driver == "v0" or n % TAIL_FAIL_EVERY]
        answers = [hfcpu._degenerate(n) for n in trained]
        out[step] = {kind: answers.count(answer) / len(trained) for answer, kind in kinds.items()}
    return out


@pytest.mark.parametrize("driver", ["v0", "v1"])
def test_the_guard_acts_on_the_batchs_degenerate_shares_by_the_action_chosen_for_its_rule(
    verl_runs, driver, monkeypatch
):
    """The built-in ``degenerate_responses`` rule (above 0.2 two steps in a row) on the TaskRunner's
    own measure of each training batch: it fires at step 2 for exactly the kinds the harness made
    above the threshold at both steps, with the batch's share, and only records
    (``OTEL_VERL_GUARD_ACTIONS``), while the mismatch rule at the same step alerts (the global
    action); the console and ``summary`` say both."""
    run = tail_run(verl_runs, driver)
    expected = {}
    shares = _harness_shares(driver, monkeypatch)
    for kind in (semconv.DEGENERATE_REPETITIVE, semconv.DEGENERATE_EMPTY):
        if all(shares[step][kind] > 0.2 for step in (1, 2)):
            expected[(semconv.GUARD_DEGENERATE_KEYS[kind], 2)] = shares[2][kind]
    assert expected, shares  # the harness's switch puts at least one kind above the rule's threshold
    fired = defaultdict(list)
    for s in run.spans:
        if s.name == semconv.SPAN_GUARD:
            for e in s.event_attributes(semconv.EVENT_GUARD_TRIGGERED):
                fired[e[semconv.ATTR_GUARD_RULE]].append(e)
    mine = fired[GUARD_DEGENERATE_RULE]
    got = {(e[semconv.ATTR_METRIC_KEY], e[semconv.ATTR_STEP]): e[semconv.ATTR_GUARD_VALUE] for e in mine}
    assert got == pytest.approx(expected), shares
    assert {e[semconv.ATTR_GUARD_ACTION] for e in mine} == {"record"}
    assert [e[semconv.ATTR_GUARD_ACTION] for e in fired["rollout_policy_mismatch"]] == ["alert"]
    for key, step in expected:
        assert f"otel-verl guard: rule {GUARD_DEGENERATE_RULE} at step {step}: {key}=" in run.output
    assert re.search(rf"otel-verl guard: rule {GUARD_DEGENERATE_RULE} at step 2: .*; action: record", run.output)
    line = next(x for x in lines(build(run.telemetry_dir)) if "guard:" in x)
    n = len(expected)
    assert f"{GUARD_DEGENERATE_RULE} fired {n} time{'s' if n > 1 else ''} at step 2 (" in line, line
    assert "; action record)" in line and "; action alert)" in line, line


@pytest.mark.parametrize("driver", ["v0", "v1"])
def test_the_degenerate_alert_fires_on_the_runs_own_series(verl_runs, driver, monkeypatch, tmp_path):
    """``VerlRolloutDegenerateResponses`` on the run's own ``verl.rollout.degenerate_ratio`` series
    (its one agent-loop worker's), replayed stretched to two hours (``promreplay``): silent inside its
    15 minutes' ``for``; where the worker's last share shows, firing for exactly the kinds the harness
    put above 0.2 at both steps (as the guard's rule: the shares change at that point)."""
    require_tool("promtool")
    run = tail_run(verl_runs, driver)
    shares = _harness_shares(driver, monkeypatch)
    expected = {kind for kind in shares[STEPS] if all(shares[step][kind] > 0.2 for step in shares)}
    assert expected, shares
    replay = Replay.stretched(run_series(run.telemetry_dir), "verl_training_step", 2 * 3600)
    training = {"verl_rollout_validate": "false"}
    first = replay.after("verl_rollout_degenerate_ratio", **training)
    # the grid point where the worker's last export shows (its series end there: the process ends)
    last = math.ceil(replay.last("verl_rollout_degenerate_ratio", **training) / replay.step_s - 1e-9) * replay.step_s
    assert last - first > 30 * MIN, (first, last)
    alert = "VerlRolloutDegenerateResponses"
    got = replay.alerts(tmp_path, [(alert, first + 4 * MIN), (alert, last)])
    assert got[(alert, first + 4 * MIN)] == []
    fired = got[(alert, last)]
    assert {a["verl_rollout_degenerate_kind"] for a in fired} == expected, (fired, shares)
    run_id = {s.labels["verl_run_id"] for s in replay.find("verl_training_step")}.pop()
    assert {a["verl_run_id"] for a in fired} == {run_id}
