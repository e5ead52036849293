"""Where a step's time went (``otel_verl.hooks.accounting``), from verl's real timers: the
categories partition the step, ``verl.wait`` moves its seconds from its stage to ``waiting``.

The account's clock (``accounting.clock``) is a fake one that moves only when a test says
(``FakeClock.sleep``), so every duration is exact whatever the machine's load; the whole seconds
used are exact binary fractions, so the sums are too."""

from __future__ import annotations

import pytest
from support.clock import FakeClock

from otel_verl import semconv
from otel_verl.hooks import accounting, waits


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(accounting, "clock", fake)
    return fake


def _sampling(clock: FakeClock, seconds: float):
    """ReplayBuffer.sample's stand-in: waits ``seconds`` for rollouts."""

    def sample(*args, **kwargs):
        clock.sleep(seconds)
        return "batch", {}

    return sample


def test_categories_add_up_to_the_step_and_the_wait_is_waiting(captured, v0_trainer, clock):
    from verl.utils.profiler import marked_timer
    from verl.utils.tracking import Tracking

    timing: dict[str, float] = {}
    with marked_timer("step", timing):
        with marked_timer("gen", timing):
            waits.sample_wrapper(_sampling(clock, 5.0), object(), (3, "train", 4), {})
            clock.sleep(1.0)
        with marked_timer("update_actor", timing):
            with marked_timer("nested", timing):  # not a top-level stage: inside update_actor's time
                clock.sleep(2.0)
        with marked_timer("update_weights", timing):
            clock.sleep(0.5)
        with marked_timer("adv", timing):
            pass
        clock.sleep(1.0)  # between stages
    Tracking(project_name="p", experiment_name="e", default_backend=[]).log(data={"x": 1.0}, step=3)

    (step,) = [s for s in captured.finished() if s.name == semconv.SPAN_STEP]
    seconds = {c: step.attributes[semconv.ATTR_TIME_PREFIX + c] for c in accounting.CATEGORIES}
    assert seconds == {
        accounting.ROLLOUT: 1.0,  # gen less the wait inside it
        accounting.WAITING: 5.0,
        accounting.POLL_LAG: 0.0,  # no rollout told when it was done
        accounting.TRAINING: 2.0,
        accounting.WEIGHT_SYNC: 0.5,
        accounting.CHECKPOINT: 0.0,
        accounting.VALIDATION: 0.0,
        accounting.DRIVER: 0.0,  # adv took no time
        accounting.OTHER: 1.0,  # between stages
    }
    assert sum(seconds.values()) == 9.5  # the step, exactly

    points = captured.metric_points()
    by_category = {dict(p.attributes)[semconv.ATTR_TIME_CATEGORY]: p.value for p in points[semconv.M_STEP_TIME]}
    assert by_category == seconds
    (idle,) = points[semconv.M_TRAINER_IDLE_RATIO]
    assert idle.value == 5.0 / 9.5


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


