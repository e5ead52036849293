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
attributes it was queued with; only an exemplar's timestamp is the collection's.

Exemplars: a value's exemplar context is the caller's current context when it was queued, or one
the caller passes (``context``): a function of none is called at the recording, so that the
exemplar can name a span whose fate (exported or not) is decided after the value was queued.

Bounded: at ``MAX_QUEUED`` values the queue is recorded at once, in the queuing thread: nothing
is lost, and a pipeline that never collects (no reader, the API's no-op meter) holds no more.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from otel_verl import semconv

MAX_QUEUED = 8192  # entries waiting for a collection (three per single-turn trajectory)

ExemplarContext = otel_context.Context | Callable[[], otel_context.Context]
Measurement = tuple[Any, float, dict[str, Any]]  # (instrument, value, attributes)


class Deferred:
    """The queue of one meter's deferred histogram values."""

    def __init__(self, meter: Meter) -> None:
        self._queue: deque[tuple[tuple[Measurement, ...], ExemplarContext]] = deque()
        self._gauge = meter.create_observable_gauge(
            semconv.DEFERRED_RECORDER, callbacks=[self._drain], description="records queued values; no points"
        )

    def record(
        self, instrument: Any, value: float, attributes: dict[str, Any], context: ExemplarContext | None = None
    ) -> None:
        """``instrument.record(value, attributes)`` at the next collection, its exemplar context
        ``context`` (a context, or a function that gives one then), by default the caller's current one."""
        self.record_all(((instrument, value, attributes),), context)

    def record_all(self, measurements: tuple[Measurement, ...], context: ExemplarContext | None = None) -> None:
        """Several values of one moment (an LLM call's histograms) as one entry, with one exemplar context."""
        queue = self._queue
        queue.append((measurements, otel_context.get_current() if context is None else context))
        if len(queue) >= MAX_QUEUED:
            self.flush()

    def flush(self) -> None:
        """Record every queued value now, in this thread (one at a time: collections may run at once)."""
        queue = self._queue
        while True:
            try:
                measurements, ctx = queue.popleft()
            except IndexError:
                return
            if callable(ctx):
                ctx = ctx()
            for instrument, value, attributes in measurements:
                instrument.record(value, attributes, context=ctx)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def _drain(self, options: CallbackOptions) -> Iterable[Observation]:
        self.flush()
        return ()
