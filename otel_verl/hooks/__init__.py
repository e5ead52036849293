"""Hooks grouped by the verl subsystem they patch.

Each module exposes ``HOOKS``: a list of :class:`Hook` (module, attribute path, wrapper).
A hook is applied when its module is imported (never importing verl itself, so the 25+
processes of a Ray job that never touch verl pay nothing) and removed exactly on
``uninstrument()``.

==================  ======================================================================
module              what it patches
==================  ======================================================================
``timers``          ``verl.utils.profiler.performance._timer``: step and stage spans
``trainer``         v0 ``RayPPOTrainer`` / v1 ``PPOTrainer``: run identity, init and
                    validation spans, flush at the end of ``fit``
``tracking``        ``verl.utils.tracking.Tracking.log``: every logged metric
``workers``         ``func_generator`` (driver) and ``engine_workers`` (ranks): worker
                    spans joined to the driver's step trace
``ray_launch``      ``ray.init``: hands the ``OTEL_*`` settings to the job's Ray workers
==================  ======================================================================
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.utils import unwrap
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_verl._safe import warn_once
from otel_verl.runtime import RUNTIME

SpanState = tuple[Span, object]  # a started span and the context token that made it current


def end_span(span: Span, error: BaseException | None) -> None:
    """End ``span``; a verl error is recorded on it (exception event, status ERROR)."""
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    span.end()


def open_span(
    name: str,
    *,
    context: otel_context.Context | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: dict[str, Any] | None = None,
) -> SpanState:
    """Start ``name`` with this process's tracer and make it the current span."""
    span = RUNTIME.telemetry.tracer.start_span(name, context=context, kind=kind, attributes=attributes)
    return span, otel_context.attach(trace.set_span_in_context(span))


def close_span(state: SpanState, error: BaseException | None) -> None:
    """Undo :func:`open_span`: restore the previous context, then end the span."""
    span, token = state
    otel_context.detach(token)  # type: ignore[arg-type]
    end_span(span, error)


def call_traced(
    state: Any, end: Callable[[Any, BaseException | None], None], fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """``fn(*args, **kwargs)``, then ``end(state, error)``: the one shape of every traced call.

    ``state`` comes from a fail-safe (``@safe``) start function, None meaning "not traced";
    ``end`` is fail-safe too. verl's result or exception passes through unchanged.
    """
    if state is None:
        return fn(*args, **kwargs)
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        end(state, exc)
        raise
    end(state, None)
    return result


async def call_traced_async(
    state: Any, end: Callable[[Any, BaseException | None], None], fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """:func:`call_traced` for a coroutine function (the wrapper stays a coroutine)."""
    if state is None:
        return await fn(*args, **kwargs)
    try:
        result = await fn(*args, **kwargs)
    except BaseException as exc:
        end(state, exc)
        raise
    end(state, None)
    return result


@dataclass(frozen=True)
class Hook:
    module: str
    target: str  # "func" or "Class.method"
    wrapper: Callable[..., Any]
    optional: bool = False  # absent in some supported verl versions: skip quietly
    only_if: Callable[[], bool] | None = None  # checked when the module is imported


class HookSet:
    """Applies hooks on import of their modules and removes them again."""

    def __init__(self, hooks: list[Hook]) -> None:
        self._hooks = hooks
        self._active = False
        self._registered: set[str] = set()
        self.applied: list[Hook] = []

    def install(self) -> None:
        self._active = True
        for module in {h.module for h in self._hooks}:
            if module in self._registered:
                if module in sys.modules:
                    self._apply(sys.modules[module])
                continue
            self._registered.add(module)
            # wrapt runs the callback at once if the module is already imported.
            wrapt.register_post_import_hook(self._apply, module)

    def _apply(self, module: Any) -> None:
        if not self._active:
            return
        for hook in self._hooks:
            if hook.module != module.__name__ or hook in self.applied:
                continue
            if hook.only_if is not None and not hook.only_if():
                continue
            owner_path, _, attr = hook.target.rpartition(".")
            try:
                owner = module
                for part in filter(None, owner_path.split(".")):
                    owner = getattr(owner, part)
                if not hasattr(owner, attr):
                    raise AttributeError(hook.target)
                wrapt.wrap_function_wrapper(owner, attr, hook.wrapper)
                self.applied.append(hook)
            except Exception:  # noqa: BLE001 - a renamed verl internal must not stop training
                if not hook.optional:
                    warn_once(
                        f"hook:{hook.module}.{hook.target}",
                        "cannot hook %s.%s in verl %s; that telemetry is disabled",
                        hook.module,
                        hook.target,
                        _verl_version(),
                    )

    def uninstall(self) -> None:
        self._active = False
        for hook in reversed(self.applied):
            owner_path, _, attr = hook.target.rpartition(".")
            owner = sys.modules[hook.module]
            for part in filter(None, owner_path.split(".")):
                owner = getattr(owner, part)
            unwrap(owner, attr)
        self.applied.clear()


def _verl_version() -> str:
    try:
        return importlib.metadata.version("verl")
    except Exception:  # noqa: BLE001
        return "unknown"
