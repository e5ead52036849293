"""``VerlInstrumentor``: the ``opentelemetry_instrumentor`` entry point ``verl``."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_verl import logs
from otel_verl.config import ensure_run_id
from otel_verl.hooks import HookSet, ray_launch, rollout, samples, timers, tracking, trainer, workers
from otel_verl.package import _instruments
from otel_verl.runtime import RUNTIME


class VerlInstrumentor(BaseInstrumentor):
    """Instruments every verl process it runs in.

    ``instrument()`` only registers import hooks: nothing of verl is imported and no
    provider is built until verl code runs, so Ray's own processes pay nothing.
    Pass ``tracer_provider=`` / ``meter_provider=`` to use your own providers; by default
    each process builds its own from the ``OTEL_*`` environment (see ``otel_verl.pipeline``).
    """

    _hooks: HookSet | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        tracer_provider = kwargs.get("tracer_provider")
        meter_provider = kwargs.get("meter_provider")
        if tracer_provider is not None or meter_provider is not None:
            RUNTIME.use_providers(tracer_provider, meter_provider)
        ensure_run_id()
        logs.use_logger_provider(kwargs.get("logger_provider"))  # else each process's own (pipeline.py)
        if self._hooks is None:
            self._hooks = HookSet(
                timers.HOOKS
                + trainer.HOOKS
                + tracking.HOOKS
                + workers.HOOKS
                + ray_launch.HOOKS
                + samples.HOOKS
                + rollout.HOOKS
            )
        self._hooks.install()

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._hooks is not None:
            self._hooks.uninstall()
        logs.detach()
        RUNTIME.trainer = None
        RUNTIME.last_step = None
