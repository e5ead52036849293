"""What the v1 wait waits for (``otel_verl.hooks.waiting_for``), on verl's real ``ReplayBuffer``:
its ``sample`` through an in-memory TransferQueue (as in ``test_poll_lag``), or an object made
with ``ReplayBuffer.__new__`` whose status sets are filled by hand and whose own
``_wait_for_next_poll`` (hooked) is called; a fake clock stands in for the poll sleeps."""

from __future__ import annotations

import asyncio
import copy
import logging
from types import SimpleNamespace

import pytest
from support.clock import FakeClock

from otel_verl import config, semconv
from otel_verl import job_board as board
from otel_verl.hooks import accounting, poll_lag, waiting_for, waits
from otel_verl.stall import watchdog


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    for module, name in ((accounting, "clock"), (poll_lag, "clock"), (waiting_for, "clock"), (waiting_for, "wall")):
        monkeypatch.setattr(module, name, fake)
    return fake


@pytest.fixture
def rb(monkeypatch: pytest.MonkeyPatch, clock: FakeClock):
    """verl's replay buffer module, its poll sleep advancing the fake clock."""
    from verl.trainer.ppo.v1 import replay_buffer as module

    def sleep(seconds):
        clock.now += seconds

    monkeypatch.setattr(module, "time", SimpleNamespace(sleep=sleep, time=lambda: clock.now))
    return module


class Queue:
    """TransferQueue's tag store for the train partition; verl's agent-loop puts go through the stamp hook."""

    def __init__(self) -> None:
        self.tags: dict[str, dict] = {}

    async def async_kv_put(self, key, partition_id, fields=None, tag=None, data_parser=None):
        self.tags.setdefault(key, {}).update(tag or {})

    def status(self, uid: str, status: str) -> None:
        """What ``AgentLoopWorkerTQ._run_prompt`` writes when a group starts, and when it settled."""
        kwargs = {"key": uid, "partition_id": "train", "tag": {"status": status}}

        async def put():  # inside a task, as verl's: the hook's context variable stays in it
            await poll_lag.stamp_wrapper(self.async_kv_put, None, (), kwargs)

        asyncio.run(put())

    def sampled(self, uid: str, step: int) -> None:
        """What the trainer puts for a prompt taken from the dataset, with one trajectory."""
        self.tags[uid] = {"is_prompt": True, "global_steps": step, "status": "pending"}
        self.tags[f"{uid}_0_0"] = {"status": "success", "global_steps": step}

    def kv_list(self, partition_id=None):
        return {"train": copy.deepcopy(self.tags)}


def _sampling_buffer(monkeypatch, rb, queue: Queue):
    def kv_list(*args, **kwargs):
        return poll_lag.observe_wrapper(queue.kv_list, None, args, kwargs)

    monkeypatch.setattr(rb, "tq", SimpleNamespace(kv_list=kv_list, kv_clear=lambda **kw: None))
    return rb.ReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
    )


def _filled_buffer(rb, running=(), pending=(), finished=(), steps=None):
    """verl's real class, made with ``__new__``, its status sets filled by hand."""
    buffer = rb.ReplayBuffer.__new__(rb.ReplayBuffer)
    buffer.poll_interval = 2.0
    buffer.pending_keys = {"train": set(pending)}
    buffer.running_keys = {"train": running if isinstance(running, set) else set(running)}
    buffer.finished_keys = {"train": set(finished)}
    buffer.failure_keys = {"train": set()}
    buffer.prompt_global_steps = {"train": dict(steps or {})}
    return buffer


def _polling(buffer, polls: int, during=None):
    """A stand-in for verl's sample loop: ``polls`` polls that came back short, then a batch."""

    def sample(global_steps, partition_id, batch_size):
        for _ in range(polls):
            buffer._wait_for_next_poll(partition_id, float("inf"))  # verl's own (hooked) poll sleep; no debug line
        if during is not None:
            during()
        return ("batch", {})

    return sample


def _wait_span(captured):
    (wait,) = [s for s in captured.finished() if s.name == semconv.SPAN_WAIT]
    return wait


