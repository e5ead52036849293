"""What the v1 trainer's wait waits for: the prompt groups still in flight, counted, the oldest named.

verl's v1 ``ReplayBuffer`` holds, per partition, the prompt uids TransferQueue reported in each
status at its last poll: ``pending_keys``, ``running_keys``, ``finished_keys``, ``failure_keys``
(public attributes, sets of uids: a prompt group's key in TransferQueue is its uid, its
trajectories' ``<uid>_<session>_<index>``), and ``prompt_global_steps`` (uid -> the step it was
sampled for). After each poll that found too few finished groups verl calls
``_wait_for_next_poll`` and sleeps ``poll_interval``; this module's hook runs just before, on the
TaskRunner's thread, with the sets of that poll:

* every poll: one ``len`` per set, nothing copied; the counts go on the ``verl.wait`` span when the
  wait ends (``waits``: ``verl.wait.pending``, ``.running``, ``.finished``, ``.failed``, with
  ``.needed`` and ``.polls``), and into ``CURRENT``;
* once the wait has lasted ``EVENT_AFTER_POLLS`` poll intervals (at least ``EVENT_AFTER_MIN_S``),
  then each time it has lasted ``EVENT_FACTOR`` times longer, at most ``MAX_EVENTS`` times per
  wait: a ``verl.wait.still_waiting`` event on the span, naming up to ``MAX_NAMED`` of the oldest
  groups in flight (by the step each was sampled for, then by when it started running), picked from
  at most ``MAX_SCAN`` of them (running ones first: a stuck group is a running one). A running
  group's age needs its start time: the agent-loop workers stamp it into the group's ``running``
  status (``poll_lag.STARTED_AT``) and verl's poll answer carries it here, with the replica (server
  id) the group's first LLM call was sent to (``poll_lag.REPLICA``);
* ``CURRENT``: the last poll's picture, for the stall doctor's thread (``stall.watchdog``, which
  reads it through ``stall_note``, registered at a poll), which says it in its
  ``verl.training.stalled`` record; its names are refreshed at most every ``REFRESH_S``
  once the wait is long enough for an event. The training thread replaces it whole, the doctor
  only reads it.

A set of another shape than this expects (a verl release changed it) is skipped and said once;
the wait span stays as it was.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any

from opentelemetry.trace import Span

from otel_verl import per_process, semconv
from otel_verl._safe import safe, warn_once
from otel_verl.hooks import poll_lag
from otel_verl.process.state import PROCESS
from otel_verl.stall import watchdog

PENDING, RUNNING, FINISHED, FAILED = "pending", "running", "finished", "failed"
# verl's attribute per status (verl calls a failed group's status "failure")
SETS = ((PENDING, "pending_keys"), (RUNNING, "running_keys"), (FINISHED, "finished_keys"), (FAILED, "failure_keys"))
COUNT_ATTRS = {
    PENDING: semconv.ATTR_WAIT_PENDING,
    RUNNING: semconv.ATTR_WAIT_RUNNING,
    FINISHED: semconv.ATTR_WAIT_FINISHED,
    FAILED: semconv.ATTR_WAIT_FAILED,
}

MAX_NAMED = 8  # groups named per event / stall record
MAX_SCAN = 4096  # in-flight groups looked at to pick them (bounded work however many verl holds)
MAX_UID_CHARS = 64  # verl's uids are uuid4 strings (36); anything longer is cut
EVENT_AFTER_POLLS = 3
EVENT_AFTER_MIN_S = 5.0
EVENT_FACTOR = 4.0
MAX_EVENTS = 3
REFRESH_S = 10.0
CONSOLE_NAMED = 3  # groups named in the stall doctor's console line (the record has all)

# Seams for tests: ``clock`` times the wait (monotonic), ``wall`` the groups' ages (their start
# times are unix seconds written by the agent-loop workers, possibly on another host).
clock: Callable[[], float] = time.monotonic
wall: Callable[[], float] = time.time


@dataclass(frozen=True)
class Group:
    uid: str
    state: str  # pending | running
    step: int | None  # the step it was sampled for (verl's prompt_global_steps)
    started_at: float | None  # unix s it started running; None: pending, or no stamp
    replica: str | None = None  # the server id its first LLM call was sent to; None: not said

    def age(self, now_wall: float) -> float | None:
        return None if self.started_at is None else max(0.0, now_wall - self.started_at)


@dataclass(frozen=True)
class Waiting:
    """One poll's picture of a replay-buffer wait (immutable: another thread reads it)."""

    partition: str
    counts: tuple[int, int, int, int]  # pending, running, finished, failed
    needed: int | None
    since: float  # clock() when the wait began
    at: float  # clock() of this poll
    poll_interval: float
    polls: int  # polls that found too few finished groups, so far
    oldest: tuple[Group, ...] = ()
    scanned: int = 0  # in-flight groups looked at to pick ``oldest``
    named_at: float | None = None  # clock() when ``oldest`` was picked

    def fresh(self, now: float) -> bool:
        """Still the wait in progress: its last poll is at most two intervals (and a margin) old."""
        return now - self.at <= 2 * self.poll_interval + 5.0

    def count(self, state: str) -> int:
        return self.counts[[s for s, _ in SETS].index(state)]

    def attributes(self, now: float, now_wall: float) -> dict[str, Any]:
        """The counts, the elapsed seconds and the oldest groups, as span/log attributes."""
        attrs: dict[str, Any] = {COUNT_ATTRS[s]: n for (s, _), n in zip(SETS, self.counts, strict=True)}
        attrs[semconv.ATTR_WAIT_PARTITION] = self.partition
        attrs[semconv.ATTR_WAIT_POLLS] = self.polls
        attrs[semconv.ATTR_WAIT_ELAPSED] = round(max(0.0, now - self.since), 3)
        if self.needed is not None:
            attrs[semconv.ATTR_WAIT_NEEDED] = self.needed
        if self.oldest:
            attrs[semconv.ATTR_WAIT_OLDEST_UIDS] = [g.uid for g in self.oldest]
            attrs[semconv.ATTR_WAIT_OLDEST_STATES] = [g.state for g in self.oldest]
            attrs[semconv.ATTR_WAIT_OLDEST_SCANNED] = self.scanned
            if all(g.step is not None for g in self.oldest):
                attrs[semconv.ATTR_WAIT_OLDEST_STEPS] = [g.step for g in self.oldest]
            ages = [g.age(now_wall) for g in self.oldest if g.state == RUNNING]
            if ages and all(a is not None for a in ages):  # every running one stamped: a pending one is 0
                attrs[semconv.ATTR_WAIT_OLDEST_AGES] = [
                    round(g.age(now_wall) or 0.0, 1) if g.state == RUNNING else 0.0 for g in self.oldest
                ]
            if any(g.replica is not None for g in self.oldest):  # "": not sent to one yet, or not said
                attrs[semconv.ATTR_WAIT_OLDEST_REPLICAS] = [g.replica or "" for g in self.oldest]
        return attrs

    def sentence(self, now: float, now_wall: float, named: int = CONSOLE_NAMED) -> str:
        """``waiting for rollouts (train) for 31 s: 0 of 4 needed groups finished, 0 pending, 4 running,
        0 failed; oldest: 9b1f... running for 29 s (step 2), ...``"""
        pending, running, finished, failed = self.counts
        of = f" of {self.needed} needed" if self.needed is not None else ""
        text = (
            f"waiting for rollouts ({self.partition}) for {max(0.0, now - self.since):.0f} s: {finished}{of} "
            f"groups finished, {pending} pending, {running} running, {failed} failed"
        )
        if self.oldest:
            parts = []
            for g in self.oldest[:named]:
                age = g.age(now_wall)
                how = f"{g.state} for {age:.0f} s" if age is not None else g.state
                how += f" on {g.replica}" if g.replica is not None else ""
                parts.append(f"{g.uid} {how}" + (f" (step {g.step})" if g.step is not None else ""))
            more = len(self.oldest) - named
            text += "; oldest: " + ", ".join(parts) + (f", +{more} more named in the record" if more > 0 else "")
        return text


