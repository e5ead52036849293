"""This process's pipeline as the OpenTelemetry API's global providers, for user code.

User code in verl's processes (custom reward functions, agent loops, tools, reward managers)
uses the plain API (``trace.get_tracer``, ``metrics.get_meter``). Without otel-verl nothing sets
the globals there (``opentelemetry-instrument`` without a distro does not), so that code's spans
and metrics are dropped. Once this process's own pipeline is built, it becomes the global one:
user data then gets the run's resource (run id, project, experiment, role, rank), its exporters,
its step-boundary metric export and its bounded shutdown.

The rule, per signal: a global provider someone set before (the user, a distro's configurator,
``OTEL_PYTHON_*_PROVIDER``) is left alone, and the process says so once. Providers given to
``instrument()`` are the caller's business: the globals are not touched then. Ray installs a
global MeterProvider of its own only in its dashboard-agent processes, which run no verl code.
Instruments and tracers user code made before (at import) are the API's proxies: they forward to
the provider installed here. Global SDK providers otel-verl did not build (a distro's, in the
launcher) get the same exit bound as its own (``bound_their_exit``), and their JSON-file exporters
write ``distro-*`` files of the run folder, not the console (``their_files``).
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Any

from opentelemetry import _logs, metrics, trace

from otel_verl._safe import warn_once

_log = logging.getLogger(__name__)


def _is_proxy(provider: Any) -> bool:
    # The API's placeholders before any set_*_provider call (their classes are private in metrics/logs).
    return type(provider).__name__ in ("ProxyTracerProvider", "_ProxyMeterProvider", "ProxyLoggerProvider")


def install(tracer_provider: Any, meter_provider: Any, logger_provider: Any) -> list[str]:
    """Make these the global providers where none is set; returns the signals left to others."""
    kept: list[str] = []
    for signal, get, set_, ours in (
        ("traces", trace.get_tracer_provider, trace.set_tracer_provider, tracer_provider),
        ("metrics", metrics.get_meter_provider, metrics.set_meter_provider, meter_provider),
        ("logs", _logs.get_logger_provider, _logs.set_logger_provider, logger_provider),
    ):
        if ours is None:
            continue
        current = get()
        if current is ours:
            continue
        if _is_proxy(current):
            set_(ours)
        else:
            kept.append(f"{signal} ({type(current).__module__}.{type(current).__name__})")
    if kept:
        warn_once(
            "global providers",
            "a global OpenTelemetry provider was already set for %s: otel-verl leaves it, so the plain "
            "OpenTelemetry API in this process reports there, not to otel-verl's pipeline",
            ", ".join(kept),
        )
    return kept


_bounded = threading.Event()


def sdk_globals() -> list[Any]:
    """The global providers that are the SDK's (a distro's or otel-verl's own)."""
    current = (trace.get_tracer_provider(), metrics.get_meter_provider(), _logs.get_logger_provider())
    return [p for p in current if type(p).__module__.startswith("opentelemetry.sdk") and hasattr(p, "shutdown")]


def bound_their_exit() -> None:
    """Bound the exit shutdown of global SDK providers otel-verl did not build (a distro's
    configurator builds them in the launcher at interpreter start) by ``OTEL_VERL_SHUTDOWN_TIMEOUT``.

    The SDK shuts them down at exit with its own timeouts (an export to a hung endpoint waits
    ``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s by default, per signal). This exit handler, registered after
    theirs, runs before them: it starts their shutdown in a daemon thread and waits at most the
    bound; theirs then find it begun and return at once."""
    if _bounded.is_set() or not sdk_globals():
        return
    _bounded.set()
    atexit.register(_shutdown_bounded)


def _shutdown_bounded() -> None:
    from otel_verl.config import settings
    from otel_verl.process.telemetry import run_bounded

    providers = sdk_globals()

    def shutdown_all() -> None:
        for provider in providers:
            try:
                provider.shutdown()
            except Exception:  # noqa: BLE001 - at exit: nothing to do about it
                _log.debug("shutdown of %s failed", type(provider).__name__, exc_info=True)

    if providers:
        run_bounded(shutdown_all, settings().shutdown_timeout_s)