def test_the_wait_says_its_counts_and_names_the_oldest_groups_in_flight(captured, v0_trainer, clock, rb, monkeypatch):
    """Through verl's real ``sample``: 3 groups needed; a and b finish at once, c after 30 s; e
    (sampled a step earlier) and d (never started) stay in flight. Events at 6 s (3 poll intervals)
    and 24 s (4x later), oldest first: e (step 2), then c (running since the wait began), then d."""
    queue = Queue()
    queue.sampled("e", 2)
    queue.status("e", "running")  # started 10 s before this step's wait
    clock.now += 10.0
    for uid in "abcd":
        queue.sampled(uid, 3)
    for uid in "abc":
        queue.status(uid, "running")
    queue.tags["e"][poll_lag.REPLICA] = "10.0.0.4:8000"  # what e's first LLM call put (test_poll_lag)
    t0 = clock.now

    def sleep(seconds):
        clock.now += seconds
        if clock.now - t0 == 2.0:
            queue.status("a", "finished")
            queue.status("b", "finished")
        if clock.now - t0 == 30.0:
            queue.status("c", "finished")

    monkeypatch.setattr(rb, "time", SimpleNamespace(sleep=sleep, time=lambda: clock.now))
    buffer = _sampling_buffer(monkeypatch, rb, queue)
    batch, _ = buffer.sample(3, "train", 3)

    assert sorted(batch.keys) == ["a_0_0", "b_0_0", "c_0_0"]  # verl's own result
    assert queue.tags["c"][poll_lag.STARTED_AT] == t0  # the group's start, in its tags
    wait = _wait_span(captured)
    counts = {k: wait.attributes[k] for k in waiting_for.COUNT_ATTRS.values()}
    assert counts == {
        semconv.ATTR_WAIT_PENDING: 1,
        semconv.ATTR_WAIT_RUNNING: 1,
        semconv.ATTR_WAIT_FINISHED: 3,
        semconv.ATTR_WAIT_FAILED: 0,
    }
    assert wait.attributes[semconv.ATTR_WAIT_NEEDED] == 3
    assert wait.attributes[semconv.ATTR_WAIT_POLLS] == 15  # at 0, 2, ..., 28 s; the poll at 30 s had enough
    events = [e for e in wait.events if e.name == semconv.EVENT_WAIT_STILL_WAITING]
    assert [e.attributes[semconv.ATTR_WAIT_ELAPSED] for e in events] == [6.0, 24.0]
    first = events[0].attributes
    assert list(first[semconv.ATTR_WAIT_OLDEST_UIDS]) == ["e", "c", "d"]
    assert list(first[semconv.ATTR_WAIT_OLDEST_STATES]) == ["running", "running", "pending"]
    assert list(first[semconv.ATTR_WAIT_OLDEST_STEPS]) == [2, 3, 3]
    assert list(first[semconv.ATTR_WAIT_OLDEST_AGES]) == [16.0, 6.0, 0.0]
    assert list(first[semconv.ATTR_WAIT_OLDEST_REPLICAS]) == ["10.0.0.4:8000", "", ""]  # c: no call yet
    assert (first[semconv.ATTR_WAIT_FINISHED], first[semconv.ATTR_WAIT_RUNNING], first[semconv.ATTR_WAIT_PENDING]) == (
        2,
        2,
        1,
    )
    assert first[semconv.ATTR_WAIT_NEEDED] == 3 and first[semconv.ATTR_WAIT_OLDEST_SCANNED] == 3
    assert waiting_for.current() is None  # the wait is over: nothing for the stall doctor to name


def test_a_short_wait_has_counts_and_no_event(captured, v0_trainer, clock, rb):
    buffer = _filled_buffer(rb, running=["r1"], finished=["f1"])
    waits.sample_wrapper(_polling(buffer, 2), buffer, (3, "train", 2), {})  # 2 s: below the bound
    wait = _wait_span(captured)
    assert wait.attributes[semconv.ATTR_WAIT_RUNNING] == 1 and wait.attributes[semconv.ATTR_WAIT_POLLS] == 2
    assert not wait.events


class CountingSet(set):
    """A set that counts the keys handed out by iterating it (verl's sets are plain sets)."""

    handed = 0

    def __iter__(self):
        for key in super().__iter__():
            CountingSet.handed += 1
            yield key


def test_a_huge_set_is_read_boundedly_and_the_event_stays_small(captured, v0_trainer, clock, rb):
    running = CountingSet(f"{i:08d}-0000-4000-8000-{i:012d}" for i in range(100_000))
    buffer = _filled_buffer(rb, running=running, steps={k: 3 for k in running})
    CountingSet.handed = 0
    polls = 14  # 26 s: events at 6 s and 24 s, names refreshed for the board in between
    waits.sample_wrapper(_polling(buffer, polls), buffer, (3, "train", 512), {})
    (first, second) = [e.attributes for e in _wait_span(captured).events]
    for attrs in (first, second):
        assert len(attrs[semconv.ATTR_WAIT_OLDEST_UIDS]) == waiting_for.MAX_NAMED
        assert attrs[semconv.ATTR_WAIT_OLDEST_SCANNED] == waiting_for.MAX_SCAN
        assert attrs[semconv.ATTR_WAIT_RUNNING] == 100_000
        assert sum(len(str(v)) for v in attrs.values()) < 2_000  # a few hundred bytes, not 100k uids
    namings = 2 + 1  # the two events, one refresh (10 s after the first) for the stall doctor
    assert CountingSet.handed <= namings * waiting_for.MAX_SCAN  # never the whole set


