"""``otel_verl.spool.batches`` / ``otel_verl.spool.bytes``: what this process's spool did, counted.

Every batch the on-disk spool (``otel_verl.spool.store``) takes, re-sends or loses is counted here
by signal (``otel_verl.signal``) and outcome (``otel_verl.spool.outcome``: ``spooled``, ``resent``,
``dropped``, ``rejected``; and ``refused``: each re-send the endpoint refused for a configuration
reason such as a credential, the batch kept), in batches and in bytes of the OTLP request. Both are observable counters
read at every export, so once the endpoint answers again the outage is there to see: how much waited
on disk, how much was re-sent, and whether anything was lost. A ``dropped`` batch is also counted in
``otel_verl.telemetry.dropped{kind=spool}`` and said once (``instruments.drops``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from otel_verl import per_process, semconv
from otel_verl.instruments import catalog
from otel_verl.instruments.self_metrics import SelfMetrics

_lock = threading.Lock()
_batches: dict[tuple[str, str], int] = {}
_bytes: dict[tuple[str, str], int] = {}


def count(signal: str, outcome: str, nbytes: int, batches: int = 1) -> None:
    """``batches`` batches of ``signal`` (``nbytes`` bytes in all) had ``outcome``."""
    with _lock:
        _batches[(signal, outcome)] = _batches.get((signal, outcome), 0) + batches
        _bytes[(signal, outcome)] = _bytes.get((signal, outcome), 0) + nbytes


def counts() -> dict[tuple[str, str], tuple[int, int]]:
    """(signal, outcome) -> (batches, bytes) so far in this process; only those that happened."""
    with _lock:
        return {key: (n, _bytes.get(key, 0)) for key, n in _batches.items()}


def reset() -> None:
    """Forget the counts (tests; a forked child starts from its own)."""
    with _lock:
        _batches.clear()
        _bytes.clear()


per_process.register(__name__, reset=reset)


def _observe(index: int) -> Any:
    def callback(options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(values[index], {semconv.ATTR_SIGNAL: signal, semconv.ATTR_SPOOL_OUTCOME: outcome})
            for (signal, outcome), values in counts().items()
        ]

    return callback


_METRICS = SelfMetrics((catalog.SPOOL_BATCHES, _observe(0)), (catalog.SPOOL_BYTES, _observe(1)))


def register_spool_metrics(meter: Any) -> bool:
    """Add both counters to ``meter`` once; False when they were there already."""
    return _METRICS.register(meter)
