"""Histogram values queued on the agent loop's event loop and recorded when metrics are collected.

An agent-loop worker records a few histogram values per trajectory (its duration, its response
tokens, each LLM call's duration). The SDK's ``record`` (its ``Measurement``, the attributes'
cleaning, the exemplar filter, the aggregation under its lock) is most of what a trajectory's
metrics cost there, on the event loop every trajectory of the worker shares. So the event loop
only queues (instrument, value, attributes, context); the queue is recorded into the SDK at the
start of every collection, by any reader, in the collecting thread (the step export's recorder,
the periodic reader's thread): an observable instrument's callback runs before the SDK reads its
aggregations (``_drain``; it observes nothing itself, so it never exports a point). A value is
in the first collection after it was queued, as it would have been recorded then, with the
attributes and the exemplar context of the moment it was queued; only an exemplar's timestamp is
the collection's.

Bounded: at ``MAX_QUEUED`` values the queue is recorded at once, in the queuing thread: nothing
is lost, and a pipeline that never collects (no reader, the API's no-op meter) holds no more.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from otel_verl import semconv

MAX_QUEUED = 8192  # values waiting for a collection (three per trajectory)


class Deferred:
    """The queue of one meter's deferred histogram values."""

    def __init__(self, meter: Meter) -> None:
        self._queue: deque[tuple[Any, float, dict[str, Any], Any]] = deque()
        self._gauge = meter.create_observable_gauge(
            semconv.DEFERRED_RECORDER, callbacks=[self._drain], description="records queued values; no points"
        )

    def record(self, instrument: Any, value: float, attributes: dict[str, Any]) -> None:
        """``instrument.record(value, attributes)`` at the next collection (the caller's context)."""
        queue = self._queue
        queue.append((instrument, value, attributes, otel_context.get_current()))
        if len(queue) >= MAX_QUEUED:
            self.flush()

    def flush(self) -> None:
        """Record every queued value now, in this thread (one at a time: collections may run at once)."""
        queue = self._queue
        while True:
            try:
                instrument, value, attributes, ctx = queue.popleft()
            except IndexError:
                return
            instrument.record(value, attributes, context=ctx)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def _drain(self, options: CallbackOptions) -> Iterable[Observation]:
        self.flush()
        return ()
