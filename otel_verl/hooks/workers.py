"""verl's single controller: driver -> worker-group calls -> worker actors.

* Driver (TaskRunner): every worker-group method built by
  ``verl.single_controller.ray.base.func_generator`` gets a ``verl.wg.<method>`` span (a
  child of the current stage span) and hands the trace context to the workers inside
  its data argument (``otel_verl.propagation``). For non-blocking methods
  (``train_mini_batch``, ``infer_batch``, ``update_weights``) the span covers the dispatch;
  the wait shows on the stage span.
* Workers (``verl.workers.engine_workers``): ``ActorRolloutRefWorker`` and ``TrainingWorker``
  methods take the context out and record ``verl.worker.<method>`` spans with the rank, so
  one step's trace holds the work of every rank. Coroutine methods stay coroutines and
  verl's registration metadata (dispatch mode, blocking) is preserved by the wrapper.
  A rank has no step boundary of its own: when the driver's call ends its spans are exported at
  once, its gauges (``process.*``, ``hw.gpu.*``) at most once a second (``IdleExport``).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from otel_verl import per_process, private_api, propagation, semconv
from otel_verl._safe import safe
from otel_verl.hooks import targets
from otel_verl.hooks.hookset import Hook
from otel_verl.hooks.spans import SpanState, call_traced, call_traced_async, close_span, open_span
from otel_verl.process import worker_metrics
from otel_verl.process.idle_export import IdleExport
from otel_verl.process.state import PROCESS

ENGINE = targets.ENGINE_WORKERS
ARR_METHODS = (
    "compute_log_prob",
    "compute_ref_log_prob",
    "update_actor",
    "update_weights",
    "save_checkpoint",
    "load_checkpoint",
)
TRAINING_METHODS = ("train_mini_batch", "train_batch", "infer_batch", "save_checkpoint", "load_checkpoint")


# ------------------------------------------------------------------------------ driver side
@safe("worker-group span start")
def _dispatch_start(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any] | None:
    if PROCESS.trainer is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    opened = open_span(
        semconv.SPAN_WG_PREFIX + method, kind=SpanKind.CLIENT, attributes={semconv.ATTR_WORKER_METHOD: method}
    )
    data = propagation.find_data(args, kwargs)
    if data is not None and not propagation.inject(data):
        data = None
    return opened, data


@safe("worker-group span end")
def _dispatch_end(state: tuple[SpanState, Any], result: Any, error: BaseException | None) -> None:
    opened, data = state
    if data is not None:
        propagation.take(data)  # verl reuses e.g. KVBatchMeta.extra_info across calls
    close_span(opened, error=error)


class _TracedWorkerGroupMethod(wrapt.ObjectProxy):  # type: ignore[misc]
    def __init__(self, functor: Any, method: str) -> None:
        super().__init__(functor)
        self._self_method = method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        state = _dispatch_start(self._self_method, args, kwargs)
        return call_traced(state, _dispatch_end, self.__wrapped__, *args, **kwargs)


def _func_generator_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    functor = wrapped(*args, **kwargs)
    method = kwargs.get("method_name", args[1] if len(args) > 1 else None)
    return _TracedWorkerGroupMethod(functor, method) if isinstance(method, str) else functor


# ------------------------------------------------------------------------------ worker side
# The driver's calls running in this rank; Ray may end it within milliseconds of the last one.
_DRIVER_CALLS = IdleExport(coalesce_spans=False)


def _forget() -> None:
    global _DRIVER_CALLS
    _DRIVER_CALLS = IdleExport(coalesce_spans=False)


per_process.register(__name__, reset=_forget)


def _rank(instance: Any) -> int | None:
    rank = getattr(instance, "rank", None)
    if isinstance(rank, int):
        return rank
    env = os.environ.get("RANK")
    return int(env) if env and env.isdigit() else None


@safe("worker span start")
def _worker_start(instance: Any, method: str, args: Any, kwargs: Any) -> SpanState | None:
    data = propagation.find_data(args, kwargs)
    parent = propagation.take(data) if data is not None else None
    if parent is None:
        if not trace.get_current_span().get_span_context().is_valid:
            return None  # not part of a traced step: no orphan traces
        parent = otel_context.get_current()
    rank = _rank(instance)
    PROCESS.identify(role=semconv.ROLE_WORKER, rank=rank)
    worker_metrics.ensure_worker_metrics()  # hw.gpu.* / process.* gauges of this rank, once
    attrs: dict[str, Any] = {
        semconv.ATTR_WORKER_METHOD: method,
        semconv.ATTR_WORKER_CLASS: type(instance).__name__,
    }
    if rank is not None:
        attrs[semconv.RES_RANK] = rank
    state = open_span(semconv.SPAN_WORKER_PREFIX + method, context=parent, kind=SpanKind.SERVER, attributes=attrs)
    if _driver_call(state[0]):
        _DRIVER_CALLS.begin()
    return state


def _driver_call(span: Any) -> bool:
    """The driver's call (its context came through the carrier), not one nested in this process."""
    parent = getattr(span, "parent", None)
    return parent is None or parent.is_remote


