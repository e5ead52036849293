"""Reward scoring in verl's reward-loop workers: the span user reward code runs under.

verl scores each trajectory in a ``RewardLoopWorker`` actor (its own process): the agent-loop
worker's ``_compute_score`` builds a one-trajectory ``DataProto`` from its per-sample kwargs and
calls ``RewardLoopWorker.compute_score`` over Ray, which runs the reward manager and the user's
``reward.custom_reward_function``. No otel-verl span is current there unless one is carried in:

* caller side (``carry``, in ``trajectory.compute_score_wrapper``): the context of the
  trajectory (its ``verl.rollout.trajectory`` span + the step as baggage) goes into the
  per-sample kwargs, which verl copies into the ``DataProto``'s ``non_tensor_batch``;
* worker side (``compute_score_wrapper``): the carrier is taken out before verl's code sees the
  data, and ``verl.reward_worker.compute_score`` is opened as its child, so a span the user's
  reward function starts with the plain API is in the step's trace.

Whether a trajectory's tree is exported is decided in its agent-loop worker when the trajectory
(or its step) has ended, after this call returned (``trajectory``), so a carrier marked *deferred*
(``propagation.carrier_value(defer=True)``) asks this worker to hand its spans back instead of
exporting them: ``verl.reward_worker.compute_score`` is then a record, the spans user code starts
under it are held in this process's ``TreeBuffer``, and when the call returns they all go back
with verl's reply, under ``HANDBACK_KEY`` in its ``reward_extra_info`` (verl's ``_compute_score``
stores that dict on the trajectory's output, where ``take_handback`` takes the key out again
before verl's code reads it). A span under it that ends after the call returned is dropped. A
scoring call that fails exports its spans from here (its trajectory fails too, and failed ones
are always kept). A reply that cannot carry them (no ``reward_extra_info`` dict) loses them.

verl's reward managers run a synchronous reward function in the event loop's default executor
(``loop.run_in_executor``), where the context does not follow (asyncio copies it only into
tasks): in a reward worker, ``ThreadPoolExecutor.submit`` hands the submitter's OpenTelemetry
context to the job (what opentelemetry-instrumentation-threading does; patched there only).

The reward worker has no step boundary of its own: the first call of a new step exports the
metrics recorded so far (so a user gauge set once per step exports every step's value), and so
does the worker whenever its last running call ends (the last step has no next one;
``otel_verl.process.idle_export``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext

from otel_verl import patches, per_process, propagation, semconv, step_context
from otel_verl._safe import safe
from otel_verl.hooks.rollout import span_records
from otel_verl.hooks.rollout.span_records import Rec
from otel_verl.hooks.rollout.state import new_id
from otel_verl.hooks.spans import SpanState, close_span, open_span
from otel_verl.process import worker_metrics
from otel_verl.process.idle_export import IdleExport
from otel_verl.process.state import PROCESS

HANDBACK_KEY = "_otel_verl_spans"  # in the reply's reward_extra_info: this worker's spans of a deferred tree


@safe("reward carrier")
def carry(args: tuple[Any, ...], kwargs: dict[str, Any], defer: bool = False) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``AgentLoopWorker._compute_score(outputs, kwargs)`` arguments with the current context in
    a copy of the per-sample kwargs (verl's own dict is left as it was); ``defer``: the reward
    worker hands its spans back (the trajectory's tree is decided later)."""
    if len(args) > 1 and isinstance(args[1], dict):
        sample = args[1]
        args = (args[0], _with_carrier(sample, defer), *args[2:])
    elif isinstance(kwargs.get("kwargs"), dict):
        kwargs = {**kwargs, "kwargs": _with_carrier(kwargs["kwargs"], defer)}
    return args, kwargs


def _with_carrier(sample: dict[str, Any], defer: bool) -> dict[str, Any]:
    value = propagation.carrier_value(defer=defer)
    return sample if value is None else {**sample, propagation.CARRIER_KEY: value}


def take_handback(outputs: Any) -> Any:
    """The reward worker's spans that a scoring reply carried (wire data), taken out of the
    trajectory's last output; None when there are none."""
    if not outputs:
        return None
    extra = getattr(outputs[-1], "extra_fields", None)
    info = extra.get("reward_extra_info") if isinstance(extra, dict) else None
    return info.pop(HANDBACK_KEY, None) if isinstance(info, dict) else None


class _RewardWorker:
    """Per-process state of a reward-loop worker."""

    def __init__(self) -> None:
        self.identified = False
        self.last_step: int | None = None  # the step of the last trajectory scored
        self.calls = IdleExport()  # compute_score calls running (the event loop runs many at once)


