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

The TaskRunner's side of each dispatch is a ``verl.rollout.dispatch`` span (CLIENT) covering the
whole call, so that the time before the workers start on the batch is visible as such (a cold or
busy worker), and counted as the step's ``waiting`` (``accounting``), as a ``verl.wait`` child:

* v0: the dispatch span is the workers' ``verl.rollout.generate`` parent (the carrier holds it).
  Each worker reports when it started the batch in its reply's ``meta_info`` (a key of its own,
  ``STARTED_KEY`` + its pid, so that verl's ``DataProto.concat``, which asserts that workers agree
  on every key, never sees two values of one); the TaskRunner's hook on ``DataProto.concat``,
  active only inside a traced dispatch, takes those keys out before verl merges the replies. The
  wait is from the dispatch to the first worker's start (``verl.rollout.queued``; the last one's:
  ``verl.rollout.queued_max``).
* v1: the call only hands the batch over (the workers spawn its rollouts and return), so all of it
  is the wait for the workers to take it.
"""

from __future__ import annotations

import contextvars
import functools
import os
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind

from otel_verl import propagation, semconv
from otel_verl._safe import safe
from otel_verl._values import as_int
from otel_verl.hooks import accounting
from otel_verl.hooks.accounting import ACCOUNT
from otel_verl.hooks.rollout import state as rs
from otel_verl.hooks.spans import SpanState, call_traced, call_traced_async, close_span, end_span, open_span, start_span
from otel_verl.hooks.verl_async import around_auto_await
from otel_verl.process.state import PROCESS

STARTED_KEY = "_otel_verl_started_"  # + the worker's pid, in a v0 worker's reply meta_info: when it began (ns)
SOURCE_V0 = "agent_loop.generate_sequences"
SOURCE_V1 = "agent_loop_tq.generate_sequences"


class Dispatch:
    """One traced dispatch to the agent-loop workers (TaskRunner)."""

    __slots__ = ("span", "start_ns", "start", "prompts", "starts", "outermost")

    def __init__(self, span: Span, prompts: Any) -> None:
        self.span = span
        self.start_ns = getattr(span, "start_time", None) or time.time_ns()  # as the trace shows it
        self.start = accounting.clock()
        self.prompts = prompts
        self.starts: list[int] = []  # v0: when each worker began the batch (its wall clock, ns)
        self.outermost: bool | None = None  # v1: what ACCOUNT.wait_started said at the start


DISPATCH: contextvars.ContextVar[Dispatch | None] = contextvars.ContextVar("otel_verl_dispatch", default=None)


def _open_dispatch(prompts: Any, workers: int | None, context: Any = None) -> Span:
    attrs: dict[str, Any] = {}
    try:
        attrs[semconv.ATTR_ROLLOUT_BATCH_SIZE] = len(prompts)
    except Exception:  # noqa: BLE001
        pass
    if workers is not None:
        attrs[semconv.ATTR_ROLLOUT_WORKERS] = workers
    return start_span(semconv.SPAN_ROLLOUT_DISPATCH, context=context, kind=SpanKind.CLIENT, attributes=attrs)


def _wait_span(d: Dispatch, seconds: float, source: str) -> None:
    """The part of the dispatch spent waiting for the workers, as a ``verl.wait`` child, and as the step's waiting."""
    end_ns = d.start_ns + int(seconds * 1e9)
    wait = start_span(
        semconv.SPAN_WAIT,
        context=trace.set_span_in_context(d.span),
        attributes={semconv.ATTR_WAIT_FOR: semconv.WAIT_AGENT_LOOP_WORKERS, semconv.ATTR_WAIT_SOURCE: source},
        start_time=d.start_ns,
    )
    wait.end(end_time=end_ns)
    ACCOUNT.wait_ended(seconds, d.outermost)


def _workers(instance: Any) -> int | None:
    workers = getattr(instance, "agent_loop_workers", None)
    return len(workers) if isinstance(workers, list) else None


