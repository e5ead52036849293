"""``TreeBuffer`` (``otel_verl.process.span_trees``) and span records (``span_records``): spans of an
undecided tree are held and follow its decision, everything else passes straight through, memory
is bounded and counted, and another process's hand-back is checked field by field.
"""

from __future__ import annotations

import pickle

import pytest
from opentelemetry import context, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_verl import semconv
from otel_verl.hooks.rollout import span_records
from otel_verl.hooks.rollout.span_records import Rec
from otel_verl.instruments import drops
from otel_verl.process import span_trees
from otel_verl.process.span_trees import TreeBuffer

SCOPE = InstrumentationScope("test", "1")
SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)


@pytest.fixture
def pipeline():
    buffer = TreeBuffer()
    provider = TracerProvider(active_span_processor=buffer, resource=Resource({"service.name": "t"}))
    out = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(out))
    span_trees.for_provider(provider, SCOPE, buffer)
    return buffer, provider.get_tracer("user"), out


def under(trace_id: int, span_id: int):
    """A context whose current span is a record's (what a trajectory makes current)."""
    ctx = trace.SpanContext(trace_id, span_id, False, SAMPLED)
    return trace.set_span_in_context(trace.NonRecordingSpan(ctx))


def names(out):
    return sorted(s.name for s in out.get_finished_spans())


def test_members_are_held_until_the_decision_and_others_pass(pipeline):
    buffer, tracer, out = pipeline
    kept, dropped = buffer.open(0x11), buffer.open(0x22)
    with tracer.start_as_current_span("kept-child", context=under(1, 0x11)):
        with tracer.start_as_current_span("kept-grandchild"):
            pass
    with tracer.start_as_current_span("dropped-child", context=under(2, 0x22)):
        pass
    with tracer.start_as_current_span("unrelated"):
        pass
    assert names(out) == ["unrelated"]  # straight through
    assert buffer.held == 3
    root = Rec("root", 1, 0x11, 0, 10, {"a": 1})
    buffer.end(kept, True, span_records.readable_all([root], buffer.resource, buffer.scope))
    buffer.end(dropped, False)
    assert names(out) == ["kept-child", "kept-grandchild", "root", "unrelated"]
    (r,) = [s for s in out.get_finished_spans() if s.name == "root"]
    assert r.resource.attributes["service.name"] == "t" and r.instrumentation_scope == SCOPE
    assert buffer.held == 0 and buffer.trees == 0


def test_a_member_still_open_follows_the_decision_and_so_do_its_children(pipeline):
    buffer, tracer, out = pipeline
    kept, dropped = buffer.open(0x11), buffer.open(0x22)
    open_kept = tracer.start_span("late-kept", context=under(1, 0x11))
    open_dropped = tracer.start_span("late-dropped", context=under(2, 0x22))
    buffer.end(kept, True)
    buffer.end(dropped, False)
    with tracer.start_as_current_span("child-of-late-dropped", context=trace.set_span_in_context(open_dropped)):
        pass
    open_kept.end()
    open_dropped.end()
    assert names(out) == ["late-kept"]


def test_take_hands_the_held_spans_over_and_drops_late_ones(pipeline):
    buffer, tracer, out = pipeline
    tree = buffer.open(0x33)
    with tracer.start_as_current_span("done", context=under(3, 0x33)):
        pass
    late = tracer.start_span("late", context=under(3, 0x33))
    (taken,) = buffer.take(tree)
    assert taken.name == "done"
    late.end()
    assert names(out) == []


def test_holding_is_bounded_per_tree_and_per_process_and_counted(pipeline, monkeypatch):
    buffer, tracer, out = pipeline
    monkeypatch.setattr(span_trees, "MAX_TREE_SPANS", 3)
    monkeypatch.setattr(span_trees, "MAX_HELD_SPANS", 5)
    before = drops.counts()[semconv.DROPPED_SPAN_TREE]
    a, b = buffer.open(0x11), buffer.open(0x22)
    for _ in range(4):
        tracer.start_span("a", context=under(1, 0x11)).end()
    for _ in range(4):
        tracer.start_span("b", context=under(2, 0x22)).end()
    assert buffer.held == 5  # 3 of a's (its bound), 2 of b's (the process's)
    assert (a.dropped, b.dropped) == (1, 2)
    assert drops.counts()[semconv.DROPPED_SPAN_TREE] == before + 3
    buffer.end(a, True)
    buffer.end(b, True)
    assert names(out) == ["a"] * 3 + ["b"] * 2 and buffer.held == 0


def test_a_provider_given_without_a_buffer_still_exports_records():
    provider = TracerProvider()
    out = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(out))
    buffer = span_trees.for_provider(provider, SCOPE)
    assert buffer is not None and not buffer.in_path
    tree = buffer.open(0x44)
    with provider.get_tracer("user").start_as_current_span("user", context=under(4, 0x44)):
        pass  # not in this buffer's path: exported as it ends
    buffer.end(tree, True, span_records.readable_all([Rec("root", 4, 0x44, 0, 1, {})], buffer.resource, SCOPE))
    assert names(out) == ["root", "user"]
    assert span_trees.for_provider(trace.NoOpTracerProvider(), SCOPE) is None


