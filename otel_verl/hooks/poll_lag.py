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
the groups still in flight have been running.

The lag is None when no selected group carries the entry (an agent-loop process without
otel-verl, an older TransferQueue). Wall clocks of two processes: on two hosts their offset adds
to the figure, so ``waits`` clips it to the wait itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from otel_verl._safe import safe

DONE_AT = "otel_verl.done_at"  # the tag entry: unix seconds the group's terminal status was written
STARTED_AT = "otel_verl.started_at"  # the tag entry: unix seconds the group's running status was written
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


def stamp_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``transfer_queue.async_kv_put``: a group's running and terminal statuses carry the time they
    were written."""
    tag = kwargs.get("tag")
    stamp = _stamp_of(tag) if len(args) <= 2 and kwargs.get("fields") is None else None
    if stamp is not None:
        stamped = _stamped(tag, stamp)
        if stamped is not None:
            kwargs = {**kwargs, "tag": stamped}
    return wrapped(*args, **kwargs)


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
