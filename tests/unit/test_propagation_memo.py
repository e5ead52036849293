"""The carrier's baggage header, encoded and parsed once per distinct value, says what the SDK's
propagators say (``otel_verl.propagation``)."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import baggage, trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from otel_verl import propagation


def _context(step: str = "7") -> Context:
    span = NonRecordingSpan(SpanContext(0xABC, 0xDEF, False, TraceFlags(1), TraceState([("k", "v")])))
    ctx = trace.set_span_in_context(span)
    ctx = baggage.set_baggage("verl.step", step, ctx)
    return baggage.set_baggage("a b", "x=y,z", ctx)


def _seen(ctx: Context) -> tuple[Any, dict[str, object]]:
    return trace.get_current_span(ctx).get_span_context(), dict(baggage.get_all(ctx))


@pytest.mark.parametrize("step", ["7", "8"])
def test_the_memoised_carrier_is_the_propagators_own_and_reads_back_the_same(step: str) -> None:
    for _ in range(2):  # the second time from the memo
        theirs: dict[str, str] = {}
        propagation._PROPAGATOR.inject(theirs, context=_context(step))
        ours: dict[str, str] = {}
        propagation._inject(ours, _context(step))
        assert ours == theirs
        assert _seen(propagation._extract(ours)) == _seen(propagation._PROPAGATOR.extract(theirs))


@pytest.mark.parametrize(
    "carrier",
    [
        {},
        {"baggage": ""},
        {"baggage": ["verl.step=3"]},
        {"baggage": "verl.step=3", "traceparent": "not a traceparent"},
        {"traceparent": "00-00000000000000000000000000000abc-0000000000000def-01"},
        {"baggage": "%%%=1,ok=2", "traceparent": "00-00000000000000000000000000000abc-0000000000000def-00"},
        {"baggage": "k=" + "v" * 9000},
    ],
)
def test_any_carrier_reads_as_the_propagators_read_it(carrier: dict[str, Any]) -> None:
    for _ in range(2):
        assert _seen(propagation._extract(carrier)) == _seen(propagation._PROPAGATOR.extract(carrier))


def test_no_baggage_no_header_and_the_memo_stays_bounded() -> None:
    ours: dict[str, str] = {}
    propagation._inject(ours, trace.set_span_in_context(NonRecordingSpan(SpanContext(1, 2, False, TraceFlags(1)))))
    assert set(ours) == {"traceparent"}
    for step in range(3 * propagation._MAX_MEMO):
        propagation._extract(propagation.json.loads(propagation.carrier_value(_context(str(step)))))
    assert len(propagation._baggage_in) <= propagation._MAX_MEMO
    assert len(propagation._baggage_out) <= propagation._MAX_MEMO
    propagation._extract({"baggage": "k=" + "v" * 9000})
    assert all(len(header) <= propagation._MAX_MEMO_HEADER for header in propagation._baggage_in)
