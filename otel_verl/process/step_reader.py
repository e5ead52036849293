"""A metric reader that exports at step boundaries without blocking the training thread.

verl logs a step's values once; a gauge exported only every ``OTEL_METRIC_EXPORT_INTERVAL``
(60 s by default) keeps only the last value of the interval, so short steps would be lost.
``mark_step()`` collects right away (in memory, in the caller's thread: the values are
exactly the step's) and hands the batch to a background thread that exports it. The same
thread also collects every interval, like ``PeriodicExportingMetricReader``. Each batch leaves with
the run's identity on every point (``point_identity``).

The queue is bounded (``MAX_PENDING`` batches): with a dead endpoint the oldest batches are
dropped (counted in ``otel_verl.telemetry.dropped`` and said once: ``instruments.drops``), so memory stays
flat, and nothing the exporter does can stall training.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader, MetricsData

from otel_verl import per_process, private_api, semconv
from otel_verl._safe import warn_once
from otel_verl.process import point_identity
from otel_verl.process.background import OrderedWorker

_log = logging.getLogger(__name__)

DEFAULT_INTERVAL_MS = 60_000.0
MAX_PENDING = 32  # batches waiting for export; ~32 steps of history when the backend is down
# ``per_process.reset``: the readers no pipeline's shutdown ended (a test's own) end within this, all together
RESET_BOUND_S = 0.5


def _interval_ms() -> float:
    raw = os.environ.get("OTEL_METRIC_EXPORT_INTERVAL")
    try:
        value = float(raw) if raw else DEFAULT_INTERVAL_MS
    except ValueError:
        _log.warning("Invalid OTEL_METRIC_EXPORT_INTERVAL=%r; using %s", raw, DEFAULT_INTERVAL_MS)
        value = DEFAULT_INTERVAL_MS
    return value if value > 0 else DEFAULT_INTERVAL_MS


# Points a collection cannot make from instruments, added to every batch this process's readers collect
# (the specification's MetricProducer, which the Python SDK lacks): a producer takes the batch and a
# reader's own delta state (``None``: cumulative) and returns the batch with its points. The rollout
# engine's histograms register theirs (``hooks.rollout.engine_metrics``): the pipeline knows no hook.
Producer = Callable[[MetricsData, dict[Any, Any] | None], MetricsData]
_PRODUCERS: list[Producer] = []


def add_producer(produce: Producer) -> None:
    """Have ``produce`` add its points to every batch this process's readers collect (once per function)."""
    if produce not in _PRODUCERS:
        _PRODUCERS.append(produce)


def with_produced_points(batch: MetricsData, delta: dict[Any, Any] | None = None) -> MetricsData:
    """``batch`` with the registered producers' points, if any (never an error)."""
    for produce in tuple(_PRODUCERS):
        try:
            batch = produce(batch, delta)
        except Exception:  # noqa: BLE001 - the batch goes as collected
            warn_once("metric producer", "could not add a producer's points to a metric export", exc_info=True)
    return batch