# ------------------------------------------------------------------------------ TaskRunner: v0
@safe("rollout dispatch start")
def _inject(instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Dispatch | None:
    if PROCESS.trainer is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    prompts = kwargs.get("prompts", args[0] if args else None)
    if type(prompts).__name__ != "DataProto":
        return None
    span = _open_dispatch(prompts, _workers(instance))
    if not propagation.inject(prompts, trace.set_span_in_context(span)):
        span.end()
        return None
    return Dispatch(span, prompts)


@safe("rollout dispatch end")
def _dispatch_done(d: Dispatch, result: Any = None, error: BaseException | None = None) -> None:
    propagation.take(d.prompts)
    elapsed = max(0.0, accounting.clock() - d.start)
    if d.starts:
        first, last = (min(max(0.0, (t - d.start_ns) / 1e9), elapsed) for t in (min(d.starts), max(d.starts)))
        d.span.set_attributes({semconv.ATTR_ROLLOUT_QUEUED: first, semconv.ATTR_ROLLOUT_QUEUED_MAX: last})
        if first > 0:
            _wait_span(d, first, SOURCE_V0)  # measured after the fact: counted unless inside another wait
    end_span(d.span, error)


def traced_manager_generate(original: Any) -> Any:
    """The replacement of ``AgentLoopManager.generate_sequences`` (``auto_await(async def ...)``),
    or None when it no longer has that shape (the hook then says so once and stays off)."""

    def build(inner: Any) -> Any:
        @functools.wraps(inner)
        def generate_sequences(self: Any, *args: Any, **kwargs: Any) -> Any:
            d = _inject(self, args, kwargs)  # now, in the caller's thread and context
            coro = inner(self, *args, **kwargs)
            if d is None:
                return coro

            async def run() -> Any:
                token = DISPATCH.set(d)  # for the concat hook, in the task that runs verl's code
                try:
                    result = await coro
                except BaseException as exc:
                    _dispatch_done(d, None, exc)
                    raise
                finally:
                    DISPATCH.reset(token)
                _dispatch_done(d, result)
                return result

            return run()

        return generate_sequences

    return around_auto_await(original, build)


@safe("rollout worker start times")
def _take_starts(d: Dispatch, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    replies = kwargs.get("data", args[0] if args else None)
    for reply in replies if isinstance(replies, list | tuple) else ():
        meta = getattr(reply, "meta_info", None)
        if not isinstance(meta, dict):
            continue
        for key in [k for k in meta if isinstance(k, str) and k.startswith(STARTED_KEY)]:
            value = meta.pop(key)
            if type(value) is int and value > 0:
                d.starts.append(value)


def concat_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``DataProto.concat(data)``: inside a traced v0 dispatch, the workers' start times come out first."""
    d = DISPATCH.get()
    if d is not None:
        _take_starts(d, args, kwargs)
    return wrapped(*args, **kwargs)


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


@safe("rollout v1 dispatch start")
def _inject_v1(instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Dispatch | None:
    prompts = kwargs.get("prompts", args[0] if args else None)
    if type(prompts).__name__ != "TensorDict":
        return None
    context = _v1_link_context()  # before the dispatch span: what the trajectories link to
    if context is None or not propagation.inject(prompts, context):
        return None
    d = Dispatch(_open_dispatch(prompts, _workers(instance)), prompts)
    d.outermost = ACCOUNT.wait_started()
    return d


@safe("rollout v1 dispatch end")
def _dispatch_v1_done(d: Dispatch, result: Any = None, error: BaseException | None = None) -> None:
    propagation.take(d.prompts)
    _wait_span(d, max(0.0, accounting.clock() - d.start), SOURCE_V1)  # the workers taking the batch
    end_span(d.span, error)


def manager_tq_generate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``AgentLoopManagerTQ.generate_sequences`` (TaskRunner, plain method): the carrier rides in the
    prompts for this call only (``prompts.chunk`` copies it into every worker's chunk)."""
    return call_traced(_inject_v1(instance, args, kwargs), _dispatch_v1_done, wrapped, *args, **kwargs)


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
def _received(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[SpanState | None, Any, Any, int] | None:
    """v0: the ``verl.rollout.generate`` span (current while verl runs); v1: the link its tasks inherit."""
    rs.identify()
    batch = kwargs.get("batch", args[0] if args else None)
    opened = _batch_span(batch)
    if opened is not None:
        started = getattr(opened[0], "start_time", None) or time.time_ns()  # as the trace shows it
        return opened, rs.BATCH_SPAN, rs.BATCH_SPAN.set(opened[0]), started
    link = _take_link(batch)
    if link is not None:
        return None, rs.LINK, rs.LINK.set(link), 0
    return None


@safe("rollout dispatch done")
def _done(state: tuple[SpanState | None, Any, Any, int], result: Any, error: BaseException | None) -> None:
    opened, var, token, started = state
    var.reset(token)
    if opened is not None:
        meta = getattr(result, "meta_info", None)
        if type(result).__name__ == "DataProto" and isinstance(meta, dict):
            meta[f"{STARTED_KEY}{os.getpid()}"] = started  # the TaskRunner takes it out (concat_wrapper)
        close_span(opened, error=error)
        PROCESS.telemetry.request_flush()


async def worker_generate_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return await call_traced_async(_received(args, kwargs), _done, wrapped, *args, **kwargs)
