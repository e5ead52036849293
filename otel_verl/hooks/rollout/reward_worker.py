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

from collections.abc import Callable
from typing import Any

import wrapt
from opentelemetry import context as otel_context

from otel_verl import patches, propagation, semconv, step_context
from otel_verl._safe import safe
from otel_verl.hooks.spans import SpanState, call_traced_async, close_span, open_span
from otel_verl.process import worker_metrics
from otel_verl.process.idle_export import IdleExport
from otel_verl.process.state import PROCESS


@safe("reward carrier")
def carry(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``AgentLoopWorker._compute_score(outputs, kwargs)`` arguments with the current context in
    a copy of the per-sample kwargs (verl's own dict is left as it was)."""
    if len(args) > 1 and isinstance(args[1], dict):
        sample = args[1]
        args = (args[0], _with_carrier(sample), *args[2:])
    elif isinstance(kwargs.get("kwargs"), dict):
        kwargs = {**kwargs, "kwargs": _with_carrier(kwargs["kwargs"])}
    return args, kwargs


def _with_carrier(sample: dict[str, Any]) -> dict[str, Any]:
    value = propagation.carrier_value()
    return sample if value is None else {**sample, propagation.CARRIER_KEY: value}


class _RewardWorker:
    """Per-process state of a reward-loop worker."""

    def __init__(self) -> None:
        self.identified = False
        self.last_step: int | None = None  # the step of the last trajectory scored
        self.calls = IdleExport()  # compute_score calls running (the event loop runs many at once)


_STATE = _RewardWorker()


@safe("reward worker span start")
def _start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> SpanState | None:
    data = kwargs.get("data", args[0] if args else None)
    parent = propagation.take_from_batch(data)
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
    state = open_span(semconv.SPAN_REWARD_WORKER, context=parent, attributes=attrs)
    _STATE.calls.begin()
    return state


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
def _end(state: SpanState, result: Any, error: BaseException | None) -> None:
    close_span(state, error=error)
    _STATE.calls.end()  # idle: the last step has no next step to mark its end


async def compute_score_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``RewardLoopWorker.compute_score(data)``: one trajectory's score, user code included."""
    return await call_traced_async(_start(args, kwargs), _end, wrapped, *args, **kwargs)
