"""Python ``logging`` of verl processes exported as OpenTelemetry logs: the handler, nothing else.

When a process's pipeline is built, :func:`attach` adds one OpenTelemetry ``LoggingHandler`` to
the root logger for its ``LoggerProvider`` (same resource as its spans and metrics):

* the handler is the one from ``opentelemetry-instrumentation-logging`` when that package is
  installed, else the SDK's (not a home-made one); records emitted inside a span carry that
  span's ``trace_id``/``span_id`` (the handler reads the current context);
* its level is ``OTEL_VERL_LOG_LEVEL`` (default ``WARNING``), so INFO chatter is not exported;
* no second handler: if the root logger already has an OpenTelemetry handler (the distro's
  ``OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED=true`` or ``LoggingInstrumentor``),
  nothing is added; records still reach a backend through that one;
* records from the ``opentelemetry`` and ``otel_verl`` loggers are not exported (an export
  failure must not log into the exporter it failed in);
* :func:`detach` (``uninstrument()``) removes exactly the handler added here.
"""

from __future__ import annotations

import logging
import threading
import warnings
from typing import Any

from otel_verl import per_process
from otel_verl.config import settings

_lock = threading.Lock()
_handler: logging.Handler | None = None
_SKIP = ("opentelemetry", "otel_verl")


def _handler_classes() -> tuple[type, ...]:
    classes: list[type] = []
    try:
        from opentelemetry.instrumentation.logging.handler import LoggingHandler as InstrumentationHandler

        classes.append(InstrumentationHandler)
    except Exception:  # noqa: BLE001 - optional package
        pass
    from opentelemetry.sdk._logs import LoggingHandler as SdkHandler

    classes.append(SdkHandler)
    return tuple(classes)


def _otel_handler_installed(root: logging.Logger) -> bool:
    classes = _handler_classes()
    return any(isinstance(h, classes) and h is not _handler for h in root.handlers)


class _NotOwnLogs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        return not any(name == p or name.startswith(p + ".") for p in _SKIP)


def attach(provider: Any) -> logging.Handler | None:
    """Add the OpenTelemetry logging handler for ``provider`` to the root logger (once)."""
    global _handler
    if provider is None:
        return None
    with _lock:
        if _handler is not None:
            return _handler
        root = logging.getLogger()
        if _otel_handler_installed(root):
            return None
        cls = _handler_classes()[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the SDK's handler warns it moved
            handler = cls(level=settings().log_level, logger_provider=provider)
        handler.addFilter(_NotOwnLogs())
        root.addHandler(handler)
        _handler = handler
        return handler


def detach() -> None:
    """Remove the handler :func:`attach` added."""
    global _handler
    with _lock:
        if _handler is not None:
            logging.getLogger().removeHandler(_handler)
            _handler = None


# a pipeline dropped by ``per_process.reset`` must not keep the root logger's records, nor keep the
# next pipeline's handler out (``attach`` adds one once)
per_process.register(__name__, reset=detach)
