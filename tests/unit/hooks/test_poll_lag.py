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


class _Balancer:
    """verl's load balancer actor as ``LLMServerClient._acquire_server`` calls it (``.remote``)."""

    def __init__(self, servers: list[str]) -> None:
        self.servers = servers

        async def fields():
            return []

        async def acquire(request_id):
            return self.servers.pop(0), object()

        self.require_acquire_fields = SimpleNamespace(remote=fields)
        self.require_release_fields = SimpleNamespace(remote=fields)
        self.acquire_server = SimpleNamespace(remote=acquire)


def _client(servers: list[str]):
    from verl.workers.rollout.llm_server import LLMServerClient

    client = LLMServerClient.__new__(LLMServerClient)  # verl's real _acquire_server, its balancer a stand-in
    client._lb_require_acquire_fields = None
    client._load_balancer = _Balancer(servers)
    return client


def _acquire(client, request_id: str):
    from otel_verl.hooks.rollout import llm

    return llm.acquire_server_wrapper(client._acquire_server, client, (request_id,), {})


class _Puts(Queue):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.puts: list[tuple[str, dict]] = []
        self.fail = fail

    async def async_kv_put(self, key, partition_id, fields=None, tag=None, data_parser=None):
        self.puts.append((key, dict(tag or {})))
        if self.fail and poll_lag.REPLICA in (tag or {}):
            raise ConnectionError("TransferQueue is gone")
        await super().async_kv_put(key, partition_id, fields, tag, data_parser)


async def _run_prompt(queue: Queue, client, uid: str, sessions: int) -> list:
    """``AgentLoopWorkerTQ._run_prompt``'s shape: the running status, the sessions as tasks (each one
    LLM call), the terminal status once all settled; the TransferQueue put through the stamp hook."""

    async def put(**kwargs):
        return await poll_lag.stamp_wrapper(queue.async_kv_put, None, (), kwargs)

    await put(key=uid, partition_id="train", tag={"status": "running"})
    tasks = [asyncio.create_task(_acquire(client, f"{uid}-{i}")) for i in range(sessions)]
    got = await asyncio.gather(*tasks)
    await put(key=uid, partition_id="train", tag={"status": "finished"})
    return got


def test_a_groups_status_names_the_replica_its_first_llm_call_went_to(clock):
    """Two groups of two sessions each: each group's status gets the server its first call was
    handed, in one more put per group, before its terminal status; verl's calls get their servers."""
    queue = _Puts()
    client = _client(["10.0.0.4:8000", "10.0.0.5:8000", "10.0.0.5:8000", "10.0.0.4:8000"])

    async def main():
        return await asyncio.gather(_run_prompt(queue, client, "a", 2), _run_prompt(queue, client, "b", 2))

    got = asyncio.run(main())
    assert [[server for server, _ in g] for g in got] == [
        ["10.0.0.4:8000", "10.0.0.5:8000"],
        ["10.0.0.5:8000", "10.0.0.4:8000"],
    ]
    assert queue.tags["a"][poll_lag.REPLICA] == "10.0.0.4:8000" and queue.tags["b"][poll_lag.REPLICA] == "10.0.0.5:8000"
    for uid in "ab":
        puts = [set(tag) for key, tag in queue.puts if key == uid]
        assert puts == [{"status", poll_lag.STARTED_AT}, {poll_lag.REPLICA}, {"status", poll_lag.DONE_AT}], puts
        assert queue.tags[uid]["status"] == "finished"


def test_a_call_outside_a_v1_group_puts_nothing_and_a_failed_put_is_only_said(clock, caplog):
    queue = _Puts(fail=True)
    client = _client(["s0", "s1", "s2"])
    server, _ = asyncio.run(_acquire(client, "v0-request"))  # v0's agent loop: no running status before
    assert server == "s0" and queue.puts == []
    ((second, _),) = asyncio.run(_run_prompt(queue, client, "c", 1))
    assert second == "s1" and queue.tags["c"]["status"] == "finished"  # the call and the group went on
    assert poll_lag.REPLICA not in queue.tags["c"] and "TransferQueue is gone" in caplog.text
