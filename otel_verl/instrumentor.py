"""``VerlInstrumentor``: the ``opentelemetry_instrumentor`` entry point ``verl``.

``opentelemetry-instrument`` loads this entry point in every Python process of a job (its
``sitecustomize`` is on every process's ``PYTHONPATH``: Ray's own daemons and idle workers too),
so this module imports nothing heavy and ``instrument()`` only gives the job its run id and waits
for ``import verl``. The hooks, the SDK and the stall reporter are loaded then, once, before any of
verl's code runs (``_OnVerlImport``); processes that never import verl pay a few milliseconds.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Collection
from typing import Any

# already imported by opentelemetry-instrument (it loads its instrumentors through it)
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_verl.config import RUN_ID, ensure_run_id
from otel_verl.package import _instruments


def _handle_their_providers(starts_run: bool) -> None:
    """Global SDK providers otel-verl did not build (a distro's): their exit bounded, their
    JSON-file exporters' console output put in ``distro-*`` files of the run folder (``their_files``)."""
    try:
        from otel_verl.process import global_providers

        if not global_providers.sdk_globals():  # no distro here: nothing more to import
            return
        global_providers.bound_their_exit()
        from otel_verl.process import their_files

        their_files.redirect(starts_run)
    except Exception:  # noqa: BLE001 - never break start-up
        logging.getLogger("otel_verl").debug("could not handle the global providers", exc_info=True)


class _OnVerlImport:
    """A ``sys.meta_path`` entry that calls ``callback`` once, when ``verl`` is first looked up.

    That is before verl's ``__init__`` runs, so every hook is registered before the first verl
    module executes (as if registered at start-up). It finds nothing itself: the import goes on.
    """

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._lock = threading.Lock()
        self._fired = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name != "verl" and not name.startswith("verl."):
            return None
        with self._lock:
            if self._fired:
                return None
            self._fired = True
        self.remove()
        try:
            self._callback()
        except Exception:  # noqa: BLE001 - never break ``import verl``
            logging.getLogger("otel_verl").warning("otel-verl: could not instrument this verl process", exc_info=True)
        return None

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


class VerlInstrumentor(BaseInstrumentor):
    """Instruments every verl process it runs in.

    ``instrument()`` only waits for ``import verl`` (or acts at once where verl is already
    imported); nothing of verl is imported and no provider is built until verl code runs, so Ray's
    own processes pay nearly nothing (the whole start-up sequence: ``otel_verl.process``). Pass
    ``tracer_provider=`` / ``meter_provider=`` / ``logger_provider=`` to use your own providers; by
    default each process builds its own from the ``OTEL_*`` environment.
    """

    _hooks: Any = None  # the HookSet, from the first ``import verl`` on
    _waiting: _OnVerlImport | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        given = [kwargs.get(k) for k in ("tracer_provider", "meter_provider", "logger_provider")]
        if any(p is not None for p in given):
            from otel_verl.process.state import PROCESS

            PROCESS.use_providers(*given)
        starts_run = not os.environ.get(RUN_ID)
        if starts_run:  # the process that starts the run: say what OTEL_CONFIG_FILE means
            from otel_verl import declarative_config

            declarative_config.warn_if_set()
        ensure_run_id()  # now: the Ray processes this one starts inherit it
        if not any(p is not None for p in given):
            _handle_their_providers(starts_run)  # a distro's providers in this process
        if "verl" in sys.modules:  # programmatic use, or the verl.plugins entry point inside ``import verl``
            self._activate()
        elif self._waiting is None:
            self._waiting = _OnVerlImport(self._activate)
            sys.meta_path.insert(0, self._waiting)

    def _activate(self) -> None:
        """Register every hook (applied as each verl/Ray module is imported) and the stall reporter."""
        self._waiting = None
        from otel_verl.hooks import all_hooks
        from otel_verl.hooks.hookset import HookSet
        from otel_verl.stall import reporter

        if self._hooks is None:
            self._hooks = HookSet(all_hooks())
        # This process imports verl (or is importing it: called from ``_OnVerlImport``, where a
        # post-import hook on "verl" registered now would be skipped by the import already under
        # way), so it reports its stacks when training stalls; Ray's daemons never get here.
        reporter.start_on_verl_import()
        self._hooks.install()

    def _uninstrument(self, **kwargs: Any) -> None:
        """Undo everything ``instrument()`` did: the hooks, the patches made at run time
        (``otel_verl.patches``: Ray actor-class copies, the SDK tracer's sampler shim,
        ``ThreadPoolExecutor.submit``), the stall reporter and watchdog threads, the log handlers."""
        if self._waiting is not None:
            self._waiting.remove()
            self._waiting = None
        if self._hooks is not None:
            from otel_verl import patches
            from otel_verl.stall import reporter, watchdog

            self._hooks.uninstall()
            patches.undo_all()
            reporter.REPORTER.stop()
            watchdog.WATCHDOG.stop()
        if "otel_verl.process.state" in sys.modules:  # set up by the hooks or by given providers
            from otel_verl.process import logs, sdk_log_throttle
            from otel_verl.process.state import PROCESS

            logs.detach()
            sdk_log_throttle.detach()
            PROCESS.forget_run()
