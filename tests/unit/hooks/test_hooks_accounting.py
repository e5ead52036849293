"""Where a step's time went (``otel_verl.hooks.accounting``), from verl's real timers: the
categories partition the step, ``verl.wait`` moves its seconds from its stage to ``waiting``."""

from __future__ import annotations

import time

import pytest

from otel_verl import semconv
from otel_verl.hooks import accounting, waits

SLACK = 0.04  # s a short sleep may overrun on a shared 2-core machine


def _sleep_sample(*args, **kwargs):
    time.sleep(0.05)
    return "batch", {}


def test_categories_add_up_to_the_step_and_the_wait_is_waiting(captured, v0_trainer):
    from verl.utils.profiler import marked_timer
    from verl.utils.tracking import Tracking

    timing: dict[str, float] = {}
    with marked_timer("step", timing):
        with marked_timer("gen", timing):
            waits.sample_wrapper(_sleep_sample, object(), (3, "train", 4), {})
            time.sleep(0.01)
        with marked_timer("update_actor", timing):
            with marked_timer("nested", timing):  # not a top-level stage: inside update_actor's time
                time.sleep(0.02)
        with marked_timer("update_weights", timing):
            time.sleep(0.005)
        with marked_timer("adv", timing):
            pass
        time.sleep(0.01)  # between stages
    Tracking(project_name="p", experiment_name="e", default_backend=[]).log(data={"x": 1.0}, step=3)

    (step,) = [s for s in captured.finished() if s.name == semconv.SPAN_STEP]
    seconds = {c: step.attributes[semconv.ATTR_TIME_PREFIX + c] for c in accounting.CATEGORIES}
    step_s = (step.end_time - step.start_time) / 1e9
    assert sum(seconds.values()) == pytest.approx(step_s, abs=0.002)
    # A sleep never ends early but may end late on a loaded machine: exact lower bounds, loose upper ones.
    assert 0.05 <= seconds[accounting.WAITING] < 0.05 + SLACK
    assert 0.01 <= seconds[accounting.ROLLOUT] < 0.01 + SLACK
    assert 0.02 <= seconds[accounting.TRAINING] < 0.02 + SLACK
    assert 0.005 <= seconds[accounting.WEIGHT_SYNC] < 0.005 + SLACK
    assert 0.01 <= seconds[accounting.OTHER] < 0.01 + SLACK
    assert seconds[accounting.DRIVER] < SLACK

    points = captured.metric_points()
    by_category = {dict(p.attributes)[semconv.ATTR_TIME_CATEGORY]: p.value for p in points[semconv.M_STEP_TIME]}
    assert by_category == pytest.approx(seconds, abs=1e-5)
    (idle,) = points[semconv.M_TRAINER_IDLE_RATIO]
    assert idle.value == pytest.approx(seconds[accounting.WAITING] / sum(seconds.values()), rel=1e-3)


def test_a_stage_outside_a_step_is_not_counted():
    account = accounting.StepAccount()
    account.stage_started(7, parent_id=1)
    account.stage_ended(7, "gen")
    assert account.step_ended(1) is None
    account.step_started(1)
    account.stage_started(8, parent_id=99)  # nested in another stage
    account.stage_ended(8, "gen")
    seconds = account.step_ended(1)
    assert seconds is not None and seconds[accounting.ROLLOUT] == 0.0