_STATE = _RewardWorker()


def _forget() -> None:
    global _STATE
    _STATE = _RewardWorker()


per_process.register(__name__, reset=_forget)


class _Call:
    """One scoring call: its span (live) or, for a deferred tree, its record and tree."""

    __slots__ = ("state", "rec", "tree", "token")

    def __init__(self) -> None:
        self.state: SpanState | None = None
        self.rec: Rec | None = None
        self.tree: Any = None
        self.token: Any = None


@safe("reward worker span start")
def _start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call | None:
    data = kwargs.get("data", args[0] if args else None)
    parent, defer = propagation.take_from_batch_deferred(data)
    if not _STATE.identified:
        _STATE.identified = True
        if PROCESS.trainer is None:  # a colocated reward worker keeps the TaskRunner's role
            PROCESS.identify(role=semconv.ROLE_REWARD_WORKER)
            worker_metrics.ensure_worker_metrics()  # process.* gauges, like the agent-loop workers
        carry_context_into_executors()
    step = step_context.current_step(parent) if parent is not None else None
    if step is not None and step != _STATE.last_step:
        if _STATE.last_step is not None:
            # the previous step's values, before this step records any (its spans went when it was idle)
            PROCESS.telemetry.mark_step()
        _STATE.last_step = step
    attrs: dict[str, Any] = {}
    if step is not None:
        attrs[semconv.ATTR_STEP] = step
    call = _Call()
    trees = PROCESS.telemetry.trees
    up = trace.get_current_span(parent).get_span_context() if parent is not None else None
    if defer and trees is not None and up is not None and up.is_valid and up.trace_flags.sampled:
        call.rec = Rec(semconv.SPAN_REWARD_WORKER, up.trace_id, new_id(), up.span_id, time.time_ns(), attrs)
        call.rec.parent_remote = True
        call.tree = trees.open(call.rec.span_id)
        ctx = SpanContext(up.trace_id, call.rec.span_id, False, up.trace_flags, up.trace_state)
        call.token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(ctx), parent))
    else:
        call.state = open_span(semconv.SPAN_REWARD_WORKER, context=parent, attributes=attrs)
    _STATE.calls.begin()
    return call


@safe("executor context")
def carry_context_into_executors() -> None:
    import concurrent.futures.thread as cft

    if not _calls_with_context(cft.ThreadPoolExecutor.submit):
        patches.wrap(cft.ThreadPoolExecutor, "submit", _submit_wrapper)  # undone by uninstrument()


def _calls_with_context(submit: Any) -> bool:
    return isinstance(submit, wrapt.FunctionWrapper) and getattr(submit, "_self_wrapper", None) is _submit_wrapper


def _submit_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    ctx = otel_context.get_current()
    if not args or not ctx:
        return wrapped(*args, **kwargs)
    return wrapped(_in_context(ctx, args[0]), *args[1:], **kwargs)


def _in_context(ctx: otel_context.Context, fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        token = otel_context.attach(ctx)
        try:
            return fn(*args, **kwargs)
        finally:
            otel_context.detach(token)

    return run


@safe("reward worker span end")
def _end(call: _Call, result: Any, error: BaseException | None) -> Any:
    """End the call's span; a deferred tree's spans go back in (a copy of) verl's ``result``."""
    try:
        if call.state is not None:
            close_span(call.state, error=error)
            return None
        otel_context.detach(call.token)
        return _hand_back(call, result, error)
    finally:
        _STATE.calls.end()  # idle: the last step has no next step to mark its end


def _hand_back(call: _Call, result: Any, error: BaseException | None) -> Any:
    rec, trees = call.rec, PROCESS.telemetry.trees
    if rec is None or trees is None:
        return None
    rec.end_ns = max(time.time_ns(), rec.start_ns)
    if error is not None:
        rec.error(error, rec.end_ns)
    info = result.get("reward_extra_info") if isinstance(result, dict) else None
    if error is not None or not isinstance(info, dict):
        # a failed call fails its trajectory, whose tree is kept: export here, where the spans are
        spans = span_records.readable_all([rec], trees.resource, trees.scope)
        trees.end(call.tree, error is not None, spans)
        return None
    data = span_records.to_wire([rec], trees.take(call.tree), trees.resource)
    return {**result, "reward_extra_info": {**info, HANDBACK_KEY: data}}


async def compute_score_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``RewardLoopWorker.compute_score(data)``: one trajectory's score, user code included."""
    call = _start(args, kwargs)
    if call is None:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        _end(call, None, exc)
        raise
    handed = _end(call, result, None)
    return result if handed is None else handed