def test_a_set_of_another_shape_is_skipped_and_said_once(captured, v0_trainer, clock, rb, caplog):
    buffer = _filled_buffer(rb, finished=["f1"])
    buffer.running_keys = [("train", {"r1"})]  # no longer a mapping of partition -> uids
    with caplog.at_level(logging.WARNING, logger="otel_verl"):
        result = waits.sample_wrapper(_polling(buffer, 6), buffer, (3, "train", 2), {})
    assert result == ("batch", {})  # verl's result unchanged
    wait = _wait_span(captured)  # the span is still there, without what it cannot know
    assert semconv.ATTR_WAIT_RUNNING not in wait.attributes and not wait.events
    assert wait.attributes[semconv.ATTR_WAIT_NEEDED] == 2
    said = [r for r in caplog.records if "ReplayBuffer.running_keys is a list" in r.getMessage()]
    assert len(said) == 1


def test_uids_of_another_type_are_cut_or_left_out(captured, v0_trainer, clock, rb):
    long_uid = "x" * 1000
    buffer = _filled_buffer(rb, running=[long_uid, 7, (1, 2)], steps={long_uid: 3, 7: 3})
    waits.sample_wrapper(_polling(buffer, 4), buffer, (3, "train", 2), {})
    (event,) = _wait_span(captured).events
    uids = list(event.attributes[semconv.ATTR_WAIT_OLDEST_UIDS])
    assert sorted(uids) == ["7", "x" * waiting_for.MAX_UID_CHARS]  # a tuple key is no uid: left out
    assert semconv.ATTR_WAIT_OLDEST_AGES not in event.attributes  # no start stamps: no ages claimed


def test_the_stall_doctor_says_what_the_stalled_wait_waits_for(logged, v0_trainer, clock, rb, monkeypatch, capsys):
    """The trainer is inside v1's wait when the stall doctor decides: its record and console line
    say the counts and name the oldest groups still in flight."""
    monkeypatch.setenv(config.STALL_AFTER, "10")
    config.settings.cache_clear()
    monkeypatch.setattr(board, "publish", lambda run_id, doc: True)
    monkeypatch.setattr(watchdog, "STEP_CLOCK", watchdog.StepClock())
    running = [f"uid-{i}" for i in range(5)]
    buffer = _filled_buffer(rb, running=running, pending=["uid-p"], steps={u: 2 for u in [*running, "uid-p"]})
    buffer.failure_keys = {"train": {"uid-x"}}
    watchdog.STEP_CLOCK.step_started(2, None)
    wd, decided = watchdog.Watchdog(), []

    def stall_check():
        decided.append(wd.check(now=watchdog.STEP_CLOCK.started + 42))

    waits.sample_wrapper(_polling(buffer, 20, during=stall_check), buffer, (2, "train", 4), {})
    assert decided == ["stalled"]
    (record,) = [r for r in logged.records() if r.event_name == semconv.EVENT_TRAINING_STALLED]
    attrs = record.attributes
    assert attrs[semconv.ATTR_WAIT_FOR] == "rollouts" and attrs[semconv.ATTR_WAIT_PARTITION] == "train"
    assert (attrs[semconv.ATTR_WAIT_PENDING], attrs[semconv.ATTR_WAIT_RUNNING], attrs[semconv.ATTR_WAIT_FAILED]) == (
        1,
        5,
        1,
    )
    assert attrs[semconv.ATTR_WAIT_NEEDED] == 4 and attrs[semconv.ATTR_WAIT_FINISHED] == 0
    assert attrs[semconv.ATTR_WAIT_ELAPSED] == 40.0
    assert sorted(attrs[semconv.ATTR_WAIT_OLDEST_UIDS]) == sorted([*running, "uid-p"])
    assert list(attrs[semconv.ATTR_WAIT_OLDEST_STATES]) == ["running"] * 5 + ["pending"]
    out = capsys.readouterr().out
    assert "(limit 10 s, step 2 in progress), waiting for rollouts (train) for 40 s: 0 of 4 needed groups" in out
    assert "0 of 4 needed groups finished, 1 pending, 5 running, 1 failed; oldest: uid-" in out
    assert "running (step 2)" in out and "+3 more named in the record" in out


def test_no_wait_in_progress_leaves_the_stall_record_as_it_was(logged, clock, monkeypatch, capsys):
    monkeypatch.setenv(config.STALL_AFTER, "10")
    config.settings.cache_clear()
    monkeypatch.setattr(board, "publish", lambda run_id, doc: True)
    monkeypatch.setattr(watchdog, "STEP_CLOCK", watchdog.StepClock())
    # an old picture: its wait's last poll was long ago
    waiting_for.CURRENT = waiting_for.Waiting("train", (0, 1, 0, 0), 4, clock.now - 100, clock.now - 60, 2.0, 5)
    watchdog.STEP_CLOCK.step_started(2, None)
    assert watchdog.Watchdog().check(now=watchdog.STEP_CLOCK.started + 11) == "stalled"
    (record,) = logged.records()
    assert semconv.ATTR_WAIT_FOR not in record.attributes
    assert "waiting for rollouts" not in capsys.readouterr().out
