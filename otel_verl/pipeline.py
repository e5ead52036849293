"""Per-process telemetry pipelines: tracer and meter providers with the right resource.

Why otel-verl builds its own providers instead of using the global ones:

* which process this is (TaskRunner, an actor rank, an agent-loop worker) and which run
  (project, experiment) is known only once verl code runs in it, long after
  ``opentelemetry-instrument`` configured the global providers at interpreter start;
* step-exact metric export needs our own reader (see ``step_reader``);
* Ray 2.60 installs its own global MeterProvider in some of its processes.

The pipelines honour the standard ``OTEL_*`` variables through the SDK's own exporter
entry points (``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``, ``OTEL_LOGS_EXPORTER``,
``OTEL_EXPORTER_OTLP_*``,
``OTEL_TRACES_SAMPLER``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``,
``OTEL_SDK_DISABLED``). They are built lazily, on the first telemetry in a process, so
the 25+ Ray processes that never run verl code (Ray's own daemons) pay nothing.
Exporters default to ``otlp`` as with ``opentelemetry-distro``.

Logs: a ``LoggerProvider`` per process (``otel_verl.logs`` attaches the logging handler).
Metrics with ``OTEL_METRICS_EXPORTER=prometheus``: a pull reader on
``OTEL_EXPORTER_PROMETHEUS_HOST:PORT`` (default ``127.0.0.1:9464``: loopback only) whose
series carry the run's resource attributes as labels (``verl_run_id``...), like the
collector's Prometheus set-up; each process takes the next free port from
``OTEL_EXPORTER_PROMETHEUS_PORT`` on (at most 32), so scrape that range.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry._logs import get_logger_provider
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.environment_variables import OTEL_SDK_DISABLED, OTEL_SERVICE_NAME
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_verl import semconv
from otel_verl._safe import warn_once
from otel_verl.config import settings
from otel_verl.step_reader import StepMetricReader
from otel_verl.version import __version__

_log = logging.getLogger(__name__)

JSON_FILE_EXPORTER = "otlp_json_file"
PROMETHEUS_EXPORTER = "prometheus"
PROMETHEUS_PORTS = 32  # consecutive ports the pull readers of one host may take
PROMETHEUS_DEFAULT_HOST = "127.0.0.1"  # OTEL_EXPORTER_PROMETHEUS_HOST unset: loopback only
# Resource attributes the pull reader copies onto every series (collector: promote_resource_attributes).
PROMOTED_RESOURCE_ATTRIBUTES = (
    semconv.RES_RUN_ID,
    semconv.RES_PROJECT,
    semconv.RES_EXPERIMENT,
    semconv.RES_ROLE,
    semconv.RES_RANK,
    "host.name",
)


@dataclass
class Identity:
    """Who this process is; becomes the resource."""

    role: str = semconv.ROLE_UNKNOWN
    rank: int | None = None
    project: str | None = None
    experiment: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def build_resource(identity: Identity) -> Resource:
    attrs: dict[str, Any] = {
        semconv.RES_ROLE: identity.role,
        "process.pid": os.getpid(),
        "host.name": socket.gethostname(),
        "telemetry.distro.name": "otel-verl",
        "telemetry.distro.version": __version__,
    }
    run_id = settings().run_id
    if run_id:
        attrs[semconv.RES_RUN_ID] = run_id
    if identity.rank is not None:
        attrs[semconv.RES_RANK] = identity.rank
    project = identity.project or settings().project
    experiment = identity.experiment or settings().experiment
    if project:
        attrs[semconv.RES_PROJECT] = project
    if experiment:
        attrs[semconv.RES_EXPERIMENT] = experiment
    instance = f"{run_id or 'run'}-{identity.role}"
    if identity.rank is not None:
        instance += f"-{identity.rank}"
    attrs["service.instance.id"] = f"{instance}-{os.getpid()}"
    attrs.update(identity.extra)
    if not os.environ.get(OTEL_SERVICE_NAME):
        attrs["service.name"] = semconv.SERVICE_NAME_DEFAULT
    # Resource.create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME on top.
    return Resource.create(attrs)


def _exporter_classes(signal: str) -> dict[str, type]:
    """Exporter classes named by ``OTEL_<SIGNAL>_EXPORTER`` (default ``otlp``, as the distro does)."""
    from opentelemetry.sdk._configuration import _get_exporter_entry_point, _import_exporters

    raw = os.environ.get(f"OTEL_{signal.upper()}_EXPORTER")
    raw = "otlp" if raw is None else raw
    if raw.strip().lower() in ("", "none"):
        return {}
    # "otlp" resolves to grpc or http by OTEL_EXPORTER_OTLP_PROTOCOL, as in the SDK's own setup
    names = [_get_exporter_entry_point(n.strip(), signal) for n in raw.split(",") if n.strip()]  # type: ignore[arg-type]
    found = _import_exporters(*[names if signal == sig else [] for sig in ("traces", "metrics", "logs")])
    return found[("traces", "metrics", "logs").index(signal)]


def _file_path(signal: str, identity: Identity) -> str:
    folder = settings().file_dir
    os.makedirs(folder, exist_ok=True)
    who = identity.role if identity.rank is None else f"{identity.role}{identity.rank}"
    return os.path.join(folder, f"{signal}-{who}-{os.getpid()}.jsonl")


def _make_exporter(name: str, cls: type, signal: str, identity: Identity) -> Any:
    if name == JSON_FILE_EXPORTER:
        return cls(path=_file_path(signal, identity))
    return cls()


class Telemetry:
    """The providers of one process plus the hooks to flush them at step boundaries."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider,
        meter_provider: metrics.MeterProvider,
        step_readers: list[StepMetricReader] | None = None,
        owned: bool = False,
        logger_provider: Any = None,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        # None when logs are off (``OTEL_LOGS_EXPORTER=none``); the global one for given providers.
        self.logger_provider = logger_provider if owned else (logger_provider or get_logger_provider())
        self.tracer = tracer_provider.get_tracer(semconv.SCOPE, __version__)
        self.meter = meter_provider.get_meter(semconv.SCOPE, __version__)
        self._step_readers = step_readers or []
        self._owned = owned
        self._shut_down = False
        self._exit_spent_s = 0.0  # seconds the default-bounded flush/shutdown calls have waited
        self._flush_wanted = threading.Event()
        self._flusher: threading.Thread | None = None
        # Step metrics are recorded off the training thread, in order (see record_step).
        self._steps: deque[Callable[[], None]] = deque(maxlen=MAX_PENDING_STEPS)
        self._steps_cv = threading.Condition()
        self._steps_busy = False
        self._recorder: threading.Thread | None = None
        self.dropped_steps = 0

    def record_step(self, work: Callable[[], None]) -> None:
        """Run ``work`` (record a step's metrics, then export them) in a background thread.

        ``Tracking.log`` hands over ~100 values per step; recording them into the SDK's
        instruments and collecting them costs a few ms, which the training thread does not wait
        for. One thread runs the work in submission order, so every export holds exactly one
        step's values. Bounded: ``MAX_PENDING_STEPS`` behind, the oldest step is dropped.
        """
        with self._steps_cv:
            if len(self._steps) == self._steps.maxlen:
                self.dropped_steps += 1
            self._steps.append(work)
            if self._recorder is None:
                self._recorder = threading.Thread(target=self._record_loop, name="otel-verl-record", daemon=True)
                self._recorder.start()
            self._steps_cv.notify_all()

    def _record_loop(self) -> None:
        while True:
            with self._steps_cv:
                while not self._steps:
                    self._steps_busy = False
                    self._steps_cv.notify_all()
                    self._steps_cv.wait()
                work = self._steps.popleft()
                self._steps_busy = True
            try:
                work()
            except Exception:  # noqa: BLE001 - the work is @safe already; never lose the thread
                _log.debug("step metrics failed", exc_info=True)

    def export_soon(self) -> None:
        """Collect and export metrics, and flush spans, from the background thread (the
        collection runs observable callbacks such as ``process.*``: milliseconds)."""
        self.record_step(self.export_now)

    def export_now(self) -> None:
        """Collect and export metrics now and ask for a span flush (in the caller's thread)."""
        self.mark_step()
        self.request_flush()

    def drain(self, timeout_s: float = 5.0) -> bool:
        """Wait (at most ``timeout_s``) until every step handed to :meth:`record_step` is recorded."""
        with self._steps_cv:
            return self._steps_cv.wait_for(lambda: not self._steps and not self._steps_busy, timeout_s)

    def mark_step(self) -> None:
        if not settings().step_export:
            return
        for reader in self._step_readers:
            reader.mark_step()

    def request_flush(self) -> None:
        """Ask for spans to be exported soon, without waiting.

        Ray may kill worker processes at the end of a job without running ``atexit``;
        flushing after each unit of work keeps the last step's spans. Requests coalesce
        in one background thread, so the caller never blocks on the exporter.
        """
        if not self._owned or self._shut_down:
            return
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_loop, name="otel-verl-flusher", daemon=True)
            self._flusher.start()
        self._flush_wanted.set()

    def _flush_loop(self) -> None:
        while not self._shut_down:
            self._flush_wanted.wait()
            self._flush_wanted.clear()
            try:
                self.tracer_provider.force_flush()  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001
                _log.debug("span flush failed", exc_info=True)

    def _wait(self, fn: Any, timeout_s: float | None) -> None:
        """Run ``fn`` bounded. By default the end-of-training flush and the exit shutdown share
        ``OTEL_VERL_SHUTDOWN_TIMEOUT``: what one waited (e.g. on a hung endpoint) the next does
        not get again, so telemetry adds at most that to a process's exit."""
        if timeout_s is not None:
            _bounded(fn, timeout_s)
            return
        start = time.monotonic()
        budget = settings().shutdown_timeout_s - self._exit_spent_s
        if budget > 0:
            _bounded(fn, budget)
        self._exit_spent_s += time.monotonic() - start

    def flush(self, timeout_s: float | None = None) -> None:
        """Flush spans and metrics, adding at most ``timeout_s`` to the caller (default: what is
        left of ``OTEL_VERL_SHUTDOWN_TIMEOUT``)."""
        self._wait(self._flush, timeout_s)

    def _providers(self) -> tuple[Any, ...]:
        return (self.tracer_provider, self.meter_provider, self.logger_provider)

    def _flush(self) -> None:
        self.drain(settings().shutdown_timeout_s)  # the last step's metrics first
        for provider in self._providers():
            fn = getattr(provider, "force_flush", None)
            if fn is not None:
                fn()

    def shutdown(self, timeout_s: float | None = None) -> None:
        if not self._owned or self._shut_down:
            return
        self._shut_down = True

        def _shutdown() -> None:
            self.drain(settings().shutdown_timeout_s)
            for provider in self._providers():
                fn = getattr(provider, "shutdown", None)
                if fn is not None:
                    fn()

        self._wait(_shutdown, timeout_s)