def test_pool_time_partitions_the_step_for_each_role(captured, v0_trainer, clock):
    """``verl.pool.time``: busy (the role's stages), waiting (the trainer roles' verl.wait),
    idle; the three add up to the step for every role; ``verl.rollout.idle_ratio`` = idle / step."""
    from verl.utils.profiler import marked_timer
    from verl.utils.tracking import Tracking

    timing: dict[str, float] = {}
    with marked_timer("step", timing):
        with marked_timer("gen", timing):
            waits.sample_wrapper(_sampling(clock, 5.0), object(), (3, "train", 4), {})
        with marked_timer("ref", timing):
            clock.sleep(2.0)
        with marked_timer("update_actor", timing):
            clock.sleep(3.0)
        with marked_timer("update_weights", timing):
            clock.sleep(1.0)
        clock.sleep(2.0)
    Tracking(project_name="p", experiment_name="e", default_backend=[]).log(data={"x": 1.0}, step=3)

    (step,) = [s for s in captured.finished() if s.name == semconv.SPAN_STEP]
    points = captured.metric_points()
    pools = {
        (dict(p.attributes)[semconv.ATTR_POOL_ROLE], dict(p.attributes)[semconv.ATTR_POOL_STATE]): p.value
        for p in points[semconv.M_POOL_TIME]
    }
    step_s = 13.0  # gen 5 (all of it the wait), ref 2, update_actor 3, update_weights 1, between stages 2
    busy, waiting, idle = accounting.BUSY, accounting.POOL_WAITING, accounting.IDLE
    assert pools == {  # no critic or reward stage ran: no such roles
        (accounting.POOL_ROLLOUT, busy): 6.0,  # gen + weights
        (accounting.POOL_ROLLOUT, waiting): 0.0,  # the wait is the rollout role's busy time
        (accounting.POOL_ROLLOUT, idle): 7.0,
        (accounting.POOL_ACTOR, busy): 4.0,  # update + weights
        (accounting.POOL_ACTOR, waiting): 5.0,  # the trainer waiting for rollouts
        (accounting.POOL_ACTOR, idle): 4.0,
        (accounting.POOL_REF, busy): 2.0,
        (accounting.POOL_REF, waiting): 5.0,
        (accounting.POOL_REF, idle): 6.0,
    }
    for role in {role for role, _ in pools}:
        assert sum(pools[(role, s)] for s in accounting.POOL_STATES) == step_s
        assert step.attributes[f"{semconv.ATTR_POOL_PREFIX}{role}.{busy}"] == pools[(role, busy)]
    (ratio,) = points[semconv.M_ROLLOUT_IDLE_RATIO]
    assert ratio.value == 7.0 / step_s


def test_pool_seconds_never_exceed_the_step():
    pools = accounting.pool_seconds({"gen": 2.0, "update_actor": 1.0}, waiting=1.5, total=2.5)
    assert pools[("rollout", "busy")] == 2.0 and pools[("rollout", "idle")] == pytest.approx(0.5)
    assert pools[("actor", "busy")] == 1.0 and pools[("actor", "waiting")] == 1.5
    assert pools[("actor", "idle")] == 0.0
    assert accounting.rollout_idle_ratio(pools) == pytest.approx(0.2)


def test_every_method_of_the_step_account_holds_its_lock():
    """Every read and write of the open step's state happens under the account's one lock."""
    import threading

    state = {
        "_step_id",
        "_step_start",
        "_open",
        "_last_stage_end",
        "_waits",
        "_seconds",
        "_waiting_in_stage",
        "_stages",
        "_roles",
    }
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
    account.wait_ended(0.01, account.wait_started())
    account.stage_ended(2, "gen")
    account.wait_ended(0.01)  # between stages
    account.stage_ended(99, "gen")  # not open
    account.step_ended(1)
    assert outside == []


def test_each_instrumented_process_starts_with_a_fresh_account(request, clock):
    """A role an earlier process's stages showed (a reward stage over 1 ms) is not this one's:
    ``captured`` is a new process, its account knows only the roles every run has."""
    from verl.utils.profiler import marked_timer

    account = accounting.ACCOUNT
    account.step_started(1)
    account.stage_started(2, 1)
    clock.sleep(0.5)
    account.stage_ended(2, "reward")
    account.step_ended(1)
    assert accounting.POOL_REWARD in {role for role, _ in account.last_pools}
    captured = request.getfixturevalue("captured")
    request.getfixturevalue("v0_trainer")
    timing: dict[str, float] = {}
    with marked_timer("step", timing):
        with marked_timer("update_actor", timing):
            clock.sleep(1.0)
    points = captured.metric_points()[semconv.M_POOL_TIME]
    assert {dict(p.attributes)[semconv.ATTR_POOL_ROLE] for p in points} == set(accounting.ALWAYS_ROLES)
