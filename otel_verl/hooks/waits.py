"""``verl.wait`` spans: where the trainer waits instead of working, said as what it waits for.

* v1 ``ReplayBuffer.sample`` / ``ReplayBufferAsync.sample`` (TaskRunner, inside the ``gen``
  stage): verl polls TransferQueue every ``poll_interval`` (2 s) until enough rollouts have
  finished. Without this span most of a v1 ``verl.gen`` has no child in any process
  (``verl.wait.for`` = ``rollouts``, ``verl.wait.source`` = ``replay_buffer.sample``,
  ``verl.wait.partition`` = ``train``/``val``). Of that wait, the seconds after the rollouts it
  returns were all done are its poll lag (``poll_lag``): ``verl.wait.poll_lag`` on the span, with
  the replay buffer's ``verl.wait.poll_interval``, and the step's ``poll_lag`` time category
  (``accounting``). What it waits for (``waiting_for``): the counts of verl's last poll
  (``verl.wait.pending``/``running``/``finished``/``failed``, of ``verl.wait.needed``) when it
  ends, and, once it lasts several poll intervals, a bounded ``verl.wait.still_waiting`` event
  naming the oldest groups still in flight (also what the stall doctor says of a stalled wait).

A wait span is a child of the current stage span; it is made only in the process running the
trainer (``PROCESS.trainer``), and verl's result or exception passes through unchanged.
"""

from __future__ import annotations

from typing import Any

from otel_verl import semconv
from otel_verl._safe import safe
from otel_verl.hooks import accounting, poll_lag, targets, waiting_for
from otel_verl.hooks.accounting import ACCOUNT
from otel_verl.hooks.hookset import Hook
from otel_verl.hooks.spans import SpanState, call_traced, close_span, open_span
from otel_verl.process.state import PROCESS

SOURCE_REPLAY_BUFFER = "replay_buffer.sample"


@safe("replay buffer wait span start")
def _sample_start(instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    if PROCESS.trainer is None:
        return None
    attrs: dict[str, Any] = {
        semconv.ATTR_WAIT_FOR: semconv.WAIT_ROLLOUTS,
        semconv.ATTR_WAIT_SOURCE: SOURCE_REPLAY_BUFFER,
    }
    interval = getattr(instance, "poll_interval", None)  # a public attribute of verl's replay buffer
    if isinstance(interval, int | float) and not isinstance(interval, bool):
        attrs[semconv.ATTR_WAIT_POLL_INTERVAL] = float(interval)
    partition = kwargs.get("partition_id", args[1] if len(args) > 1 else None)
    if isinstance(partition, str):
        attrs[semconv.ATTR_WAIT_PARTITION] = partition
    step = kwargs.get("global_steps", args[0] if args else None)
    if isinstance(step, int):
        attrs[semconv.ATTR_STEP] = step
    needed = kwargs.get("batch_size", args[2] if len(args) > 2 else None)
    needed = needed if isinstance(needed, int) and not isinstance(needed, bool) else None
    opened = open_span(semconv.SPAN_WAIT, attributes=attrs)
    state = opened, accounting.clock(), ACCOUNT.wait_started(), instance
    poll_lag.begin()
    waiting_for.begin(opened[0], partition if isinstance(partition, str) else None, needed)
    return state


@safe("replay buffer wait span end")
def _sample_end(state: tuple[SpanState, float, bool, Any], result: Any, error: BaseException | None) -> None:
    opened, start, outermost, instance = state
    seconds = accounting.clock() - start
    lag = poll_lag.end(result if error is None else None)  # also forgets the poll answers it kept
    waiting_for.end(instance)
    if lag is not None:
        lag = min(lag, seconds)  # two hosts' clocks: never more than the wait itself
        opened[0].set_attribute(semconv.ATTR_WAIT_POLL_LAG, round(lag, 6))
    close_span(opened, error=error)
    ACCOUNT.wait_ended(seconds, outermost, lag)  # the step's waiting and poll lag (hooks/accounting.py)


def sample_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return call_traced(_sample_start(instance, args, kwargs), _sample_end, wrapped, *args, **kwargs)


HOOKS = [
    Hook(targets.REPLAY_BUFFER, "ReplayBuffer.sample", sample_wrapper),
    Hook(targets.REPLAY_BUFFER, "ReplayBufferAsync.sample", sample_wrapper, optional=True),
    # each poll that came back short: what is still in flight (ReplayBufferAsync inherits it)
    Hook(targets.REPLAY_BUFFER, "ReplayBuffer._wait_for_next_poll", waiting_for.poll_wrapper),
    # both ends of the poll lag (transferqueue is installed with the v1 driver)
    Hook(targets.TRANSFER_QUEUE, "async_kv_put", poll_lag.stamp_wrapper, optional=True),
    Hook(targets.TRANSFER_QUEUE, "kv_list", poll_lag.observe_wrapper, optional=True),
]