MAX_PENDING_STEPS = 64  # steps of metrics waiting to be recorded (normally 0 or 1)


def _bounded(fn: Any, timeout_s: float) -> None:
    """Run ``fn`` in a daemon thread and wait at most ``timeout_s``: the SDK's own
    flush/shutdown can block 10-25 s on a dead endpoint and ignore their timeouts."""
    done = threading.Event()

    def run() -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001
            _log.debug("telemetry flush failed", exc_info=True)
        finally:
            done.set()

    threading.Thread(target=run, name="otel-verl-flush", daemon=True).start()
    if not done.wait(timeout_s):
        warn_once("flush-timeout", "telemetry flush did not finish within %.1f s; continuing", timeout_s)


def build_own(identity: Identity) -> Telemetry:
    """Providers for this process from the standard ``OTEL_*`` environment."""
    if os.environ.get(OTEL_SDK_DISABLED, "").strip().lower() == "true":
        return Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())
    resource = build_resource(identity)
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    for name, cls in _exporter_classes("traces").items():
        tracer_provider.add_span_processor(BatchSpanProcessor(_make_exporter(name, cls, "traces", identity)))

    readers: list[MetricReader] = []
    step_readers: list[StepMetricReader] = []
    for name, cls in _exporter_classes("metrics").items():
        if name == PROMETHEUS_EXPORTER:
            reader = _prometheus_reader()
            if reader is not None:
                readers.append(reader)
        elif issubclass(cls, MetricReader):  # other pull exporters are readers already
            readers.append(cls())
        elif issubclass(cls, MetricExporter):
            reader = StepMetricReader(_make_exporter(name, cls, "metrics", identity))
            readers.append(reader)
            step_readers.append(reader)
    meter_provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
    logger_provider = _build_logger_provider(resource, identity)
    telemetry = Telemetry(tracer_provider, meter_provider, step_readers, owned=True, logger_provider=logger_provider)
    atexit.register(telemetry.shutdown)
    if logger_provider is not None:
        from otel_verl import logs

        logs.attach(logger_provider)
    return telemetry


