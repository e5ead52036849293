"""Where a step's time went (``otel_verl.hooks.accounting``), from verl's real timers: the
categories partition the step, ``verl.wait`` moves its seconds from its stage to ``waiting``."""

from __future__ import annotations

import time

import pytest

from otel_verl import semconv
from otel_verl.hooks import accounting, waits


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
    assert seconds[accounting.WAITING] == pytest.approx(0.05, abs=0.015)
    assert seconds[accounting.ROLLOUT] == pytest.approx(0.01, abs=0.01)
    assert seconds[accounting.TRAINING] == pytest.approx(0.02, abs=0.01)
    assert seconds[accounting.WEIGHT_SYNC] == pytest.approx(0.005, abs=0.005)
    assert seconds[accounting.OTHER] == pytest.approx(0.01, abs=0.01)
    assert seconds[accounting.DRIVER] < 0.005

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
