"""Goodput by role (``otel_verl.instruments.goodput``): each step's seconds per role in productive /
overhead / idle / wasted, from the step's categories and verl's own counts of what it dropped.

The account's clock is a fake one (``FakeClock``) and the seconds exact binary fractions, so the
sums are exact whatever the machine's load."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from support.clock import FakeClock

from otel_verl import semconv
from otel_verl.hooks import accounting
from otel_verl.instruments import Instruments, goodput

ROLE, BUCKET = semconv.ATTR_GOODPUT_ROLE, semconv.ATTR_GOODPUT_BUCKET


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(accounting, "clock", fake)
    return fake


def _goodput(points) -> dict[tuple[str, str], float]:
    return {(p.attributes[ROLE], p.attributes[BUCKET]): p.value for p in points[semconv.M_GOODPUT_TIME]}


def test_each_role_s_buckets_partition_the_step():
    seconds = {
        accounting.ROLLOUT: 1.0,
        accounting.WAITING: 4.0,
        accounting.POLL_LAG: 0.5,
        accounting.TRAINING: 2.0,
        accounting.WEIGHT_SYNC: 0.25,
        accounting.CHECKPOINT: 0.125,
        accounting.VALIDATION: 0.75,
        accounting.DRIVER: 0.0625,
        accounting.OTHER: 0.03125,
    }
    out = goodput.step_goodput(seconds, 0.25)
    step = sum(seconds.values())
    for role in goodput.ROLES:
        assert sum(out[(role, b)] for b in goodput.BUCKETS) == step
    assert out[("trainer", "productive")] == 2.0
    assert out[("trainer", "overhead")] == 0.25 + 0.125 + 0.75 + 0.0625 + 0.03125
    assert out[("trainer", "idle")] == 1.0 + 4.0 + 0.5  # waiting for rollouts, the v1 poll lag too
    assert out[("trainer", "wasted")] == 0.0
    # the rollout role's generation (rollout + waiting) split by the wasted share
    assert out[("rollout", "wasted")] == 5.0 * 0.25
    assert out[("rollout", "productive")] == 5.0 * 0.75
    assert out[("rollout", "overhead")] == 0.25 + 0.75  # weight sync, validation
    assert out[("rollout", "idle")] == 0.5 + 2.0 + 0.125 + 0.0625 + 0.03125  # waiting for the trainer


def test_an_unknown_category_is_trainer_overhead_and_rollout_idle():
    out = goodput.step_goodput({"new_stage_kind": 2.0, accounting.TRAINING: float("nan")}, float("inf"))
    assert out[("trainer", "overhead")] == 2.0 and out[("rollout", "idle")] == 2.0
    assert sum(out.values()) == 4.0  # NaN counted as nothing, an infinite share as none


@pytest.mark.parametrize(
    ("data", "batch", "dropped", "share"),
    [
        ({}, 8, 0.0, 0.0),
        # DAPO: 8 groups filtered out, 8 trained on: half the generation made rollouts not trained on
        ({"training/filter_groups/evicted_samples": 8}, 8, 8.0, 0.5),
        (
            {
                "training/filter_groups/evicted_samples": 2,
                "training/filter_groups/discarded_surplus_samples": 1,
                "training/off_policy/evicted_samples": 0,
                "training/rollout_failure/evicted_samples": 1,
                semconv.ABORTED_RATIO_KEY: 0.25,
            },
            4,
            4.0,
            (4 + 0.25 * 4) / (4 + 4),
        ),
        ({semconv.ABORTED_RATIO_KEY: 0.5}, None, 0.0, 0.5),  # aborted samples alone need no batch size
        ({"training/filter_groups/evicted_samples": 3}, None, 3.0, 0.0),  # cannot weigh: not claimed
        ({"training/filter_groups/evicted_samples": float("nan"), semconv.ABORTED_RATIO_KEY: "x"}, 4, 0.0, 0.0),
    ],
)
def test_the_wasted_share_from_verls_own_counts(data, batch, dropped, share):
    assert goodput.step_waste(data, batch) == (dropped, pytest.approx(share))


def test_the_step_s_goodput_waits_for_verls_values_of_the_step():
    """Recorded when verl logs the step's values (after its span ended), with its drops; a step
    verl logged nothing after is recorded at the next step's end, with none."""
    reader = InMemoryMetricReader()
    training = Instruments(MeterProvider(metric_readers=[reader]).get_meter("t")).training

    def points():
        data = reader.get_metrics_data()
        metrics = [m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]
        return {m.name: m.data.data_points for m in metrics}

    training.record_log({"val-core/x/acc/mean@1": 1.0})  # validation before training: no step pending
    assert semconv.M_GOODPUT_TIME not in points()
    training.record_step_end(1, seconds={accounting.WAITING: 3.0, accounting.TRAINING: 1.0}, batch_groups=4)
    assert semconv.M_GOODPUT_TIME not in points()  # not before verl's values of the step
    training.record_log({"training/filter_groups/evicted_samples": 4, "actor/pg_loss": 0.1})
    got = points()
    assert _goodput(got)[("rollout", "wasted")] == 1.5  # 3 s of generation, half of it dropped
    assert _goodput(got)[("rollout", "productive")] == 1.5
    assert _goodput(got)[("trainer", "idle")] == 3.0
    assert got[semconv.M_GOODPUT_DROPPED_GROUPS][0].value == 4
    training.record_log({"other": 1.0})  # a second log of the step: counted once
    assert sum(_goodput(points()).values()) == 8.0
    training.record_step_end(2, seconds={accounting.TRAINING: 2.0}, batch_groups=4)
    training.record_step_end(3, seconds={accounting.TRAINING: 1.0}, batch_groups=4)  # step 2 had no log
    got = _goodput(points())
    assert got[("trainer", "productive")] == 3.0 and sum(got.values()) == 12.0


