"""Per-process telemetry pipelines: tracer and meter providers with the right resource.

Why otel-verl builds its own providers instead of using the global ones:

* which process this is (TaskRunner, an actor rank, an agent-loop worker) and which run
  (project, experiment) is known only once verl code runs in it, long after
  ``opentelemetry-instrument`` configured the global providers at interpreter start;
* step-exact metric export needs our own reader (see ``step_reader``);
* Ray 2.60 installs its own global MeterProvider in some of its processes.

The pipelines honour the standard ``OTEL_*`` variables through the SDK's own exporter
entry points (``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``, ``OTEL_EXPORTER_OTLP_*``,
``OTEL_TRACES_SAMPLER``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``,
``OTEL_SDK_DISABLED``). They are built lazily, on the first telemetry in a process, so
the 25+ Ray processes that never run verl code (Ray's own daemons) pay nothing.
Exporters default to ``otlp`` as with ``opentelemetry-distro``.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
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
    if identity.project:
        attrs[semconv.RES_PROJECT] = identity.project
    if identity.experiment:
        attrs[semconv.RES_EXPERIMENT] = identity.experiment
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
    from opentelemetry.sdk._configuration import _get_exporter_names, _import_exporters

    env = {"traces": "OTEL_TRACES_EXPORTER", "metrics": "OTEL_METRICS_EXPORTER"}[signal]
    if os.environ.get(env) is None:
        os.environ[env] = "otlp"  # the distro's default, also for processes it did not configure
    names = _get_exporter_names(signal)  # resolves "otlp" by OTEL_EXPORTER_OTLP_PROTOCOL
    traces, metrics_, _ = _import_exporters(
        names if signal == "traces" else [], names if signal == "metrics" else [], []
    )
    return traces if signal == "traces" else metrics_


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
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer = tracer_provider.get_tracer(semconv.SCOPE, __version__)
        self.meter = meter_provider.get_meter(semconv.SCOPE, __version__)
        self._step_readers = step_readers or []
        self._owned = owned
        self._shut_down = False
        self._flush_wanted = threading.Event()
        self._flusher: threading.Thread | None = None

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

    def flush(self, timeout_s: float | None = None) -> None:
        """Flush spans and metrics, adding at most ``timeout_s`` to the caller."""
        timeout_s = settings().shutdown_timeout_s if timeout_s is None else timeout_s
        _bounded(self._flush, timeout_s)

    def _flush(self) -> None:
        for provider in (self.tracer_provider, self.meter_provider):
            fn = getattr(provider, "force_flush", None)
            if fn is not None:
                fn()

    def shutdown(self, timeout_s: float | None = None) -> None:
        if not self._owned or self._shut_down:
            return
        self._shut_down = True
        timeout_s = settings().shutdown_timeout_s if timeout_s is None else timeout_s

        def _shutdown() -> None:
            for provider in (self.tracer_provider, self.meter_provider):
                fn = getattr(provider, "shutdown", None)
                if fn is not None:
                    fn()

        _bounded(_shutdown, timeout_s)


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
        if issubclass(cls, MetricReader):  # pull exporters (e.g. prometheus) are readers already
            readers.append(cls())
        elif issubclass(cls, MetricExporter):
            reader = StepMetricReader(_make_exporter(name, cls, "metrics", identity))
            readers.append(reader)
            step_readers.append(reader)
    meter_provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
    telemetry = Telemetry(tracer_provider, meter_provider, step_readers, owned=True)
    atexit.register(telemetry.shutdown)
    return telemetry
