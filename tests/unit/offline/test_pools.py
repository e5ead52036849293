"""``otel_verl.offline.facts.pools``: a replica is busy while any LLM call is in flight on it."""

from __future__ import annotations

import pytest

from otel_verl import semconv
from otel_verl.offline.facts.pools import replica_busy_seconds, replica_idle_ratio
from otel_verl.offline.otlp_files import SpanRecord

S = 1_000_000_000


# An LLM call's span as otel-verl writes it (GenAI conventions' name and operation, its own step).
OURS = {semconv.GEN_AI_OPERATION_NAME: semconv.GEN_AI_OPERATION_TEXT_COMPLETION, semconv.ATTR_ROLLOUT_SUBMIT_STEP: 1}


def _call(server: str, start: float, end: float, name: str = "", **attrs) -> SpanRecord:
    """An LLM call's span as otel-verl writes it; with a ``name``, a span of that name and ``attrs`` alone."""
    attrs = {semconv.ATTR_ROLLOUT_SERVER_ID: server, **(attrs if name else OURS)}
    name = name or semconv.llm_call_span_name("m")
    return SpanRecord(name, "t", f"{server}{start}", "", int(start * S), int(end * S), attrs, {}, "UNSET")


def test_overlapping_calls_count_once_and_are_clipped_to_the_window():
    spans = [
        _call("a", 0.0, 2.0),
        _call("a", 1.0, 3.0, name=semconv.LEGACY_SPAN_ROLLOUT_LLM_CALL),  # as older otel-verl named it: a is busy 0-3
        _call("a", 5.0, 6.0),
        _call("b", 9.0, 12.0),  # clipped to the window's end (10)
        _call("c", 11.0, 12.0),  # outside the window
        _call("a", 7.0, 8.0, name=semconv.SPAN_ROLLOUT_TRAJECTORY),  # not an LLM call
        # GenAI spans that are not otel-verl's LLM calls: a user's own client, the engine's request, a tool
        _call("a", 8.0, 9.0, name="text_completion m", **{semconv.GEN_AI_OPERATION_NAME: "text_completion"}),
        _call("a", 8.0, 9.0, name=semconv.SPAN_ENGINE_REQUEST),
        _call("a", 8.0, 9.0, name="execute_tool t", **{**OURS, semconv.GEN_AI_OPERATION_NAME: "execute_tool"}),
    ]
    busy = replica_busy_seconds(spans, 0, 10 * S)
    assert busy == pytest.approx({"a": 4.0, "b": 1.0})
    idle = replica_idle_ratio(spans, 0, 10 * S, ["a", "b", "c"])
    assert idle == pytest.approx({"a": 0.6, "b": 0.9, "c": 1.0})
