"""``VerlInstrumentor``: the ``opentelemetry_instrumentor`` entry point ``verl``."""

from __future__ import annotations

import sys
from collections.abc import Collection
from typing import Any

import wrapt
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_verl.config import ensure_run_id
from otel_verl.hooks import all_hooks
from otel_verl.hooks.hookset import HookSet
from otel_verl.package import _instruments
from otel_verl.process import logs
from otel_verl.process.state import PROCESS
from otel_verl.stall import reporter


class VerlInstrumentor(BaseInstrumentor):
    """Instruments every verl process it runs in.

    ``instrument()`` only registers import hooks: nothing of verl is imported and no
    provider is built until verl code runs, so Ray's own processes pay nothing (the whole
    start-up sequence: ``otel_verl.process``). Pass ``tracer_provider=`` / ``meter_provider=`` /
    ``logger_provider=`` to use your own providers; by default each process builds its own from
    the ``OTEL_*`` environment.
    """

    _hooks: HookSet | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        given = [kwargs.get(k) for k in ("tracer_provider", "meter_provider", "logger_provider")]
        if any(p is not None for p in given):
            PROCESS.use_providers(*given)
        ensure_run_id()
        if self._hooks is None:
            self._hooks = HookSet(all_hooks())
            # a process that imports verl reports its stacks when training stalls (not Ray's daemons)
            wrapt.register_post_import_hook(reporter.start_on_verl_import, "verl")
        elif "verl" in sys.modules:  # instrumented again after uninstrument()
            reporter.REPORTER.start()
        self._hooks.install()

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._hooks is not None:
            self._hooks.uninstall()
        logs.detach()
        reporter.REPORTER.stop()
        PROCESS.forget_run()