def test_pool_time_partitions_the_step_for_each_role(captured, v0_trainer):
    """``verl.pool.time``: busy (the role's stages), waiting (the trainer roles' verl.wait),
    idle; the three add up to the step for every role; ``verl.rollout.idle_ratio`` = idle / step."""
    from verl.utils.profiler import marked_timer
    from verl.utils.tracking import Tracking

    timing: dict[str, float] = {}
    with marked_timer("step", timing):
        with marked_timer("gen", timing):
            waits.sample_wrapper(_sleep_sample, object(), (3, "train", 4), {})
        with marked_timer("ref", timing):
            time.sleep(0.02)
        with marked_timer("update_actor", timing):
            time.sleep(0.03)
        with marked_timer("update_weights", timing):
            time.sleep(0.01)
        time.sleep(0.02)
    Tracking(project_name="p", experiment_name="e", default_backend=[]).log(data={"x": 1.0}, step=3)

    (step,) = [s for s in captured.finished() if s.name == semconv.SPAN_STEP]
    step_s = (step.end_time - step.start_time) / 1e9
    points = captured.metric_points()
    pools = {
        (dict(p.attributes)[semconv.ATTR_POOL_ROLE], dict(p.attributes)[semconv.ATTR_POOL_STATE]): p.value
        for p in points[semconv.M_POOL_TIME]
    }
    roles = {role for role, _ in pools}
    assert roles == {accounting.POOL_ACTOR, accounting.POOL_ROLLOUT, accounting.POOL_REF}  # no critic/reward stage
    for role in roles:
        assert sum(pools[(role, s)] for s in accounting.POOL_STATES) == pytest.approx(step_s, abs=0.002)
        assert pools[(role, accounting.BUSY)] == pytest.approx(
            step.attributes[f"{semconv.ATTR_POOL_PREFIX}{role}.{accounting.BUSY}"], abs=1e-5
        )
    assert 0.06 <= pools[(accounting.POOL_ROLLOUT, accounting.BUSY)] < 0.06 + SLACK  # gen + weights
    assert pools[(accounting.POOL_ROLLOUT, accounting.POOL_WAITING)] == 0.0
    assert 0.04 <= pools[(accounting.POOL_ACTOR, accounting.BUSY)] < 0.04 + SLACK  # update + weights
    assert 0.05 <= pools[(accounting.POOL_ACTOR, accounting.POOL_WAITING)] < 0.05 + SLACK
    assert (
        pools[(accounting.POOL_REF, accounting.POOL_WAITING)] == pools[(accounting.POOL_ACTOR, accounting.POOL_WAITING)]
    )
    assert 0.02 <= pools[(accounting.POOL_REF, accounting.BUSY)] < 0.02 + SLACK
    (idle,) = points[semconv.M_ROLLOUT_IDLE_RATIO]
    assert idle.value == pytest.approx(pools[(accounting.POOL_ROLLOUT, accounting.IDLE)] / step_s, rel=0.01)


def test_pool_seconds_never_exceed_the_step():
    pools = accounting.pool_seconds({"gen": 2.0, "update_actor": 1.0}, waiting=1.5, total=2.5)
    assert pools[("rollout", "busy")] == 2.0 and pools[("rollout", "idle")] == pytest.approx(0.5)
    assert pools[("actor", "busy")] == 1.0 and pools[("actor", "waiting")] == 1.5
    assert pools[("actor", "idle")] == 0.0
    assert accounting.rollout_idle_ratio(pools) == pytest.approx(0.2)


def test_every_method_of_the_step_account_holds_its_lock():
    """Every read and write of the open step's state happens under the account's one lock."""
    import threading

    state = {"_step_id", "_step_start", "_open", "_seconds", "_waiting_in_stage", "_stages", "_roles"}
    outside: list[str] = []

    class Lock:
        def __init__(self) -> None:
            self.inner, self.held = threading.Lock(), False

        def __enter__(self):
            self.inner.acquire()
            self.held = True

        def __exit__(self, *exc):
            self.held = False
            self.inner.release()

    class Checked(accounting.StepAccount):
        def __getattribute__(self, name):
            if name in state and not object.__getattribute__(self, "_lock").held:
                outside.append(name)
            return object.__getattribute__(self, name)

    account = Checked.__new__(Checked)
    object.__setattr__(account, "_lock", Lock())
    with account._lock:
        accounting.StepAccount.__init__(account)
    object.__setattr__(account, "_lock", Lock())
    account.step_started(1)
    account.stage_started(2, 1)
    account.wait_ended(0.01)
    account.stage_ended(2, "gen")
    account.stage_ended(99, "gen")  # not open
    account.step_ended(1)
    assert outside == []
