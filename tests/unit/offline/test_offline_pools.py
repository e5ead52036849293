"""``otel_verl.offline.pools``: a replica is busy while any LLM call is in flight on it."""

from __future__ import annotations

import pytest

from otel_verl import semconv
from otel_verl.offline.otlp_files import SpanRecord
from otel_verl.offline.pools import replica_busy_seconds, replica_idle_ratio

S = 1_000_000_000


def _call(server: str, start: float, end: float, name: str = semconv.SPAN_ROLLOUT_LLM_CALL) -> SpanRecord:
    attrs = {semconv.ATTR_ROLLOUT_SERVER_ID: server}
    return SpanRecord(name, "t", f"{server}{start}", "", int(start * S), int(end * S), attrs, {}, "UNSET")


def test_overlapping_calls_count_once_and_are_clipped_to_the_window():
    spans = [
        _call("a", 0.0, 2.0),
        _call("a", 1.0, 3.0),  # overlaps the first: a is busy 0-3
        _call("a", 5.0, 6.0),
        _call("b", 9.0, 12.0),  # clipped to the window's end (10)
        _call("c", 11.0, 12.0),  # outside the window
        _call("a", 7.0, 8.0, name="verl.rollout.trajectory"),  # not an LLM call
    ]
    busy = replica_busy_seconds(spans, 0, 10 * S)
    assert busy == pytest.approx({"a": 4.0, "b": 1.0})
    idle = replica_idle_ratio(spans, 0, 10 * S, ["a", "b", "c"])
    assert idle == pytest.approx({"a": 0.6, "b": 0.9, "c": 1.0})
