"""The stall decision in the TaskRunner (``otel_verl.stall.watchdog``), on a fake clock and board."""

from __future__ import annotations

import pytest

from otel_verl import config, semconv
from otel_verl import job_board as board
from otel_verl.stall import watchdog


@pytest.fixture
def published(monkeypatch):
    docs = []
    monkeypatch.setattr(board, "publish", lambda run_id, doc: docs.append((run_id, doc)) or True)
    monkeypatch.setattr(watchdog, "STEP_CLOCK", watchdog.StepClock())
    return docs


def _limit(monkeypatch, raw):
    monkeypatch.setenv(config.STALL_AFTER, raw)
    config.settings.cache_clear()


def test_the_limit_auto_fixed_or_off(monkeypatch, published):
    _limit(monkeypatch, "auto")
    assert watchdog.limit_s() == watchdog.FLOOR_S  # no step yet: the floor
    for d in (100.0, 120.0, 90.0):
        watchdog.STEP_CLOCK.durations.append(d)
    assert watchdog.limit_s() == 1000.0  # 10x the median step, above the floor
    _limit(monkeypatch, "42")
    assert watchdog.limit_s() == 42.0
    _limit(monkeypatch, "off")
    assert watchdog.limit_s() is None


def test_stalled_then_repeated_at_a_bounded_rate_then_resumed(logged, monkeypatch, published, capsys):
    _limit(monkeypatch, "10")
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-s")
    config.settings.cache_clear()
    clock, wd = watchdog.STEP_CLOCK, watchdog.Watchdog()
    clock.step_started(7, None)
    t0 = clock.started
    assert wd.check(now=t0 + 5) is None
    assert wd.check(now=t0 + 11) == "stalled"
    assert wd.check(now=t0 + 12) is None  # published just now: not again yet
    assert wd.check(now=t0 + 22) == "repeated"
    states = [doc for _, doc in published]
    assert [(d["state"], d["episode"], d["seq"], d["step"]) for d in states] == [
        ("stalled", 1, 1, 7),
        ("stalled", 1, 2, 7),
    ]
    clock.step_ended()  # the step finishes after all
    assert wd.check() == "resumed"
    assert published[-1][1]["state"] == "resumed"
    out = capsys.readouterr().out
    assert "no training step has finished for 11 s (limit 10 s, step 7 in progress)" in out
    assert "training resumed: step 7 finished" in out
    events = [r.event_name for r in logged.records()]
    assert events == [semconv.EVENT_TRAINING_STALLED, semconv.EVENT_TRAINING_RESUMED]
    assert [r.attributes[semconv.ATTR_EVENT_NAME] for r in logged.records()] == events  # Loki keeps attributes
    # a second stall is a new episode
    clock.step_started(8, None)
    assert wd.check(now=clock.started + 11) == "stalled"
    assert published[-1][1]["episode"] == 2


def test_off_never_starts_a_thread(monkeypatch, published):
    _limit(monkeypatch, "0")
    wd = watchdog.Watchdog()
    wd.start()
    assert wd._thread is None  # noqa: SLF001


def test_a_restart_never_leaves_two_watchdogs_running(monkeypatch):
    """stop() then start() while the first thread is busy in a check: the first one must end."""
    import threading

    _limit(monkeypatch, "60")
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-w")
    config.settings.cache_clear()
    monkeypatch.setattr(watchdog.Watchdog, "_interval", staticmethod(lambda: 0.01))
    in_check, release = threading.Event(), threading.Event()
    checks: list[str] = []

    def check(self, now=None):
        checks.append(threading.current_thread().name)
        if len(checks) == 1:
            in_check.set()
            release.wait(30)  # the first thread is in its check while the restart happens

    monkeypatch.setattr(watchdog.Watchdog, "check", check)
    wd = watchdog.Watchdog()
    wd.start()
    first = wd._thread
    assert in_check.wait(30)
    wd.stop()
    wd.start()
    second = wd._thread
    assert second is not first
    release.set()
    first.join(30)
    assert not first.is_alive()  # the restart's event never reached the old thread
    wd.stop()
    second.join(30)
    assert not second.is_alive()


def test_a_long_validation_is_no_stall_but_one_that_hangs_is(logged, monkeypatch, published, capsys):
    """Validation runs inside a step and may take far longer than a training step: it counts as
    progress for as long as a validation usually takes (the first one: the limit itself), and only
    its time beyond that counts towards the limit."""
    _limit(monkeypatch, "10")
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-v")
    config.settings.cache_clear()
    clock, wd = watchdog.STEP_CLOCK, watchdog.Watchdog()
    t0 = 1000.0
    clock.last_end = t0  # fit started
    clock.stage_started(watchdog.VALIDATION, now=t0)  # the validation before training: 15 s
    assert wd.check(now=t0 + 15) is None  # 15 s > the limit, but 10 of them are a validation's due
    clock.stage_ended(watchdog.VALIDATION, now=t0 + 15)
    assert wd.check(now=t0 + 19) is None  # 9 s counted
    clock.step_started(1, None)
    clock.step_ended(now=t0 + 20)
    # step 1's validation: verl runs it after the step's span ended, before it logs step 1
    clock.stage_started(watchdog.VALIDATION, now=t0 + 20)  # the next one: usually 15 s now
    assert wd.check(now=t0 + 44) is None  # 24 s running, 9 of them counted
    assert wd.check(now=t0 + 46) == "stalled"  # 26 s: 11 s beyond its usual 15
    out = capsys.readouterr().out
    assert "(limit 10 s, step 1 in progress) in its validation, running for 26 s (usually 15 s)" in out
    (record,) = logged.records()
    assert record.attributes[semconv.ATTR_STAGE] == watchdog.VALIDATION


def test_a_checkpoint_save_has_a_norm_of_its_own(monkeypatch, published):
    _limit(monkeypatch, "10")
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "run-c")
    config.settings.cache_clear()
    clock, wd = watchdog.STEP_CLOCK, watchdog.Watchdog()
    clock.step_started(1, None)
    t0 = clock.started
    clock.stage_started(watchdog.VALIDATION, now=t0)
    clock.stage_ended(watchdog.VALIDATION, now=t0 + 100)  # validations take 100 s here
    clock.step_ended(now=t0 + 101)
    clock.step_started(2, None)
    clock.stage_started(watchdog.CHECKPOINT, now=t0 + 101)  # never saved before: its due is the limit
    assert wd.check(now=t0 + 111) is None
    assert wd.check(now=t0 + 122) == "stalled"  # validation's 100 s are not a checkpoint's norm