CURRENT: Waiting | None = None  # the last poll's picture (any thread may read it, only the poller writes)


def _forget() -> None:
    global CURRENT
    CURRENT = None


per_process.register(__name__, reset=_forget)


def stall_note() -> tuple[dict[str, Any], str] | None:
    """What a stall's record and console line say of this wait (``stall.watchdog.add_wait_note``): the
    attributes and words of the last poll's picture while it is fresh, else None."""
    waiting = current()
    if waiting is None:
        return None
    now, now_wall = clock(), wall()
    attrs = {**waiting.attributes(now, now_wall), semconv.ATTR_WAIT_FOR: semconv.WAIT_ROLLOUTS}
    return attrs, waiting.sentence(now, now_wall)


def current(now: float | None = None) -> Waiting | None:
    """The wait in progress (its last poll recent enough), or None."""
    waiting = CURRENT
    if waiting is None or not waiting.fresh(clock() if now is None else now):
        return None
    return waiting


@dataclass
class _Open:
    """A ``ReplayBuffer.sample`` open on this thread (``waits``)."""

    span: Span
    partition: str | None
    needed: int | None
    since: float
    polls: int = 0
    events: int = 0
    next_event_at: float | None = None  # elapsed seconds of the next event; None: not known yet
    nested: int = 0  # samples opened inside this one (a subclass's calling its parent's): the outer one speaks


