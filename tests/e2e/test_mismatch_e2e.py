"""End-to-end: a rollout whose policy is not the trained one, on the real trainer (both drivers).

The runs are tests/shared_runs.py's ``tail_run`` (no run of their own). Their rollout server adds
Gaussian noise (sigma 2) to every log-prob it returns (``VERL_CPU_HARNESS_LOGPROB_NOISE``), as an
engine whose weights or numerics disagree with the trainer's would: verl's own comparison with the
trainer's recomputed log-probs (``training/rollout_actor_probs_pearson_corr``, ~0.997 on a healthy
CPU run, test_verl_cpu.py) collapses, while training is unchanged (verl trains on its own
log-probs). Checked on those runs:

* verl logged the collapse at every step, and the named instruments carry exactly verl's values
  (correlation, probability differences, ``rollout_corr/*``, v1's staleness);
* the guard's built-in ``rollout_policy_mismatch`` rule fired at step 2 (two steps below 0.5), and
  ``summary``'s health block says so, with the alert the run's values would have fired;
* ``VerlRolloutPolicyMismatch`` (warning and critical) fires on the run's own series, replayed
  stretched to two hours (``promreplay``), and is silent before its ``for``; on v1, with the run's
  own staleness series raised by 5 model versions for the last 30 minutes, ``VerlOffPolicyStalenessHigh``.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict

import numpy as np
import pytest
from support.opskit import require_tool
from support.promreplay import Replay, run_series
from support.shared_runs import STEPS, tail_run

from otel_verl import semconv
from otel_verl.offline.summary import summary

pytestmark = pytest.mark.e2e

MIN = 60
RULE = "rollout_policy_mismatch"


@pytest.fixture(scope="module", params=["v0", "v1"])
def run(request, verl_runs):
    return tail_run(verl_runs, request.param)


def _same(exported: float, logged: float) -> bool:
    """Equal, allowing for verl printing float32 values in float32 precision."""
    return exported == logged or bool(np.float32(exported) == np.float32(logged))


def _named_by_step(run) -> dict[int, dict[tuple, float]]:
    """step -> (instrument, attributes) -> value, from the TaskRunner's first export after each step."""
    batches: dict[int, dict[tuple, object]] = defaultdict(dict)
    for p in run.points:
        if p.resource.get(semconv.RES_ROLE) == semconv.ROLE_TASKRUNNER:
            batches[p.time_ns][(p.name, tuple(sorted(p.attributes.items())))] = p.value
    by_step: dict[int, dict[tuple, float]] = {}
    for t in sorted(batches):
        step = batches[t].get((semconv.M_TRAINING_STEP, ()))
        if step is not None:
            by_step.setdefault(int(step), batches[t])
    return by_step


def test_named_instruments_carry_verls_values_of_the_mismatch(run):
    by_step = _named_by_step(run)
    assert sorted(run.console) == sorted(by_step) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        logged, exported = run.console[step], by_step[step]
        corr = logged[semconv.PROBS_CORRELATION_KEY]
        assert corr < 0.5, (step, corr)  # the injected disagreement, in verl's own figure
        assert _same(exported[(semconv.M_ROLLOUT_PROBS_CORRELATION, ())], corr)
        for key, stat in semconv.PROBS_DIFF_KEYS.items():
            assert _same(exported[(semconv.M_ROLLOUT_PROBS_DIFF, ((semconv.ATTR_STAT, stat),))], logged[key])
        measures = {k: m for k, m in semconv.MISMATCH_KEYS.items() if k in logged and math.isfinite(logged[k])}
        assert set(measures.values()) == set(semconv.MISMATCH_MEASURES), sorted(logged)  # verl's default config
        for key, measure in measures.items():
            attrs = ((semconv.ATTR_MISMATCH_MEASURE, measure),)
            assert _same(exported[(semconv.M_ROLLOUT_MISMATCH, attrs)], logged[key]), key
        stale = {k: v for k, v in semconv.STALENESS_KEYS.items() if k in logged}
        assert bool(stale) == (run.driver == "v1")  # the v1 driver's
        for key, (bound, stat) in stale.items():
            attrs = tuple(sorted({semconv.ATTR_STALENESS_BOUND: bound, semconv.ATTR_STAT: stat}.items()))
            assert exported[(semconv.M_OFF_POLICY_STALENESS, attrs)] == logged[key] == 0  # synchronous


def test_the_guards_rule_fired_at_the_second_step_and_summary_says_so(run):
    assert f"otel-verl guard: rule {RULE} at step 2: {semconv.PROBS_CORRELATION_KEY}=" in run.output
    counts = [
        p.value
        for p in run.points
        if p.name == semconv.M_GUARD_TRIGGERED and p.attributes.get(semconv.ATTR_GUARD_RULE) == RULE
    ]
    assert counts and max(counts) == 1
    out = io.StringIO()
    assert summary(run.telemetry_dir, out=out, err=io.StringIO()) == 0
    health = out.getvalue().split("\n\n")[0]  # its first block: the run's health
    (guard,) = [x for x in health.splitlines() if x.startswith("  [check] guard: ")]
    assert f"{RULE} fired 1 time at step 2 ({semconv.PROBS_CORRELATION_KEY}=" in guard, health
    assert "would have fired: VerlRolloutPolicyMismatch from step 2" in health, health


def test_the_mismatch_alerts_fire_on_the_runs_own_series(run, tmp_path):
    require_tool("promtool")
    replay = Replay.stretched(run_series(run.telemetry_dir), "verl_training_step", 2 * 3600)
    end = replay.end()
    first = replay.after("verl_training_rollout_probs_correlation")
    times = {"VerlRolloutPolicyMismatch": (first + 4 * MIN, end - 5 * MIN)}  # silent inside both `for`s
    if run.driver == "v1":
        fail = end - 30 * MIN
        labels = {"verl_staleness_bound": "lower", "verl_stat": "mean"}
        replay.what_if("verl_training_off_policy_staleness", lambda v, t: v + 5, fail, **labels)
        times["VerlOffPolicyStalenessHigh"] = (fail - MIN, end - 5 * MIN)
    got = replay.alerts(tmp_path, [(a, t) for a, pair in times.items() for t in pair])
    run_id = {s.labels["verl_run_id"] for s in replay.find("verl_training_step")}.pop()
    for alert, (silent, firing) in times.items():
        assert not got[(alert, silent)], (alert, got[(alert, silent)])
        fired = got[(alert, firing)]
        assert fired and {a["verl_run_id"] for a in fired} == {run_id}, (alert, fired)
    severities = {a["severity"] for a in got[("VerlRolloutPolicyMismatch", end - 5 * MIN)]}
    assert severities == {"warning", "critical"}
