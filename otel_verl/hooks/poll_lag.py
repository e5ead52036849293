"""The v1 poll lag: how long the trainer kept waiting after the rollouts it trains on were done.

verl's v1 ``ReplayBuffer.sample`` (the trainer's ``gen`` stage, a ``verl.wait`` span: ``waits``)
asks TransferQueue which prompt groups have finished, and when too few have, sleeps
``poll_interval`` seconds (2 s in verl 0.9.1: a constructor argument of the replay buffer, with
no config key) and asks again. The last group usually finishes during that sleep, so the trainer
waits up to one interval after its rollouts were done. To measure that, both ends take part:

* agent-loop workers: the prompt group's terminal status, the one ``tq.async_kv_put(key=uid,
  tag={"status": "finished"})`` verl writes once every trajectory of the group has settled, gets
  one more tag entry, ``DONE_AT``: the wall-clock time it was written (TransferQueue merges a tag
  into the key's tags; verl reads only the entries it knows);
* TaskRunner: while a sample is open on this thread, the answers of verl's polls
  (``tq.kv_list()``) are read, never changed, for that entry; when the sample returns, the lag is
  the time since the last of the groups it selected was done.

The group's ``running`` status gets ``STARTED_AT`` the same way (when its sessions start), and
the last poll answer is kept while the sample is open: ``waiting_for`` reads both to say how long
the groups still in flight have been running. verl writes that status before any of the group's
sessions has asked its load balancer for a server, so the replica comes in a second tag-only put
(``note_replica``, from the LLM call's ``_acquire_server`` hook): ``REPLICA``, the server id the
group's first LLM call was sent to, once per group, awaited inside that call so that it lands
before the group's terminal status (verl writes that only once every session has settled).

The lag is None when no selected group carries the entry (an agent-loop process without
otel-verl, an older TransferQueue). Wall clocks of two processes: on two hosts their offset adds
to the figure, so ``waits`` clips it to the wait itself.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from otel_verl._safe import safe, warn_once

DONE_AT = "otel_verl.done_at"  # the tag entry: unix seconds the group's terminal status was written
STARTED_AT = "otel_verl.started_at"  # the tag entry: unix seconds the group's running status was written
REPLICA = "otel_verl.replica"  # the tag entry: the server id the group's first LLM call was sent to
MAX_REPLICA_CHARS = 128  # a server id is ``host:port`` or an actor name
TERMINAL = frozenset({"finished", "failure"})
STAMPS = {"running": STARTED_AT, **dict.fromkeys(TERMINAL, DONE_AT)}  # status -> its stamp

# Wall clock (both ends' times are compared across processes): one seam, so that tests can drive it.
clock: Callable[[], float] = time.time

# While a replay-buffer sample is open on this thread: .done (uid -> done_at) and .listing (verl's
# last poll answer, a reference: never copied, never changed).
_open = threading.local()


def _stamp_of(tag: Any) -> str | None:
    """The stamp a bare status update gets (``STAMPS``), or None for any other tag."""
    if not (isinstance(tag, dict) and len(tag) == 1):
        return None
    status = tag.get("status")
    return STAMPS.get(status) if isinstance(status, str) else None


@safe("rollout status time")
def _stamped(tag: dict[str, Any], stamp: str) -> dict[str, Any]:
    return {**tag, stamp: clock()}  # a new dict: verl's own is left as it was


class _Running:
    """A prompt group whose running status this task wrote: its sessions (tasks verl creates after
    that put) inherit it through ``GROUP``; the first LLM call among them sends ``REPLICA``."""

    __slots__ = ("key", "partition", "put", "sent")

    def __init__(self, key: Any, partition: Any, put: Any) -> None:
        self.key, self.partition, self.put = key, partition, put  # put: TransferQueue's own async_kv_put
        self.sent = False


GROUP: contextvars.ContextVar[_Running | None] = contextvars.ContextVar("otel_verl_running_group", default=None)


@safe("rollout group's replica")
def _running(wrapped: Any, kwargs: dict[str, Any]) -> None:
    key, partition = kwargs.get("key"), kwargs.get("partition_id")
    if isinstance(key, str) and isinstance(partition, str):
        GROUP.set(_Running(key, partition, wrapped))  # this task's context: the group's sessions copy it


def stamp_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``transfer_queue.async_kv_put``: a group's running and terminal statuses carry the time they
    were written."""
    tag = kwargs.get("tag")
    stamp = _stamp_of(tag) if len(args) <= 2 and kwargs.get("fields") is None else None
    if stamp is not None:
        stamped = _stamped(tag, stamp)
        if stamped is not None:
            kwargs = {**kwargs, "tag": stamped}
        if stamp == STARTED_AT and not args:
            _running(wrapped, kwargs)
    return wrapped(*args, **kwargs)


def _replica_put(server_id: Any) -> Any:
    """The put that says which replica this task's group went to, or None (not a v1 group, or said)."""
    group = GROUP.get()
    if group is None or group.sent:
        return None
    group.sent = True  # once per group, whatever the put does
    tag = {REPLICA: str(server_id)[:MAX_REPLICA_CHARS]}
    return group.put(key=group.key, partition_id=group.partition, tag=tag)


async def note_replica(server_id: Any) -> None:
    """The LLM call's server was chosen (``llm.acquire_server_wrapper``): the first of a v1 group's
    calls adds ``REPLICA`` to its status. Fail-safe: a failed put is said once, never raised."""
    try:
        put = _replica_put(server_id)
        if put is not None:
            await put
    except Exception as exc:  # noqa: BLE001 - never the LLM call's error
        warn_once("rollout group's replica", "could not add the replica to a prompt group's status: %r", exc)


def begin() -> None:
    """A replay-buffer sample starts on this thread (``waits``)."""
    _open.done = {}
    _open.listing = None


def listing(partition: str) -> Mapping[str, Any] | None:
    """``{key: tag}`` of ``partition`` in verl's last poll answer on this thread, while a sample is open."""
    answer = getattr(_open, "listing", None)
    items = answer.get(partition) if isinstance(answer, dict) else None
    return items if isinstance(items, Mapping) else None


@safe("poll answer")
def _observe(listing: Any) -> None:
    done = getattr(_open, "done", None)
    if done is None or not isinstance(listing, dict):
        return
    for items in listing.values():
        if not isinstance(items, dict):
            continue
        for key, tag in items.items():
            at = tag.get(DONE_AT) if isinstance(tag, dict) else None
            if isinstance(at, int | float) and not isinstance(at, bool):
                done[key] = float(at)


def observe_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``transfer_queue.kv_list``: inside a sample, note when each finished group was done."""
    answer = wrapped(*args, **kwargs)
    if getattr(_open, "done", None) is not None:
        _open.listing = answer
        _observe(answer)
    return answer


@safe("poll lag")
def end(result: Any, now: float | None = None) -> float | None:
    """Seconds from the last selected group's done time to now (the sample returning), or None."""
    done = getattr(_open, "done", None)
    _open.done = _open.listing = None
    batch = result[0] if isinstance(result, tuple) and result else result
    keys = getattr(batch, "keys", None)
    if not done or not isinstance(keys, list | tuple):
        return None
    # a trajectory key is "<uid>_<session>_<index>", the group's prompt key its uid (as verl splits it)
    times = [done[uid] for uid in {str(k).split("_")[0] for k in keys} if uid in done]
    if not times:
        return None
    return max(0.0, (clock() if now is None else now) - max(times))