_open = threading.local()


def begin(span: Span, partition: str | None, needed: int | None) -> None:
    """``waits``: a sample starts on this thread."""
    opened: _Open | None = getattr(_open, "wait", None)
    if opened is not None:
        opened.nested += 1
        return
    _open.wait = _Open(span, partition, needed, clock())


@safe("replay buffer wait: its counts")
def end(instance: Any) -> None:
    """``waits``: the sample returned or raised; its span (still open) gets the counts of verl's
    last poll and the number of polls that came back short."""
    global CURRENT
    opened: _Open | None = getattr(_open, "wait", None)
    if opened is not None and opened.nested:
        opened.nested -= 1
        return
    _open.wait = None
    if opened is None:
        return
    if CURRENT is not None and CURRENT.since == opened.since:
        CURRENT = None  # this wait is over: the stall doctor must not name it
    attrs: dict[str, Any] = {semconv.ATTR_WAIT_POLLS: opened.polls}
    if opened.needed is not None:
        attrs[semconv.ATTR_WAIT_NEEDED] = opened.needed
    counts = _counts(instance, opened.partition) if opened.partition is not None else None
    if counts is not None:
        attrs.update({COUNT_ATTRS[s]: n for (s, _), n in zip(SETS, counts, strict=True)})
    opened.span.set_attributes(attrs)


def _bad_shape(attr: str, what: Any) -> None:
    warn_once(
        "replay buffer sets",
        "verl's ReplayBuffer.%s is a %s, not a mapping of partition to prompt uids: "
        "the wait spans do not say what they wait for",
        attr,
        type(what).__name__,
    )


def _keys(instance: Any, attr: str, partition: str) -> Collection[Any] | None:
    """verl's ``instance.<attr>[partition]`` (never created: ``.get`` on verl's defaultdict), or None
    when it is not the shape expected (said once)."""
    by_partition = getattr(instance, attr, None)
    if not isinstance(by_partition, Mapping):
        _bad_shape(attr, by_partition)
        return None
    keys = by_partition.get(partition)
    if keys is None:
        return ()
    if isinstance(keys, str | bytes) or not isinstance(keys, Collection):
        _bad_shape(f"{attr}[{partition!r}]", keys)
        return None
    return keys