class StepMetricReader(MetricReader):
    def __init__(
        self, exporter: MetricExporter, export_interval_millis: float | None = None, *, stamp_identity: bool = True
    ) -> None:
        # the OTLP JSON files need no copies: their readers take the identity from the resource
        self._stamp_identity = stamp_identity
        # The exporter's preferences, as the SDK's own readers take them (private attributes):
        # without them (said once, with the SDK's version) the reader's defaults apply, cumulative
        # temporality and default aggregation, which every OTLP backend takes.
        preferences: dict[str, Any] = {}
        for what in ("temporality", "aggregation"):
            preferences[f"preferred_{what}"] = private_api.attribute(
                exporter,
                f"_preferred_{what}",
                name=f"MetricExporter._preferred_{what}",
                dists=("opentelemetry-sdk",),
                effect="the step metric reader uses the SDK's default temporality and aggregation",
            )
            if preferences[f"preferred_{what}"] is None:
                preferences = {}  # both defaults, said once
                break
        super().__init__(**preferences)
        # the producers' histograms (the engine's) follow the exporter's temporality
        from opentelemetry.sdk.metrics import Histogram
        from opentelemetry.sdk.metrics.export import AggregationTemporality

        temporality = preferences.get("preferred_temporality") or {}
        self._produced_delta: dict[Any, Any] | None = (
            {} if temporality.get(Histogram) == AggregationTemporality.DELTA else None
        )
        self._produced_lock = threading.Lock()
        self._collect_lock = threading.Lock()
        self._last_collect_ms = 0
        self._exporter = exporter
        self._stopped = False
        self._worker: OrderedWorker[MetricsData] = OrderedWorker(
            "otel-verl-metrics",
            self._export,
            MAX_PENDING,
            idle_s=(export_interval_millis or _interval_ms()) / 1000.0,
            on_idle=self._collect_periodically,
            drops=semconv.DROPPED_METRIC_EXPORT,
        )
        self._worker.start()
        _LIVE.add(self)

    @property
    def dropped(self) -> int:
        return self._worker.dropped

    @property
    def pending(self) -> int:
        """Batches waiting for export (at most ``capacity``)."""
        return self._worker.pending

    @property
    def capacity(self) -> int:
        return self._worker.capacity

    # -- called by the SDK after collect()
    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> None:
        if metrics_data is not None:
            with self._produced_lock:
                metrics_data = with_produced_points(metrics_data, self._produced_delta)
            self._worker.put(metrics_data)

    def collect(self, timeout_millis: float = 10_000) -> None:
        """The SDK's collection, never two in one millisecond of the wall clock: Prometheus keeps
        milliseconds and refuses a changed value at the timestamp it already has (HTTP 400, the whole
        batch spooled then dropped), which two steps or a step and a flush that close would send."""
        with self._collect_lock:
            wait_s = (self._last_collect_ms + 1) / 1e3 - time.time_ns() / 1e9
            if wait_s > 0:
                time.sleep(min(wait_s, 0.001))  # at most 1 ms, only when collections are that close
            super().collect(timeout_millis)
            self._last_collect_ms = time.time_ns() // 1_000_000  # at or after the points' timestamp

    def mark_step(self) -> None:
        """Snapshot the instruments now and export them in the background."""
        if not self._stopped:
            self.collect()

    def _collect_periodically(self) -> None:
        try:
            self.collect()
        except Exception:  # noqa: BLE001 - a collection error must not kill the thread
            _log.debug("periodic metric collection failed", exc_info=True)

    def _export(self, batch: MetricsData) -> None:
        try:
            if self._stamp_identity:
                batch = point_identity.stamped(batch)
        except Exception:  # noqa: BLE001 - a batch the SDK shaped otherwise still goes out, as it is
            warn_once("metric identity", "cannot copy the run's identity onto metric points", exc_info=True)
        try:
            # as the SDK's own readers do: the exporter's HTTP/gRPC calls are no telemetry
            # (the requests/urllib3/grpc instrumentations would trace every export)
            with suppress_instrumentation():
                self._exporter.export(batch)
        except Exception:  # noqa: BLE001 - never kill the export thread
            # An exporter that raises (instead of returning FAILURE) would otherwise lose
            # every step silently: say so once per process.
            warn_once(
                "metric export",
                "metric export failed (%s); later failures are not logged",
                type(self._exporter).__name__,
                exc_info=True,
            )

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Collect now and wait (at most ``timeout_millis``) until everything queued is exported."""
        if not self._stopped:
            self.collect()
        return self._worker.drain(timeout_millis / 1000.0)

    def end(self, timeout_s: float) -> None:
        """No more collections: what is queued is exported (bounded), then the thread ends; the
        exporter is left as it is (``per_process.reset``; ``shutdown`` shuts it down too)."""
        self._stopped = True
        self._worker.stop(timeout_s / 2)  # its drain, then its join

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.force_flush(timeout_millis)
        self._stopped = True
        self._worker.stop(timeout_millis / 1000.0)
        try:
            self._exporter.shutdown(timeout_millis=timeout_millis)
        except TypeError:
            self._exporter.shutdown()


# every reader with a thread (the thread keeps it alive), for ``per_process.reset``
_LIVE: weakref.WeakSet[StepMetricReader] = weakref.WeakSet()


def _end_every_reader() -> None:
    """``per_process.reset``: every reader's thread ended, within ``RESET_BOUND_S`` in all. A pipeline's
    readers were shut down with it before (``telemetry`` registers after this module: its reset runs first)."""
    deadline = time.monotonic() + RESET_BOUND_S
    for reader in list(_LIVE):
        _LIVE.discard(reader)
        reader.end(max(0.0, deadline - time.monotonic()))


per_process.register(__name__, reset=_end_every_reader)