def test_through_verls_timers_and_tracking_log(captured, v0_trainer, clock):
    """The hooks: the step's categories (``accounting``) and the batch size from the trainer's
    config go with the step's end; verl's ``Tracking.log`` of the step brings its drops."""
    from omegaconf import OmegaConf
    from verl.utils.profiler import marked_timer
    from verl.utils.tracking import Tracking

    v0_trainer.config = OmegaConf.create({"data": {"train_batch_size": 4}})
    timing: dict[str, float] = {}
    with marked_timer("step", timing):
        with marked_timer("gen", timing):
            clock.sleep(4.0)
        with marked_timer("update_actor", timing):
            clock.sleep(2.0)
        with marked_timer("update_weights", timing):
            clock.sleep(0.5)
    Tracking(project_name="p", experiment_name="e", default_backend=[]).log(
        data={"training/filter_groups/evicted_samples": 4, semconv.ABORTED_RATIO_KEY: 0.0}, step=3
    )
    got = _goodput(captured.metric_points())
    assert got == {
        ("trainer", "productive"): 2.0,
        ("trainer", "overhead"): 0.5,
        ("trainer", "idle"): 4.0,
        ("trainer", "wasted"): 0.0,
        ("rollout", "productive"): 2.0,
        ("rollout", "overhead"): 0.5,
        ("rollout", "idle"): 2.0,
        ("rollout", "wasted"): 2.0,
    }


def test_a_failing_account_costs_none_of_verls_values(monkeypatch):
    reader = InMemoryMetricReader()
    training = Instruments(MeterProvider(metric_readers=[reader]).get_meter("t")).training
    monkeypatch.setattr(goodput, "step_waste", lambda *a: 1 / 0)
    training.record_step_end(1, seconds={accounting.TRAINING: 1.0})
    assert training.record_log({"actor/pg_loss": 0.5}) == 1
    names = {m.name for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert "verl.actor.pg_loss" in names


def test_the_dropped_group_keys_are_the_counts_verl_adds_up_per_step():
    """verl's v1 sums exactly its eviction counts over a step's iterations (``MetricsAggregator``):
    the training ones are the keys the account reads, so a key verl renames fails here."""
    from verl.trainer.ppo.v1.utils import MetricsAggregator

    summed = MetricsAggregator()._init_aggregation_rules()["sum"]
    assert {k for k in summed if k.startswith("training/")} == set(semconv.DROPPED_GROUP_KEYS)