def _counts(instance: Any, partition: str) -> tuple[int, int, int, int] | None:
    found = []
    for _, attr in SETS:
        keys = _keys(instance, attr, partition)
        if keys is None:
            return None
        found.append(len(keys))
    return found[0], found[1], found[2], found[3]


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _oldest(instance: Any, partition: str) -> tuple[tuple[Group, ...], int]:
    """Up to ``MAX_NAMED`` of the oldest in-flight groups, from at most ``MAX_SCAN`` of them (running
    ones first), and how many were looked at. Reads verl's sets in place (this is verl's thread:
    nothing changes them meanwhile), copies none."""
    running, pending = _keys(instance, "running_keys", partition), _keys(instance, "pending_keys", partition)
    if running is None or pending is None:
        return (), 0
    steps = getattr(instance, "prompt_global_steps", None)
    steps = steps.get(partition) if isinstance(steps, Mapping) else None
    if not isinstance(steps, Mapping):
        steps = {}
    tags = poll_lag.listing(partition)  # the tags of verl's last poll answer, while its sample is open
    scanned = 0

    def candidates() -> Iterator[tuple[float, float, str, int, str, int | None, float | None, str | None]]:
        nonlocal scanned
        flight = chain(((k, RUNNING) for k in running), ((k, PENDING) for k in pending))
        for key, state in islice(flight, MAX_SCAN):
            scanned += 1  # also the tie-breaker: tuples never compare past it
            if not isinstance(key, str | int) or isinstance(key, bool):
                continue
            step = steps.get(key)
            step = step if isinstance(step, int) and not isinstance(step, bool) else None
            tag = tags.get(key) if tags is not None else None
            started = _number(tag.get(poll_lag.STARTED_AT)) if isinstance(tag, Mapping) else None
            started = started if state == RUNNING else None
            replica = tag.get(poll_lag.REPLICA) if isinstance(tag, Mapping) and state == RUNNING else None
            replica = replica[: poll_lag.MAX_REPLICA_CHARS] if isinstance(replica, str) else None
            yield (
                math.inf if step is None else step,
                math.inf if started is None else started,
                str(key)[:MAX_UID_CHARS],
                scanned,
                state,
                step,
                started,
                replica,
            )

    picked = heapq.nsmallest(MAX_NAMED, candidates())
    return tuple(
        Group(uid, state, step, started, replica) for _, _, uid, _, state, step, started, replica in picked
    ), scanned


def _interval(instance: Any) -> float:
    value = _number(getattr(instance, "poll_interval", None))
    return value if value is not None and value > 0 else 2.0


@safe("replay buffer wait: what it waits for")
def _polled(instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    global CURRENT
    if PROCESS.trainer is None:
        return
    partition = kwargs.get("partition_id", args[0] if args else None)
    if not isinstance(partition, str):
        return
    counts = _counts(instance, partition)
    if counts is None:
        return
    now, interval = clock(), _interval(instance)
    opened: _Open | None = getattr(_open, "wait", None)
    if opened is not None and opened.partition not in (None, partition):
        opened = None
    previous = CURRENT
    going_on = previous is not None and previous.partition == partition and previous.fresh(now)
    if opened is not None:
        opened.polls += 1
        since, polls, needed = opened.since, opened.polls, opened.needed
    elif going_on:  # verl's async trainer waits (wait_for_sampleable) outside a sample: no span
        since, polls, needed = previous.since, previous.polls + 1, previous.needed  # type: ignore[union-attr]
    else:
        since, polls, needed = now, 1, None
    elapsed, bound = now - since, max(EVENT_AFTER_POLLS * interval, EVENT_AFTER_MIN_S)
    event = opened is not None and opened.events < MAX_EVENTS and elapsed >= (opened.next_event_at or bound)
    same_wait = going_on and previous.since == since  # type: ignore[union-attr]
    stale = not same_wait or previous.named_at is None or now - previous.named_at >= REFRESH_S  # type: ignore[union-attr]
    if event or (elapsed >= bound and stale):
        oldest, scanned = _oldest(instance, partition)
        named_at: float | None = now
    elif same_wait:
        oldest, scanned, named_at = previous.oldest, previous.scanned, previous.named_at  # type: ignore[union-attr]
    else:
        oldest, scanned, named_at = (), 0, None
    CURRENT = waiting = Waiting(partition, counts, needed, since, now, interval, polls, oldest, scanned, named_at)
    watchdog.add_wait_note(stall_note)
    if event and opened is not None:
        opened.events += 1
        opened.next_event_at = max(elapsed, bound) * EVENT_FACTOR
        opened.span.add_event(semconv.EVENT_WAIT_STILL_WAITING, attributes=waiting.attributes(now, wall()))


def poll_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``ReplayBuffer._wait_for_next_poll``: a poll found too few finished groups; say which are in
    flight, then let verl sleep until its next poll."""
    _polled(instance, args, kwargs)
    return wrapped(*args, **kwargs)
