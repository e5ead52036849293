"""An exception raised inside a verl stage reaches verl's caller exactly as without otel-verl.

verl's own ``marked_timer`` (-> ``verl.utils.profiler.performance._timer``, which otel-verl wraps)
around a failing stage, once instrumented and once not: the caller gets the same exception object
type, message, args, cause, and the same traceback frames (file, function, line); the stage and
step spans carry it (status ERROR, one ``exception`` event with type, message and the stack).
"""

from __future__ import annotations

import traceback

import pytest
from opentelemetry.trace import StatusCode

from otel_verl import VerlInstrumentor, semconv


class RolloutServerError(RuntimeError):
    """Stands in for an error of verl's rollout (a subclass, to see the exact type survive)."""


def _generate(batch: list[int]) -> list[int]:
    try:
        return [1 // (x - 2) for x in batch]
    except ZeroDivisionError as cause:
        raise RolloutServerError("replica 0 lost", {"batch": len(batch)}) from cause


def _fit_step(timing: dict[str, float]) -> None:
    """What verl's fit does around a stage."""
    from verl.utils.profiler import marked_timer

    with marked_timer("step", timing):
        with marked_timer("gen", timing):
            _generate([0, 1, 2, 3])


def _call() -> tuple[BaseException, list[tuple[str, str, int | None]], dict[str, float]]:
    timing: dict[str, float] = {}
    with pytest.raises(RolloutServerError) as info:
        _fit_step(timing)
    frames = [(f.filename, f.name, f.lineno) for f in traceback.extract_tb(info.value.__traceback__)]
    return info.value, frames, timing


def test_stage_error_reaches_the_caller_unchanged_and_is_on_the_spans(captured, v0_trainer):
    traced, traced_frames, traced_timing = _call()
    spans = {s.name: s for s in captured.finished()}

    VerlInstrumentor().uninstrument()
    plain, plain_frames, plain_timing = _call()
    assert captured.finished() == list(spans.values())  # no new span: really uninstrumented

    assert type(traced) is type(plain) is RolloutServerError
    assert traced.args == plain.args == ("replica 0 lost", {"batch": 4})
    assert type(traced.__cause__) is type(plain.__cause__) is ZeroDivisionError
    assert traced_frames == plain_frames  # same frames, no otel-verl frame added or lost
    assert [name for _, name, _ in traced_frames][-2:] == ["_fit_step", "_generate"]
    assert not any("otel_verl" in filename for filename, _, _ in traced_frames)
    assert traced_timing == plain_timing == {}  # verl's timing dict is left as verl leaves it

    for name in (semconv.SPAN_STEP, "verl.gen"):
        span = spans[name]
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "RolloutServerError: ('replica 0 lost', {'batch': 4})"
        (event,) = [e for e in span.events if e.name == "exception"]
        assert event.attributes["exception.type"].endswith("RolloutServerError")
        assert event.attributes["exception.message"] == str(traced)
        assert "_generate" in event.attributes["exception.stacktrace"]
        assert "ZeroDivisionError" in event.attributes["exception.stacktrace"]  # the cause too
    assert spans["verl.gen"].parent.span_id == spans[semconv.SPAN_STEP].context.span_id
