"""Histogram values queued on the event loop are recorded at the next collection, by any reader,
with the attributes and exemplar context of the moment they were queued; none are lost."""

from __future__ import annotations

import threading

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_verl import semconv
from otel_verl.instruments import deferred
from otel_verl.instruments.deferred import Deferred


def _points(reader: InMemoryMetricReader) -> dict[str, list]:
    data = reader.get_metrics_data()
    out: dict[str, list] = {}
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = list(m.data.data_points)
    return out


def _setup(*readers: InMemoryMetricReader) -> tuple[Deferred, object]:
    meter = MeterProvider(metric_readers=list(readers)).get_meter("t")
    return Deferred(meter), meter.create_histogram("h")


def test_values_wait_for_the_collection_and_then_are_all_there():
    reader = InMemoryMetricReader()
    queue, hist = _setup(reader)
    for v in (1.0, 2.0, 4.0):
        queue.record(hist, v, {"status": "ok"})
    queue.record(hist, 8.0, {"status": "error"})
    assert queue.queued == 4  # nothing recorded in the queuing thread
    points = _points(reader)
    assert semconv.DEFERRED_RECORDER not in points  # the draining instrument reports nothing
    by_status = {p.attributes["status"]: p for p in points["h"]}
    assert (by_status["ok"].count, by_status["ok"].sum) == (3, 7.0)
    assert (by_status["error"].count, by_status["error"].sum) == (1, 8.0)
    assert queue.queued == 0
    queue.record(hist, 16.0, {"status": "ok"})
    again = {p.attributes["status"]: p for p in _points(reader)["h"]}
    assert (again["ok"].count, again["ok"].sum) == (4, 23.0)  # cumulative: the next collection has it


def test_a_second_reader_sees_the_same_values():
    a, b = InMemoryMetricReader(), InMemoryMetricReader()
    queue, hist = _setup(a, b)
    queue.record(hist, 3.0, {})
    assert [(p.count, p.sum) for p in _points(a)["h"]] == [(1, 3.0)]
    assert [(p.count, p.sum) for p in _points(b)["h"]] == [(1, 3.0)]  # recorded once, into both


def test_the_exemplar_is_the_context_the_value_was_queued_in():
    reader = InMemoryMetricReader()
    queue, hist = _setup(reader)
    ctx = SpanContext(0xABC, 0xDEF, False, TraceFlags(TraceFlags.SAMPLED))
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(ctx)))
    try:
        queue.record(hist, 5.0, {})
    finally:
        otel_context.detach(token)
    (point,) = _points(reader)["h"]  # collected outside that context
    assert [(e.trace_id, e.span_id) for e in point.exemplars] == [(0xABC, 0xDEF)]


def test_a_full_queue_is_recorded_at_once_so_nothing_is_lost(monkeypatch):
    monkeypatch.setattr(deferred, "MAX_QUEUED", 10)
    reader = InMemoryMetricReader()
    queue, hist = _setup(reader)
    for _ in range(25):
        queue.record(hist, 1.0, {})
        assert queue.queued < 10
    assert [p.count for p in _points(reader)["h"]] == [25]


def test_values_queued_while_another_thread_collects_are_counted_once():
    reader = InMemoryMetricReader()
    queue, hist = _setup(reader)
    done = threading.Event()

    def collect() -> None:
        while not done.is_set():
            reader.get_metrics_data()

    t = threading.Thread(target=collect)
    t.start()
    try:
        for _ in range(20_000):
            queue.record(hist, 1.0, {})
    finally:
        done.set()
        t.join()
    assert [p.count for p in _points(reader)["h"]] == [20_000]


def test_an_entry_of_several_values_records_them_all_with_one_exemplar_context():
    """An LLM call's histograms (its own duration, the GenAI duration and token usage) are one entry:
    one place in the bound, one exemplar context asked for once."""
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    queue = Deferred(meter)
    seconds, tokens = meter.create_histogram("seconds"), meter.create_histogram("tokens")
    ctx = SpanContext(0xABC, 0xDEF, False, TraceFlags(TraceFlags.SAMPLED))
    asked: list[int] = []

    def exemplar() -> otel_context.Context:
        asked.append(1)
        return trace.set_span_in_context(NonRecordingSpan(ctx), otel_context.Context())

    queue.record_all(
        ((seconds, 0.5, {}), (tokens, 3.0, {"type": "input"}), (tokens, 7.0, {"type": "output"})), exemplar
    )
    assert queue.queued == 1
    points = _points(reader)
    assert asked == [1]
    (s,) = points["seconds"]
    assert (s.count, s.sum) == (1, 0.5)
    by_type = {p.attributes["type"]: p for p in points["tokens"]}
    assert (by_type["input"].sum, by_type["output"].sum) == (3.0, 7.0)
    for p in (s, *by_type.values()):
        assert [(e.trace_id, e.span_id) for e in p.exemplars] == [(0xABC, 0xDEF)]
