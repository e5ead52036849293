"""Everything verl's real ``Tracking.log`` receives becomes an OTel instrument."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from otel_verl import semconv


@pytest.fixture
def tracking():
    from verl.utils.tracking import Tracking

    return Tracking(project_name="p", experiment_name="e", default_backend=["console"])


def test_name_rule():
    assert semconv.metric_name("actor/kl_loss") == "verl.actor.kl_loss"
    assert semconv.metric_name("val-core/gsm8k/reward/mean@4") == "verl.val-core.gsm8k.reward.mean_4"
    assert semconv.metric_name("timing_s/agent_loop/slowest/gen") == "verl.timing_s.agent_loop.slowest.gen"
    assert len(semconv.metric_name("x" * 400)) == 255


def test_values_equal_what_verl_logged(captured, tracking, capsys):
    data = {
        "actor/kl_loss": 0.012345678901234,
        "actor/ppo_kl": np.float32(0.25),
        "critic/score/mean": 0.75,
        "critic/rewards/mean": torch.tensor(0.5),
        "perf/throughput": 1234,
        "training/global_step": 7,
        "note": "text is skipped",
        "vector": [1, 2],
    }
    tracking.log(data=data, step=7)
    assert "step:7" in capsys.readouterr().out  # verl's own console backend still works

    points = captured.metric_points()
    assert points["verl.actor.kl_loss"][0].value == 0.012345678901234
    assert points["verl.actor.ppo_kl"][0].value == float(np.float32(0.25))
    assert points["verl.critic.rewards.mean"][0].value == 0.5
    assert "verl.training.global_step" not in points  # verl's step number: verl.training.step carries it
    assert "verl.note" not in points and "verl.vector" not in points
    kl = {p.attributes[semconv.ATTR_KL_SOURCE]: p.value for p in points[semconv.M_KL]}
    assert kl == {"kl_loss": 0.012345678901234, "ppo_kl": 0.25}
    reward = {p.attributes[semconv.ATTR_REWARD_SOURCE]: p.value for p in points[semconv.M_REWARD]}
    assert reward == {"score": 0.75, "rewards": 0.5}
    assert points[semconv.M_THROUGHPUT][0].value == 1234.0


def test_nan_and_inf_are_counted_never_zeroed(captured, tracking):
    tracking.log(data={"actor/grad_norm": 2.5, "actor/kl_loss": 0.1}, step=1)
    tracking.log(data={"actor/grad_norm": float("nan"), "actor/kl_loss": math.inf, "ok": 1.0}, step=2)
    points = captured.metric_points()
    # The SDK refuses non-finite values: the gauges keep the last finite value, not 0.
    assert points["verl.actor.grad_norm"][0].value == 2.5
    assert points[semconv.M_KL][0].value == 0.1
    assert points["verl.ok"][0].value == 1.0
    counted = {p.attributes[semconv.ATTR_METRIC_KEY]: p.value for p in points[semconv.M_NONFINITE]}
    assert counted == {"actor/grad_norm": 1, "actor/kl_loss": 1}


def test_forwarding_can_be_turned_off(captured, tracking, monkeypatch):
    from otel_verl.config import settings

    monkeypatch.setenv("OTEL_VERL_FORWARD_METRICS", "false")
    settings.cache_clear()
    try:
        tracking.log(data={"actor/kl_loss": 0.1, "actor/entropy": 2.0}, step=1)
    finally:
        monkeypatch.delenv("OTEL_VERL_FORWARD_METRICS")
        settings.cache_clear()
    points = captured.metric_points()
    assert "verl.actor.entropy" not in points
    assert points[semconv.M_KL][0].value == 0.1  # the named instruments stay


def test_a_failing_backend_error_passes_through(captured, tracking):
    class Broken:
        def log(self, data, step):
            raise OSError("disk full")

    tracking.logger["broken"] = Broken()
    with pytest.raises(OSError, match="disk full"):
        tracking.log(data={"a": 1.0}, step=1)


def test_only_verls_stage_timers_are_stages(captured, tracking):
    tracking.log(
        data={
            "timing_s/gen": 1.5,
            "timing_s/step": 2.0,
            "timing_s/agent_loop/generate_sequences/max": 0.7,  # a per-sample aggregate
            "timing_s/agent_loop/num_preempted/min": -1,  # a count, -1 = unknown: the SDK would refuse it
            "timing_s/agent_loop/slowest/prompt_length": 12,  # tokens
        },
        step=1,
    )
    points = captured.metric_points()
    stages = {p.attributes[semconv.ATTR_STAGE]: p.sum for p in points[semconv.M_STAGE_DURATION]}
    assert stages == {"gen": 1.5, "step": 2.0}
    # the others keep their generic gauges, with verl's values
    assert points["verl.timing_s.agent_loop.num_preempted.min"][0].value == -1
    assert points["verl.timing_s.agent_loop.slowest.prompt_length"][0].value == 12
    assert semconv.stage_of("timing_s/") is None and semconv.stage_of("actor/x") is None


def _verl_mismatch_metrics() -> dict:
    """What verl 0.9.1's own code logs for a batch whose rollout log-probs disagree with the trainer's:
    ``calculate_debug_metrics`` (training/rollout_probs_diff_*, the Pearson correlation) and the
    rollout-correction helper (rollout_corr/*), on the same tensors."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask
    from verl.utils.debug.metrics import calculate_debug_metrics

    g = torch.Generator().manual_seed(0)
    old = torch.log_softmax(torch.randn(4, 6, 16, generator=g), dim=-1)[..., 0]
    rollout = old + 0.3 * torch.randn(old.shape, generator=g)
    mask = torch.ones_like(old)
    batch = DataProto.from_dict(
        {
            "rollout_log_probs": rollout,
            "old_log_probs": old,
            "response_mask": mask,
            "responses": torch.zeros_like(old, dtype=torch.long),
        }
    )
    _, _, corr = compute_rollout_correction_and_rejection_mask(old, rollout, mask)
    return {**calculate_debug_metrics(batch), **corr}


def test_rollout_mismatch_and_staleness_get_named_instruments_with_verls_values(captured, tracking):
    logged = _verl_mismatch_metrics()
    staleness = {
        f"training/off_policy/trajectory_staleness{s}/{stat}": np.int64(v)
        for s, base in (("", 1), ("_worst", 3))
        for stat, v in (("mean", base), ("max", base + 1), ("min", base - 1))
    }
    tracking.log(data={**logged, **staleness, "actor/rollout_corr/k3_kl": 0.5}, step=3)
    points = captured.metric_points()

    diff = {p.attributes[semconv.ATTR_STAT]: p.value for p in points[semconv.M_ROLLOUT_PROBS_DIFF]}
    assert diff == {s: logged[f"training/rollout_probs_diff_{s}"] for s in ("mean", "max", "std")}
    (corr,) = points[semconv.M_ROLLOUT_PROBS_CORRELATION]
    assert corr.value == logged[semconv.PROBS_CORRELATION_KEY] and dict(corr.attributes) == {}
    assert 0 < corr.value < 0.99  # the disagreement shows
    mismatch = {p.attributes[semconv.ATTR_MISMATCH_MEASURE]: p.value for p in points[semconv.M_ROLLOUT_MISMATCH]}
    # the trainer's rollout_corr/* (decoupled mode) and the actor's (bypass mode) share the instrument: a run
    # logs one of the two; here the actor's k3_kl came last
    assert mismatch == {**{m: logged[f"rollout_corr/{m}"] for m in semconv.MISMATCH_MEASURES}, "k3_kl": 0.5}
    stale = {
        (p.attributes[semconv.ATTR_STALENESS_BOUND], p.attributes[semconv.ATTR_STAT]): p.value
        for p in points[semconv.M_OFF_POLICY_STALENESS]
    }
    assert stale == {
        ("lower", "mean"): 1,
        ("lower", "max"): 2,
        ("lower", "min"): 0,
        ("worst", "mean"): 3,
        ("worst", "max"): 4,
        ("worst", "min"): 2,
    }
    # and still every key under its generic name
    assert points["verl.training.rollout_actor_probs_pearson_corr"][0].value == corr.value
    assert points["verl.rollout_corr.chi2_seq"][0].value == logged["rollout_corr/chi2_seq"]
