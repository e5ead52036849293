"""The OTLP exporters' own warnings: at most one of a kind each 5 minutes per process.

With the endpoint down, every OTLP export logs a warning per retry ("Transient error ...
retrying in 2.00s") and an error when it gives up ("Failed to export ..."), in every verl process
and for each signal, forwarded by Ray to the driver's console: tens of thousands of lines per
process over a multi-day run, burying verl's own output. The SDK's own ``DuplicateFilter`` on these
loggers drops a record only when it repeats the one just before it (within 20 s), and an export's
retries alternate the two messages, so it lets them all through.

:func:`attach` adds :class:`Throttle` to the exporters' loggers (``LOGGERS``) when a process's
pipeline is built. The first record of a kind (its logger and message template) passes, so the
user still learns at once that the endpoint is unreachable; after it at most one per
``INTERVAL_S``, saying how many like it were held back. What is held back is dropped before any
handler formats or writes it. Other loggers, and records of other kinds, are not touched.

What passes is stripped of credentials first (``otel_verl.redact.redact_text`` on each argument):
the gRPC exporter names its endpoint with any ``user:pass@`` in it, and an error's text may hold a
URL's ``?api_key=`` or an ``Authorization`` value.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from otel_verl import per_process, redact

INTERVAL_S = 300.0
# The loggers that log once per export attempt (exporters 1.45; the HTTP exporters' transport logs
# on its exporter's logger). The batch processors' "Queue full" repeats one message: the SDK's
# DuplicateFilter covers it.
LOGGERS = (
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http._log_exporter",
)


def _redacted(arg: Any) -> Any:
    """``arg``, or its text with credentials replaced when it holds any (numbers stay numbers)."""
    if arg is None or isinstance(arg, (int, float)):
        return arg
    text = str(arg)
    return redact.redact_text(text) if redact.has_secret(text) else arg


class Throttle(logging.Filter):
    """Passes the first record of each kind, then at most one per ``interval_s``; without credentials."""

    def __init__(self, interval_s: float = INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        # kind -> (time.monotonic() of the last record that passed, records held back since)
        self._kinds: dict[tuple[str, object], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        # the template; a message that is not a string (never, from these loggers) is one kind
        kind = (record.name, record.msg if isinstance(record.msg, str) else type(record.msg))
        now = self._clock()
        with self._lock:
            last, held = self._kinds.get(kind, (None, 0))
            if last is not None and now - last < self.interval_s:
                self._kinds[kind] = (last, held + 1)
                return False
            self._kinds[kind] = (now, 0)
        if held and last is not None and isinstance(record.msg, str):
            # Appended to the template, not formatted: the record's own args still apply.
            record.msg += f" [otel-verl: {held} more like this in the last {now - last:.0f} s not shown]"
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted(arg) for arg in record.args)
        elif isinstance(record.msg, str) and not record.args and redact.has_secret(record.msg):
            record.msg = redact.redact_text(record.msg)  # a template's `%s` may look like a value
        return True


_throttle: Throttle | None = None
_lock = threading.Lock()


def attach() -> Throttle:
    """Add the one :class:`Throttle` of this process to every logger in ``LOGGERS`` (once)."""
    global _throttle
    with _lock:
        if _throttle is None:
            _throttle = Throttle()
            for name in LOGGERS:
                logging.getLogger(name).addFilter(_throttle)
        return _throttle


def detach() -> None:
    """Remove it again (``uninstrument()``, tests)."""
    global _throttle
    with _lock:
        if _throttle is not None:
            for name in LOGGERS:
                logging.getLogger(name).removeFilter(_throttle)
            _throttle = None


per_process.register(__name__, reset=detach)