# ------------------------------------------------------------------------------ records and the wire
def test_a_record_becomes_the_span_the_sdk_would_have_made():
    rec = Rec("r", 7, 8, 9, 100, {"k": "v"}, trace.SpanKind.CLIENT)
    rec.parent_remote = True
    rec.end_ns = 250
    try:
        raise ValueError("boom")
    except ValueError as exc:
        rec.error(exc, 200)
    span = span_records.to_readable(rec, Resource({"x": 1}), SCOPE)
    assert (span.context.trace_id, span.context.span_id, span.parent.span_id) == (7, 8, 9)
    assert span.parent.is_remote and span.context.trace_flags.sampled
    assert span.kind == trace.SpanKind.CLIENT and (span.start_time, span.end_time) == (100, 250)
    assert span.status.status_code == trace.StatusCode.ERROR and "boom" in span.status.description
    (event,) = span.events
    assert event.name == "exception" and event.attributes["exception.type"] == "ValueError"
    assert "raise ValueError" in event.attributes["exception.stacktrace"]


def test_a_hand_back_round_trips_through_pickle(pipeline):
    buffer, tracer, out = pipeline
    tree = buffer.open(0x55)
    ctx = context.attach(under(5, 0x55))
    try:
        with tracer.start_as_current_span("user", attributes={"tags": ["a", "b"], "n": 3}) as s:
            s.add_event("e", {"x": 1.5})
    finally:
        context.detach(ctx)
    rec = Rec("ours", 5, 0x55, 0x66, 1, {"a": True})
    rec.parent_remote = True
    wire = pickle.loads(pickle.dumps(span_records.to_wire([rec], buffer.take(tree), Resource({"who": "reward"}))))
    resource, recs = span_records.from_wire(wire, trace_id=5)
    assert resource.attributes["who"] == "reward"
    by_name = {r.name: r for r in recs}
    assert by_name["ours"].parent_id == 0x66 and by_name["ours"].parent_remote
    user = span_records.to_readable(by_name["user"], resource, SCOPE)
    assert user.parent.span_id == 0x55 and user.instrumentation_scope.name == "user"
    assert dict(user.attributes) == {"tags": ("a", "b"), "n": 3}
    assert [(e.name, dict(e.attributes)) for e in user.events] == [("e", {"x": 1.5})]


@pytest.mark.parametrize(
    "data",
    [None, "x", (2, {}, "", []), (1, [], "", []), (1, {}, 5, []), [1, {}, "", "spans"], (1, {}, "", [("short",)])],
)
def test_a_hand_back_that_is_not_one_yields_nothing(data):
    found = span_records.from_wire(data, trace_id=5)
    assert found is None or found[1] == []


def test_a_hand_back_keeps_only_well_formed_spans_of_its_trace_and_values():
    good = span_records._rec_wire(Rec("ok", 5, 1, 2, 10, {"k": 1}))
    other_trace = span_records._rec_wire(Rec("theirs", 6, 1, 2, 10, {}))
    bad_times = list(good)
    bad_times[6], bad_times[7] = 20, 10  # ends before it starts
    bad_id = list(good)
    bad_id[2] = 1 << 64
    odd_values = list(good)
    odd_values[8] = {"ok": "v", "obj": object(), "mixed": [1, "a"], 3: "key not a string", "big": "x" * 100000}
    _, recs = span_records.from_wire(
        (1, {"service.name": "r", "bad": {}}, "", [good, other_trace, bad_times, bad_id, odd_values]), trace_id=5
    )
    assert [r.name for r in recs] == ["ok", "ok"]
    assert recs[1].attributes == {"ok": "v", "big": "x" * span_records.MAX_TEXT}


@pytest.mark.parametrize(
    ("sampler", "by_parent"),
    [
        ("default", True),  # the SDK's default: ParentBased(ALWAYS_ON)
        ("always_on", False),  # records roots and children of unsampled parents alike
        ("ratio", False),
        ("parentbased_off", False),
    ],
)
def test_only_the_sdks_default_sampler_is_decided_by_the_parent_alone(sampler, by_parent):
    """A trajectory's record asks the provider's sampler unless it is the SDK's default, whose
    answer is the parent's flag (``hooks/rollout/trajectory``): any other sampler is asked."""
    from opentelemetry.sdk.trace import sampling

    made = {
        "default": None,
        "always_on": sampling.ALWAYS_ON,
        "ratio": sampling.ParentBased(sampling.TraceIdRatioBased(0.5)),
        "parentbased_off": sampling.ParentBased(sampling.ALWAYS_OFF),
    }[sampler]
    provider = TracerProvider() if made is None else TracerProvider(sampler=made)
    buffer = span_trees.for_provider(provider, InstrumentationScope("t"))
    assert buffer is not None and buffer.by_parent is by_parent
    buffer.sampler = sampling.ALWAYS_OFF  # set later (tests, a provider's sampler replaced): re-judged
    assert buffer.by_parent is False
