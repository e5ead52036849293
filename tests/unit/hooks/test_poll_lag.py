"""The v1 poll lag (``otel_verl.hooks.poll_lag``), through verl's real ``ReplayBuffer.sample``: its
TransferQueue calls go to an in-memory stand-in, its poll sleeps advance a fake clock. The
rollouts are done 0.5 s into the wait; verl polls again only 2 s after its first look, so the
trainer waits 1.5 s more: the wait span, the step's time categories and the idle ratio say so."""

from __future__ import annotations

import asyncio
import copy
from types import SimpleNamespace

import pytest
from support.clock import FakeClock

from otel_verl import semconv
from otel_verl.hooks import accounting, poll_lag


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(accounting, "clock", fake)
    monkeypatch.setattr(poll_lag, "clock", fake)
    return fake


class Queue:
    """TransferQueue's tag store for one partition, with verl's agent-loop put through the stamp hook."""

    def __init__(self) -> None:
        self.tags: dict[str, dict] = {}

    async def async_kv_put(self, key, partition_id, fields=None, tag=None, data_parser=None):
        self.tags.setdefault(key, {}).update(tag or {})  # TransferQueue merges a tag into the key's

    def finish(self, uid: str) -> None:
        """What ``AgentLoopWorkerTQ._run_prompt`` does once the group's trajectories settled."""
        kwargs = {"key": uid, "partition_id": "train", "tag": {"status": "finished"}}
        asyncio.run(poll_lag.stamp_wrapper(self.async_kv_put, None, (), kwargs))

    def kv_list(self, partition_id=None):
        return {"train": copy.deepcopy(self.tags)}


def _replay_buffer(monkeypatch, queue: Queue, clock: FakeClock, on_sleep):
    from verl.trainer.ppo.v1 import replay_buffer as rb

    def kv_list(*args, **kwargs):
        return poll_lag.observe_wrapper(queue.kv_list, None, args, kwargs)

    monkeypatch.setattr(rb, "tq", SimpleNamespace(kv_list=kv_list, kv_clear=lambda **kw: None))
    monkeypatch.setattr(rb, "time", SimpleNamespace(sleep=on_sleep, time=lambda: clock.now))
    return rb.ReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
    )


def test_the_trainer_waits_a_poll_interval_after_the_rollouts_were_done(captured, v0_trainer, clock, monkeypatch):
    from verl.utils.profiler import marked_timer
    from verl.utils.tracking import Tracking

    queue = Queue()
    for uid in ("a", "b"):
        queue.tags[uid] = {"is_prompt": True, "global_steps": 3, "status": "running"}
        queue.tags[f"{uid}_0_0"] = {"status": "success", "global_steps": 3}

    def sleep(seconds):  # the rollouts finish half a second into verl's first poll sleep
        clock.now += 0.5
        for uid in ("a", "b"):
            queue.finish(uid)
        clock.now += seconds - 0.5

    buffer = _replay_buffer(monkeypatch, queue, clock, sleep)
    timing: dict[str, float] = {}
    with marked_timer("step", timing):
        with marked_timer("gen", timing):
            batch, _ = buffer.sample(3, "train", 2)
        with marked_timer("update_actor", timing):
            clock.now += 1.0
    Tracking(project_name="p", experiment_name="e", default_backend=[]).log(data={"x": 1.0}, step=3)

    assert sorted(batch.keys) == ["a_0_0", "b_0_0"]  # verl's own result, unchanged
    assert queue.tags["a"][poll_lag.DONE_AT] == 1000.5  # the group's done time, in its tags
    assert queue.tags["a"]["status"] == "finished" and queue.tags["a"]["is_prompt"] is True
    (wait,) = [s for s in captured.finished() if s.name == semconv.SPAN_WAIT]
    assert wait.attributes[semconv.ATTR_WAIT_POLL_LAG] == 1.5
    assert wait.attributes[semconv.ATTR_WAIT_POLL_INTERVAL] == 2.0
    (step,) = [s for s in captured.finished() if s.name == semconv.SPAN_STEP]
    seconds = {c: step.attributes[semconv.ATTR_TIME_PREFIX + c] for c in accounting.CATEGORIES}
    assert seconds[accounting.WAITING] == 0.5  # rollouts still generating
    assert seconds[accounting.POLL_LAG] == 1.5  # rollouts done, the replay buffer not polled yet
    assert seconds[accounting.TRAINING] == 1.0
    assert sum(seconds.values()) == 3.0
    points = captured.metric_points()
    by_category = {dict(p.attributes)[semconv.ATTR_TIME_CATEGORY]: p.value for p in points[semconv.M_STEP_TIME]}
    assert by_category[accounting.POLL_LAG] == 1.5
    (lag,) = points[semconv.M_TRAINER_POLL_LAG]
    assert lag.value == 1.5
    (idle,) = points[semconv.M_TRAINER_IDLE_RATIO]
    assert idle.value == 2.0 / 3.0  # the trainer's whole wait, its poll lag included


