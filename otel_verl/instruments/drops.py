"""``otel_verl.telemetry.dropped``: what otel-verl dropped in this process, counted and said.

otel-verl's bounded queues (``background.OrderedWorker``) drop their oldest item when full, so a
slow or unreachable exporter never grows memory or blocks training. Each queue that holds data
names what it holds (``semconv.DROPPED_*``) and every drop is counted here: the observable counter
``otel_verl.telemetry.dropped`` (attribute ``otel_verl.dropped.kind``) carries the counts with
every export, so once the backend answers again the loss is there to see and alert on, and the
first drop of each kind in a process logs one warning saying what was lost.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from otel_verl import per_process, semconv
from otel_verl._safe import warn_once
from otel_verl.instruments import catalog
from otel_verl.instruments.self_metrics import SelfMetrics

_WHAT = {
    semconv.DROPPED_STEP: "a training step's metrics were dropped before they were recorded",
    semconv.DROPPED_METRIC_EXPORT: "a collected metric batch was dropped before it was exported",
    semconv.DROPPED_SPAN_TREE: "a span of a rollout trajectory's tree was dropped while its fate was undecided",
    semconv.DROPPED_SPOOL: "a batch the endpoint did not take was dropped from the on-disk spool (full: "
    "OTEL_VERL_SPOOL_MAX_MB, oldest first; or not writable)",
}

_lock = threading.Lock()
_counts: dict[str, int] = {}


def _forget() -> None:
    with _lock:
        _counts.clear()


per_process.register(__name__, reset=_forget)


def dropped(kind: str, queued: int, why: str = "a slow or unreachable exporter") -> None:
    """One item of ``kind`` was dropped from a full queue of ``queued`` items: count it, say it once."""
    with _lock:
        _counts[kind] = _counts.get(kind, 0) + 1
    warn_once(
        f"dropped {kind}",
        "%s (%d were queued already: %s); every drop is counted in %s{%s=%s}",
        _WHAT.get(kind, f"telemetry of kind {kind} was dropped"),
        queued,
        why,
        semconv.M_TELEMETRY_DROPPED,
        semconv.ATTR_DROPPED_KIND,
        kind,
    )


def counts() -> dict[str, int]:
    """Drops so far in this process, by kind (every kind, 0 when none)."""
    with _lock:
        return {**dict.fromkeys(semconv.DROPPED_KINDS, 0), **_counts}


def _observe(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(n, {semconv.ATTR_DROPPED_KIND: kind}) for kind, n in counts().items()]


_METRIC = SelfMetrics((catalog.TELEMETRY_DROPPED, _observe))


def register_dropped_metric(meter: Any) -> bool:
    """Add ``otel_verl.telemetry.dropped`` to ``meter`` once; False when it was there already."""
    return _METRIC.register(meter)
