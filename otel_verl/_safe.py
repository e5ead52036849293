"""Fail-safe helpers: an error inside otel-verl is logged once per cause and swallowed."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from otel_verl import _hook_clock, per_process

_log = logging.getLogger("otel_verl")
_seen: set[str] = set()
_lock = threading.Lock()


def _forget() -> None:
    _seen.clear()


per_process.register(__name__, reset=_forget)  # warn_once remembers nothing

F = TypeVar("F", bound=Callable[..., Any])


def warn_once(cause: str, msg: str, *args: Any, exc_info: bool = False) -> None:
    """Log ``msg`` the first time ``cause`` happens in this process, then stay quiet."""
    with _lock:
        if cause in _seen:
            return
        _seen.add(cause)
    _log.warning("otel-verl: " + msg, *args, exc_info=exc_info)


def safe(cause: str, default: Any = None) -> Callable[[F], F]:
    """Decorate telemetry code that must never raise into verl.

    Every hook's own work runs in such a function: its CPU time on verl's threads is measured
    here too (``_hook_clock``, the ``hooks`` part of ``otel_verl.overhead.cpu_time``)."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            started = _hook_clock.enter()
            try:
                return fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - by design: never break training
                warn_once(cause, "%s failed; telemetry for it is skipped", cause, exc_info=True)
                return default
            finally:
                if started >= 0:
                    _hook_clock.leave(started)

        return inner  # type: ignore[return-value]

    return deco
