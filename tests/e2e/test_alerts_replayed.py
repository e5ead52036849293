"""The value-threshold alerts, fired on the series a real healthy run exported (``promreplay``).

A two-step CPU run neither diverges nor runs for hours, so its series are replayed stretched to
eight hours (the weight-sync rule compares with the six hours before) and, half an hour before the
end, the failure each rule is about is put into the values of the series the run did export
(``Replay.what_if``): KL up by 0.6, the reward score down to a tenth (of a run scoring about 1),
entropy to a thousandth, the grad norms ten times higher for five minutes, throughput to 0.3 of
itself, the rollout tail ratio five times itself, the share of repetitive training responses to 0.6
(the run's own share, the rule's kind and label values: a random model sampling 16 tokens seldom
loops), and the update_weights stage, one step a minute
(the mean the run's own steps logged) before, then 20 s a step. What this shows beyond the
hand-written promtool cases: every name, label and aggregation the rules read is the run's own,
from the same files a user's collector receives; each alert fires with the run's identity and is
silent before its failure. Alerts whose failure a real run does show are fired on those runs:
test_guard.py (NaN/Inf, guard, telemetry lost), faults/test_stall.py (both stall alerts).

The run is the shared ``verl_runs.get("v0", "ppo")`` (test_verl_cpu's): no run of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.opskit import require_tool
from support.promreplay import WHAT_IF, Replay, run_series

pytestmark = pytest.mark.e2e

HOURS = 8
MIN = 60


@pytest.fixture(scope="module")
def ppo(verl_runs):
    run = verl_runs.get("v0", "ppo", steps=2)
    assert run.returncode == 0, run.output[-3000:]
    return run


def _weight_sync(replay: Replay, fail: float, end: float) -> None:
    """update_weights as one step a minute: before ``fail`` each the run's own mean, then 20 s each."""
    labels = {"verl_stage": "update_weights"}
    (count,) = replay.find("verl_stage_duration_seconds_count", **labels)
    (total,) = replay.find("verl_stage_duration_seconds_sum", **labels)
    mean = total.samples[-1][1] / count.samples[-1][1]
    assert 0 < mean < 10  # the run's own weight sync: well under the rule's 10 s floor

    def steps(t: float) -> float:
        return t // MIN

    def seconds(t: float) -> float:
        return min(t, fail) // MIN * mean + max(0.0, t - fail) // MIN * 20.0

    replay.what_if("verl_stage_duration_seconds_count", lambda v, t: steps(t), 0, end, **labels)
    replay.what_if("verl_stage_duration_seconds_sum", lambda v, t: seconds(t), 0, end, **labels)


def test_each_value_alert_fires_on_the_runs_series_and_only_after_its_failure(ppo, tmp_path):
    require_tool("promtool")
    replay = Replay.stretched(run_series(ppo.telemetry_dir), "verl_training_step", HOURS * 3600)
    end = replay.end()
    fail = end - 30 * MIN  # the failure, 30 min before the run's end ...
    slow_fail = end - 60 * MIN  # ... an hour for the weight sync's 30 min window and 15 min hold
    replay.what_if("verl_training_kl", lambda v, t: v + 0.6, fail)
    replay.what_if("verl_training_reward", lambda v, t: v + 1.0, 0, verl_reward_source="score")  # a run scoring ~1
    replay.what_if("verl_training_reward", lambda v, t: v * 0.1, fail, verl_reward_source="score")
    replay.what_if("verl_actor_entropy", lambda v, t: v * 0.001, fail)
    replay.what_if("verl_actor_grad_norm", lambda v, t: v * 10, fail, fail + 5 * MIN)
    replay.what_if("verl_critic_grad_norm", lambda v, t: v * 10, fail, fail + 5 * MIN)
    replay.what_if("verl_training_throughput_per_second", lambda v, t: v * 0.3, fail)
    _weight_sync(replay, slow_fail, end)
    tail_end = replay.last("verl_rollout_tail_ratio")  # the agent-loop worker's: it may end before the TaskRunner
    replay.what_if("verl_rollout_tail_ratio", lambda v, t: v * 5, tail_end - 30 * MIN)  # a ratio is >= 1
    repetitive = {"verl_rollout_degenerate_kind": "repetitive", "verl_rollout_validate": "false"}
    degenerate_end = replay.last("verl_rollout_degenerate_ratio", **repetitive)  # also the agent-loop worker's
    assert all(v <= 1 for s in replay.find("verl_rollout_degenerate_ratio") for _, v in s.samples)
    replay.find("verl_rollout_degenerate_ratio", verl_rollout_degenerate_kind="length_limit")  # on the panel
    replay.what_if("verl_rollout_degenerate_ratio", lambda v, t: 0.6, degenerate_end - 30 * MIN, **repetitive)

    # (alert) -> (silent at, firing at)
    mine = [alert for alert, where in WHAT_IF.items() if Path(__file__).name in where]  # promreplay.WHAT_IF
    times = {alert: (fail - MIN, end - 5 * MIN) for alert in mine}
    assert len(times) == 8, times
    times["VerlGradNormSpike"] = (fail - MIN, fail + 3 * MIN)
    times["VerlWeightSyncGrowing"] = (slow_fail - MIN, end - 5 * MIN)
    times["VerlRolloutLongTail"] = (tail_end - 31 * MIN, tail_end - 5 * MIN)
    # as it happened on the tail runs (test_rollout_tail_e2e.py); here on a healthy run's series
    times["VerlRolloutDegenerateResponses"] = (degenerate_end - 31 * MIN, degenerate_end - 5 * MIN)
    got = replay.alerts(tmp_path, [(a, t) for a in times for t in times[a]])
    run_id = {s.labels["verl_run_id"] for s in replay.find("verl_training_step")}.pop()
    for alert, (silent, firing) in times.items():
        assert not got[(alert, silent)], (alert, got[(alert, silent)])
        fired = got[(alert, firing)]
        assert fired and {a["verl_run_id"] for a in fired} == {run_id}, (alert, fired)
    assert {a["severity"] for a in got[("VerlKLDivergenceHigh", times["VerlKLDivergenceHigh"][1])]} == {
        "warning",
        "critical",
    }
    spikes = got[("VerlGradNormSpike", times["VerlGradNormSpike"][1])]
    assert {a["metric"] for a in spikes} == {"verl_actor_grad_norm", "verl_critic_grad_norm"}