def _build_logger_provider(resource: Resource, identity: Identity) -> LoggerProvider | None:
    exporters = _exporter_classes("logs")
    if not exporters:  # OTEL_LOGS_EXPORTER=none
        return None
    provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    for name, cls in exporters.items():
        provider.add_log_record_processor(BatchLogRecordProcessor(_make_exporter(name, cls, "logs", identity)))
    return provider


def _prometheus_reader() -> MetricReader | None:
    """The Prometheus pull reader, with the run's resource attributes as labels.

    Every verl process of a host that builds telemetry (TaskRunner, worker ranks, agent-loop
    workers...) needs its own port: the first free one from ``OTEL_EXPORTER_PROMETHEUS_PORT``
    (default 9464) on, within ``PROMETHEUS_PORTS``; scrape that range.
    """
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    first = int(os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT", "9464"))
    # Loopback unless asked: nothing otel-verl opens listens beyond this host by default.
    host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or PROMETHEUS_DEFAULT_HOST
    registry = CollectorRegistry(auto_describe=True)  # one per process: the pull reader owns it
    for port in range(first, first + PROMETHEUS_PORTS):
        try:
            start_http_server(port=port, addr=host, registry=registry)
        except OSError:  # another verl process on this host has this port: take the next one
            continue
        _log.debug("Prometheus exporter on %s:%s", host, port)
        return PrometheusMetricReader(
            resource_attribute_filter=PROMOTED_RESOURCE_ATTRIBUTES.__contains__, registry=registry
        )
    warn_once(
        "prometheus-port",
        "Prometheus exporter: ports %s-%s on %s are all taken; no pull metrics from this process",
        first,
        first + PROMETHEUS_PORTS - 1,
        host,
    )
    return None
