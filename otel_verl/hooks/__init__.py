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
from opentelemetry.instrumentation.utils import unwrap
from opentelemetry.trace import Span, Status, StatusCode

from otel_verl._safe import warn_once


def end_span(span: Span, error: BaseException | None) -> None:
    """End ``span``; a verl error is recorded on it (exception event, status ERROR)."""
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    span.end()


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
