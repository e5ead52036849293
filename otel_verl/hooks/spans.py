"""The one shape of every traced call: open a span, run verl's code, close it.

verl's result or exception always passes through unchanged; a verl exception is recorded on the
span (``exception`` event, status ERROR). Start functions are fail-safe (``@safe``) and return
None for "not traced"; end functions receive ``(state, result, error)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from otel_verl import step_context
from otel_verl.process.state import PROCESS

SpanState = tuple[Span, object]  # a started span and the context token that made it current
End = Callable[[Any, Any, BaseException | None], None]


def record_error(span: Span | None, error: BaseException | None, *, exception_event: bool = True) -> None:
    """Mark ``span`` ERROR with ``error`` (and its ``exception`` event unless told otherwise)."""
    if span is None or error is None:
        return
    if exception_event:
        span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


def end_span(span: Span, error: BaseException | None) -> None:
    """End ``span``; a verl error is recorded on it."""
    record_error(span, error)
    span.end()


def start_span(
    name: str,
    *,
    context: otel_context.Context | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: dict[str, Any] | None = None,
    links: list[Link] | None = None,
    start_time: int | None = None,
) -> Span:
    """Start ``name`` with this process's tracer (not made current); ``start_time`` in ns, default now."""
    return PROCESS.telemetry.tracer.start_span(
        name, context=context, kind=kind, attributes=attributes, links=links, start_time=start_time
    )


def open_span(
    name: str,
    *,
    context: otel_context.Context | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: dict[str, Any] | None = None,
    step: int | None = None,
    epoch: int | None = None,
) -> SpanState:
    """Start ``name`` with this process's tracer and make it the current span; ``step``/``epoch``
    go into the context too, for user code (``otel_verl.step_context``)."""
    span = start_span(name, context=context, kind=kind, attributes=attributes)
    current = trace.set_span_in_context(span, context)  # on top of its parent's context: its baggage too
    if step is not None:
        current = step_context.with_step(step, epoch, current)
    return span, otel_context.attach(current)


def close_span(state: SpanState, result: Any = None, error: BaseException | None = None) -> None:
    """Undo :func:`open_span`: restore the previous context, then end the span."""
    span, token = state
    otel_context.detach(token)  # type: ignore[arg-type]
    end_span(span, error)


def call_traced(state: Any, end: End, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, then ``end(state, result, error)``; ``state`` None: not traced."""
    if state is None:
        return fn(*args, **kwargs)
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        end(state, None, exc)
        raise
    end(state, result, None)
    return result


async def call_traced_async(state: Any, end: End, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """:func:`call_traced` for a coroutine function (the wrapper stays a coroutine)."""
    if state is None:
        return await fn(*args, **kwargs)
    try:
        result = await fn(*args, **kwargs)
    except BaseException as exc:
        end(state, None, exc)
        raise
    end(state, result, None)
    return result