@safe("worker span end")
def _worker_end(state: SpanState, result: Any, error: BaseException | None) -> None:
    try:
        close_span(state, error=error)
    finally:  # a nested call's span goes with its driver call's export
        if _driver_call(state[0]):
            _DRIVER_CALLS.end()


def _make_worker_wrapper(method: str, is_async: bool) -> Any:
    if is_async:

        async def run_async(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            state = _worker_start(instance, method, args, kwargs)  # when awaited, in the worker's loop
            return await call_traced_async(state, _worker_end, wrapped, *args, **kwargs)

        def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            return run_async(wrapped, instance, args, kwargs)

        return wrapper

    def sync_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        state = _worker_start(instance, method, args, kwargs)
        return call_traced(state, _worker_end, wrapped, *args, **kwargs)

    return sync_wrapper


class _LazyWorkerWrapper:
    """Picks the sync or async wrapper from the method itself on first use."""

    def __init__(self, method: str) -> None:
        self._method = method
        self._impl: Any = None

    def __call__(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if self._impl is None:
            self._impl = _make_worker_wrapper(self._method, inspect.iscoroutinefunction(wrapped))
        return self._impl(wrapped, instance, args, kwargs)


# What verl's RayWorkerGroup puts into each worker actor's environment (private to verl):
WG_PREFIX = "WG_PREFIX"  # the worker group's name prefix: this process is a worker-group actor
WG_BACKEND = "WG_BACKEND"  # set with it ("ray"); verl's own Worker reads it


def in_worker_actor() -> bool:
    """True in a verl worker-group actor: verl gives each one ``WG_PREFIX`` in its env.

    The worker classes are patched only there. The driver (TaskRunner) has no use for
    those wrappers, and Ray pickles the worker classes from the driver by value-or-reference:
    a wrapped method there would no longer resolve by reference and drag a module's globals
    (torch config modules) into the pickle, which fails. So when it cannot tell (a verl that
    sets ``WG_BACKEND`` but no longer ``WG_PREFIX``: said once, with verl's version) the answer
    is no: that worker's spans are lost, the driver is never patched.
    """
    if WG_PREFIX in os.environ:
        return True
    if WG_BACKEND in os.environ:
        private_api.missing(
            f"{WG_PREFIX} in a worker actor's environment ({WG_BACKEND} is there)",
            ("verl",),
            "the worker ranks' verl.worker.* spans are off",
        )
    return False


HOOKS = (
    [Hook(targets.SINGLE_CONTROLLER, "func_generator", _func_generator_wrapper)]
    + [
        Hook(ENGINE, f"ActorRolloutRefWorker.{m}", _LazyWorkerWrapper(m), optional=True, only_if=in_worker_actor)
        for m in ARR_METHODS
    ]
    + [
        Hook(ENGINE, f"TrainingWorker.{m}", _LazyWorkerWrapper(m), optional=True, only_if=in_worker_actor)
        for m in TRAINING_METHODS
    ]
)