def test_without_done_times_the_whole_wait_is_waiting(captured, v0_trainer, clock, monkeypatch):
    """An agent-loop process without otel-verl leaves no done time: no poll lag is claimed."""
    queue = Queue()
    queue.tags["a"] = {"is_prompt": True, "global_steps": 3, "status": "running"}
    queue.tags["a_0_0"] = {"status": "success", "global_steps": 3}

    def sleep(seconds):
        queue.tags["a"]["status"] = "finished"  # written without the stamp hook
        clock.now += seconds

    from verl.utils.profiler import marked_timer
    from verl.utils.tracking import Tracking

    buffer = _replay_buffer(monkeypatch, queue, clock, sleep)
    timing: dict[str, float] = {}
    with marked_timer("step", timing), marked_timer("gen", timing):
        buffer.sample(3, "train", 1)
    Tracking(project_name="p", experiment_name="e", default_backend=[]).log(data={"x": 1.0}, step=3)
    (wait,) = [s for s in captured.finished() if s.name == semconv.SPAN_WAIT]
    assert semconv.ATTR_WAIT_POLL_LAG not in wait.attributes
    points = captured.metric_points()
    assert semconv.M_TRAINER_POLL_LAG not in points  # not measured: no series at all
    by_category = {dict(p.attributes)[semconv.ATTR_TIME_CATEGORY]: p.value for p in points[semconv.M_STEP_TIME]}
    assert by_category[accounting.WAITING] == 2.0 and by_category[accounting.POLL_LAG] == 0.0


def test_only_a_bare_status_update_is_stamped():
    seen = []

    def put(*args, **kwargs):
        seen.append(kwargs.get("tag"))

    own, running = {"status": "finished"}, {"status": "running"}
    for tag in ({"status": "pending"}, {"status": "finished", "x": 1}, None, own, running):
        poll_lag.stamp_wrapper(put, None, (), {"key": "k", "partition_id": "train", "tag": tag})
    poll_lag.stamp_wrapper(put, None, (), {"key": "k", "partition_id": "train", "fields": {"a": 1}, "tag": own})
    assert seen[:3] == [{"status": "pending"}, {"status": "finished", "x": 1}, None]
    assert set(seen[3]) == {"status", poll_lag.DONE_AT} and own == {"status": "finished"}  # verl's dict unchanged
    assert set(seen[4]) == {"status", poll_lag.STARTED_AT} and running == {"status": "running"}  # its start
    assert seen[5] is own  # a put with data is not a status update


def test_outside_a_sample_kv_list_is_only_passed_through():
    listing = {"train": {"a": {poll_lag.DONE_AT: 1.0}}}
    assert poll_lag.observe_wrapper(lambda: listing, None, (), {}) is listing
    assert poll_lag.end(("batch", {})) is None
