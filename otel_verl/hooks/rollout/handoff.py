"""How the step's trace context reaches the agent-loop workers (TaskRunner -> Ray -> worker).

* v0: the TaskRunner puts the ``gen`` stage's context into the ``DataProto`` handed to
  ``AgentLoopManager.generate_sequences``; ``AgentLoopWorker.generate_sequences`` takes it out
  again (verl never sees it) and opens ``verl.rollout.generate``, so each step's trace holds its
  trajectories. The manager method is verl's ``auto_await`` (it looks at its caller's frame to
  decide whether to return a coroutine), so it is not wrapped: the undecorated coroutine function
  is wrapped and decorated again with verl's own ``auto_await``, which then sees the real caller.
* v1 dispatches fire-and-forget (``AgentLoopManagerTQ.generate_sequences``) and may train on a
  trajectory at a later step, so trajectories are roots of their own traces, each with one span
  *link* (attribute ``verl.step`` = submit step) to the ``verl.gen`` span of the step that
  submitted it. verl submits a step's prompts in ``prepare_step``, under ``verl.step`` and before
  that step's ``gen`` stage starts: the TaskRunner fixes the id that ``verl.gen`` span will get
  (``propagation.promise_span_id``) and sends it in the ``TensorDict`` as a carrier (refills during
  ``gen`` send ``gen`` itself; validation sends the current span). The worker's
  ``AgentLoopWorkerTQ.generate_sequences`` takes it out before verl's code runs (else the first
  ``_run_agent_loop`` call that sees it as a keyword does); the spawned tasks inherit the link.
  A dispatch outside any span (async warm-up before step 1) has no link.
"""

from __future__ import annotations

import functools
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind

from otel_verl import propagation, semconv
from otel_verl._safe import safe
from otel_verl._values import as_int
from otel_verl.hooks.rollout import state as rs
from otel_verl.hooks.spans import SpanState, call_traced, call_traced_async, close_span, open_span
from otel_verl.hooks.verl_async import around_auto_await
from otel_verl.process.state import PROCESS


# ------------------------------------------------------------------------------ TaskRunner: v0
@safe("rollout carrier inject")
def _inject(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if PROCESS.trainer is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    prompts = kwargs.get("prompts", args[0] if args else None)
    if type(prompts).__name__ != "DataProto" or not propagation.inject(prompts):
        return None
    return prompts


@safe("rollout carrier cleanup")
def _take(prompts: Any, result: Any = None, error: BaseException | None = None) -> None:
    propagation.take(prompts)


def traced_manager_generate(original: Any) -> Any:
    """The replacement of ``AgentLoopManager.generate_sequences`` (``auto_await(async def ...)``),
    or None when it no longer has that shape (the hook then says so once and stays off)."""

    def build(inner: Any) -> Any:
        @functools.wraps(inner)
        def generate_sequences(self: Any, *args: Any, **kwargs: Any) -> Any:
            prompts = _inject(args, kwargs)  # now, in the caller's thread and context
            coro = inner(self, *args, **kwargs)
            if prompts is None:
                return coro

            async def run() -> Any:
                try:
                    return await coro
                finally:
                    _take(prompts)

            return run()

        return generate_sequences

    return around_auto_await(original, build)


# ------------------------------------------------------------------------------ TaskRunner: v1
@safe("rollout v1 link target")
def _v1_link_context() -> Any:
    """The context a v1 dispatch sends: the ``verl.gen`` span of the current step (promised when
    the dispatch runs under ``verl.step``, before that stage starts), else the current span."""
    if PROCESS.trainer is None:
        return None
    span = trace.get_current_span()
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None  # outside any span (async warm-up before the first step): no link
    if getattr(span, "name", None) == semconv.SPAN_STEP:
        span_id = propagation.promise_span_id(PROCESS.telemetry.tracer, ctx.trace_id, semconv.SPAN_GEN)
        if span_id is not None:
            ctx = SpanContext(ctx.trace_id, span_id, False, ctx.trace_flags, ctx.trace_state)
    return trace.set_span_in_context(NonRecordingSpan(ctx))


@safe("rollout v1 carrier inject")
def _inject_v1(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    prompts = kwargs.get("prompts", args[0] if args else None)
    if type(prompts).__name__ != "TensorDict":
        return None
    context = _v1_link_context()
    if context is None or not propagation.inject(prompts, context):
        return None
    return prompts


def manager_tq_generate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``AgentLoopManagerTQ.generate_sequences`` (TaskRunner, plain method): the carrier rides in the
    prompts for this call only (``prompts.chunk`` copies it into every worker's chunk)."""
    return call_traced(_inject_v1(args, kwargs), _take, wrapped, *args, **kwargs)


# ------------------------------------------------------------------------------ agent-loop worker
@safe("rollout v1 carrier keyword")
def link_from(value: Any) -> SpanContext | None:
    """The span a carrier value points at, if valid."""
    context = propagation.extract(value)
    if context is None:
        return None
    link = trace.get_current_span(context).get_span_context()
    return link if link.is_valid else None


def _take_link(batch: Any) -> SpanContext | None:
    if type(batch).__name__ != "TensorDict" or propagation.CARRIER_KEY not in batch.keys():
        return None
    context = propagation.take(batch)
    link = trace.get_current_span(context).get_span_context() if context is not None else None
    return link if link is not None and link.is_valid else None


def _batch_span(batch: Any) -> SpanState | None:
    parent = propagation.take(batch) if type(batch).__name__ == "DataProto" else None
    if parent is None:
        return None  # not dispatched from a traced step: trajectories still get their own spans
    meta = getattr(batch, "meta_info", {}) or {}
    attrs: dict[str, Any] = {semconv.ATTR_ROLLOUT_VALIDATE: bool(meta.get("validate", False))}
    step = as_int(meta.get("global_steps"))
    if step is not None:
        attrs[semconv.ATTR_ROLLOUT_SUBMIT_STEP] = step
    try:
        attrs[semconv.ATTR_ROLLOUT_BATCH_SIZE] = len(batch)
    except Exception:  # noqa: BLE001
        pass
    return open_span(semconv.SPAN_ROLLOUT_BATCH, context=parent, kind=SpanKind.SERVER, attributes=attrs)


@safe("rollout dispatch received")
def _received(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[SpanState | None, Any, Any] | None:
    """v0: the ``verl.rollout.generate`` span (current while verl runs); v1: the link its tasks inherit."""
    rs.identify()
    batch = kwargs.get("batch", args[0] if args else None)
    opened = _batch_span(batch)
    if opened is not None:
        return opened, rs.BATCH_SPAN, rs.BATCH_SPAN.set(opened[0])
    link = _take_link(batch)
    if link is not None:
        return None, rs.LINK, rs.LINK.set(link)
    return None


@safe("rollout dispatch done")
def _done(state: tuple[SpanState | None, Any, Any], result: Any, error: BaseException | None) -> None:
    opened, var, token = state
    var.reset(token)
    if opened is not None:
        close_span(opened, error=error)
        PROCESS.telemetry.request_flush()


async def worker_generate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return await call_traced_async(_received(args, kwargs), _done, wrapped, *args, **kwargs)
