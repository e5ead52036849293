"""One process's pipeline: its tracer, meter and logger providers and how they are flushed.

Why otel-verl builds its own providers instead of using the global ones (it then installs them
as the global ones where nobody else did: ``global_providers``):

* which process this is (TaskRunner, a worker rank, an agent-loop worker) and which run
  (project, experiment) is known only once verl code runs in it, long after
  ``opentelemetry-instrument`` configured the global providers at interpreter start;
* step-exact metric export needs our own reader (``step_reader``);
* Ray 2.60 installs its own global MeterProvider in some of its processes.

The providers honour the standard ``OTEL_*`` variables (``exporters``), ``OTEL_TRACES_SAMPLER``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME`` and ``OTEL_SDK_DISABLED``.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry._logs import get_logger_provider
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_verl import per_process, semconv
from otel_verl._safe import warn_once
from otel_verl.config import sdk_disabled, settings
from otel_verl.instruments import drops
from otel_verl.process import exporters, logs, sdk_log_throttle, span_trees
from otel_verl.process.background import OrderedWorker
from otel_verl.process.overhead import register_overhead_metric
from otel_verl.process.resource import Identity, build_resource
from otel_verl.process.span_trees import TreeBuffer
from otel_verl.process.step_reader import StepMetricReader
from otel_verl.spool import exporters as spool_export
from otel_verl.spool import stats as spool_stats
from otel_verl.version import __version__

_log = logging.getLogger(__name__)

MAX_PENDING_STEPS = 64  # steps of metrics waiting to be recorded (normally 0 or 1)
# Coalesced flush requests (``request_flush(coalesce=True)``) wait until this long after the last
# span export: a reward worker or a rollout server that goes idle after every call would otherwise
# export one span at a time, thousands a step in a real run (an export's CPU cost hardly depends on
# how few spans it holds). Short: Ray may end an actor soon after its last call, without
# ``atexit`` (worker ranks within milliseconds of the job's last update: theirs never wait).
SPAN_FLUSH_GAP_S = 0.1
# ``per_process.reset`` (between two tests) ends every pipeline within this, all together: a test's
# threads, exporters and spool must not run on into the next test, nor hold the suite up
RESET_BOUND_S = 2.0

# every pipeline of this process, for ``per_process.reset`` (a pipeline with a thread is kept alive by it)
_LIVE: weakref.WeakSet[Telemetry] = weakref.WeakSet()


class Telemetry:
    """The providers of one process plus the hooks to flush them at step boundaries."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider,
        meter_provider: metrics.MeterProvider,
        step_readers: list[StepMetricReader] | None = None,
        owned: bool = False,
        logger_provider: Any = None,
        trees: TreeBuffer | None = None,
        spoolers: list[spool_export.Spooler] | None = None,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        # None when logs are off (``OTEL_LOGS_EXPORTER=none``); the global one for given providers.
        self.logger_provider = logger_provider if owned else (logger_provider or get_logger_provider())
        self.tracer = tracer_provider.get_tracer(semconv.SCOPE, __version__)
        # span trees decided when they end (rollout trajectories): the provider's hold-back and exporters
        self.trees = span_trees.for_provider(tracer_provider, InstrumentationScope(semconv.SCOPE, __version__), trees)
        self.meter = meter_provider.get_meter(semconv.SCOPE, __version__)
        self._step_readers = step_readers or []
        self._spoolers = spoolers or []  # the OTLP exporters' on-disk spools (``spool_export``)
        self._owned = owned
        self._shut_down = False
        self._exit_spent_s = 0.0  # seconds the default-bounded flush/shutdown calls have waited
        # Step metrics are recorded off the training thread, in order (see submit).
        self._recorder: OrderedWorker[Callable[[], None]] = OrderedWorker(
            "otel-verl-record", _call, MAX_PENDING_STEPS, drops=semconv.DROPPED_STEP
        )
        # Span flush requests coalesce: one waiting request is enough, and one that a flush
        # begun after it already covered is skipped (``_force_flush_spans``).
        self._flusher: OrderedWorker[None] = OrderedWorker("otel-verl-flusher", self._force_flush_spans, 1)
        self._flush_asked = 0.0  # time.monotonic() of the latest request_flush
        self._flush_began = -SPAN_FLUSH_GAP_S  # of the latest span flush
        self._flush_now = threading.Event()  # a request that does not wait: ends a coalescing wait
        self._ending = threading.Event()  # shut down or ended: a background wait (``sleep``) ends
        drops.register_dropped_metric(self.meter)  # what this process's queues had to drop
        spool_stats.register_spool_metrics(self.meter)  # what its spool took, re-sent and lost
        _LIVE.add(self)

    @property
    def owned(self) -> bool:
        """Whether this pipeline was built here (not given to ``instrument()``, not the no-op one)."""
        return self._owned

    @property
    def dropped_steps(self) -> int:
        return self._recorder.dropped

    def submit(self, work: Callable[[], None]) -> None:
        """Run ``work`` (record a step's metrics, then export them) in the background thread.

        ``Tracking.log`` hands over ~100 values per step; recording them into the SDK's
        instruments and collecting them costs a few ms, which the training thread does not wait
        for. One thread runs the work in submission order, so every export holds exactly one
        step's values. Bounded: ``MAX_PENDING_STEPS`` behind, the oldest step is dropped.
        """
        self._recorder.put(work)

    def export_soon(self) -> None:
        """Collect and export metrics, and flush spans, from the background thread (the
        collection runs observable callbacks such as ``process.*``: milliseconds)."""
        self.submit(self.export_now)

    def export_now(self) -> None:
        """Collect and export metrics now and ask for a span flush (in the caller's thread)."""
        self.mark_step()
        self.request_flush()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` in a background thread of this pipeline (the recorder's), less when it is shut
        down or ended meanwhile: what waited then goes at once, within the shutdown's bound."""
        self._ending.wait(seconds)

    def drain(self, timeout_s: float = 5.0) -> bool:
        """Wait (at most ``timeout_s``) until every step handed to :meth:`submit` is recorded."""
        return self._recorder.drain(timeout_s)

    def mark_step(self) -> None:
        if not settings().step_export:
            return
        for reader in self._step_readers:
            reader.mark_step()

    def request_flush(self, coalesce: bool = False) -> None:
        """Ask for spans to be exported soon, without waiting.

        Ray may kill worker processes at the end of a job without running ``atexit``;
        flushing after each unit of work keeps the last step's spans. A request that a flush
        begun after it covers is skipped. ``coalesce``: the export may wait until
        ``SPAN_FLUSH_GAP_S`` after the previous one, so that requests close together share it
        (processes idle after every call); a request without it ends such a wait.
        """
        if self._owned and not self._shut_down:
            self._flush_asked = time.monotonic()
            if not coalesce:
                self._flush_now.set()
            if not self._flusher.pending:  # one still queued begins after this request: it covers it
                self._flusher.put(None)

    def _force_flush_spans(self, _: None) -> None:
        # The flusher thread: its wait never holds up verl's threads.
        if self._flush_asked < self._flush_began:
            return  # every span ended before this request was in the flush that began since
        if not self._flush_now.is_set():
            wait = self._flush_began + SPAN_FLUSH_GAP_S - time.monotonic()
            if wait > 0:
                self._flush_now.wait(wait)  # coalesced requests meanwhile join this flush
        self._flush_now.clear()
        self._flush_began = time.monotonic()
        with suppress_instrumentation():  # an export is never traced, whatever is instrumented
            self.tracer_provider.force_flush()  # type: ignore[attr-defined]

    def _wait(self, fn: Any, timeout_s: float | None, ending: bool) -> None:
        """Run ``fn`` bounded. By default the end-of-training flush and the exit shutdown share
        ``OTEL_VERL_SHUTDOWN_TIMEOUT``: what one waited (e.g. on a hung endpoint) the next does
        not get again, so telemetry adds at most that to a process's exit. ``ending``: the process
        is ending, so a send that would take much of that bound is spooled instead
        (``spool_export.closing``)."""
        if timeout_s is not None:
            if ending:
                spool_export.closing(self._spoolers, timeout_s)
            run_bounded(fn, timeout_s)
            return
        start = time.monotonic()
        budget = settings().shutdown_timeout_s - self._exit_spent_s
        if ending:
            spool_export.closing(self._spoolers, max(0.0, budget))
        if budget > 0:
            run_bounded(fn, budget)
        self._exit_spent_s += time.monotonic() - start

    def flush(self, timeout_s: float | None = None) -> None:
        """Flush spans and metrics, adding at most ``timeout_s`` to the caller (default: what is
        left of ``OTEL_VERL_SHUTDOWN_TIMEOUT``)."""
        self._wait(self._flush, timeout_s, ending=timeout_s is None)  # the default: the end of training

    def _providers(self) -> tuple[Any, ...]:
        return (self.tracer_provider, self.meter_provider, self.logger_provider)

    def _flush(self) -> None:
        self.drain(settings().shutdown_timeout_s)  # the last step's metrics first
        for provider in self._providers():
            fn = getattr(provider, "force_flush", None)
            if fn is not None:
                fn()

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Flush and shut the providers down, bounded (``_wait``). With an endpoint away, what is not
        sent by then is on disk (``spool_export``): the last batches go to the spool at once, one
        whose send is under way when the bound ends is parked there (``finish``), and what the spool
        holds is left for the next verl process of the host, not waited for."""
        if not self._owned or self._shut_down:
            return
        self._shut_down = True
        self._ending.set()
        self._wait(self._shutdown_now, timeout_s, ending=True)
        spool_export.finish(self._spoolers)

    def end(self, timeout_s: float) -> None:
        """Drop this pipeline (``per_process.reset``), within about ``timeout_s``: no exit shutdown
        registered any more, what it built shut down (``shutdown``, bounded) and its recorder and
        flusher threads ended. Providers given to ``instrument()`` are their owner's: not shut down."""
        deadline = time.monotonic() + timeout_s
        atexit.unregister(self.shutdown)
        self._ending.set()
        self.shutdown(timeout_s)
        self._flush_now.set()  # a coalescing wait of the flusher ends now
        for worker in (self._recorder, self._flusher):
            worker.stop(max(0.0, deadline - time.monotonic()) / 2)  # its drain, then its join

    def _shutdown_now(self) -> None:
        self.drain(settings().shutdown_timeout_s)
        for provider in self._providers():
            fn = getattr(provider, "shutdown", None)
            if fn is not None:
                fn()
        spool_export.drain(self._spoolers, settings().shutdown_timeout_s)  # what the endpoint takes now


def _call(work: Callable[[], None]) -> None:
    work()


def run_bounded(fn: Any, timeout_s: float) -> bool:
    """Run ``fn`` in a daemon thread and wait at most ``timeout_s``: the SDK's own
    flush/shutdown can block 10-25 s on a dead endpoint and ignore their timeouts."""
    done = threading.Event()

    def run() -> None:
        try:
            with suppress_instrumentation():  # flush and shutdown export: never traced
                fn()
        except Exception:  # noqa: BLE001
            _log.debug("telemetry flush failed", exc_info=True)
        finally:
            done.set()

    threading.Thread(target=run, name="otel-verl-flush", daemon=True).start()
    if not done.wait(timeout_s):
        warn_once("flush-timeout", "telemetry flush did not finish within %.1f s; continuing", timeout_s)
        return False
    return True


def noop_telemetry() -> Telemetry:
    return Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())


def build_own(identity: Identity) -> Telemetry:
    """This process's providers from the standard ``OTEL_*`` environment, all or nothing.

    Every exporter is looked up before anything starts; if a later part fails, what already
    started (span processor and metric reader threads) is shut down again and the error
    raised, so a caller never keeps half a pipeline. Last, Python logging is attached to it and
    the OTLP exporters' own warnings are throttled (``sdk_log_throttle``).
    """
    if sdk_disabled():
        return noop_telemetry()
    classes = {signal: exporters.exporter_classes(signal) for signal in exporters.SIGNALS}
    resource = build_resource(identity)
    started: list[Any] = []
    try:
        spoolers: list[spool_export.Spooler] = []

        def made(exporter: Any) -> Any:
            spooler = spool_export.spooler_of(exporter)
            if spooler is not None:
                spoolers.append(spooler)
            return exporter

        trees = TreeBuffer()  # in front of the span exporters: holds trees not decided yet
        tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False, active_span_processor=trees)
        started.append(tracer_provider)
        for name, cls in classes["traces"].items():
            exporter = made(exporters.make_exporter(name, cls, "traces", identity))
            tracer_provider.add_span_processor(BatchSpanProcessor(exporter))

        readers: list[MetricReader] = []
        step_readers: list[StepMetricReader] = []
        for name, cls in classes["metrics"].items():
            if name == exporters.PROMETHEUS_EXPORTER:
                reader = exporters.prometheus_reader()
                if reader is not None:
                    readers.append(reader)
            elif issubclass(cls, MetricReader):  # other pull exporters are readers already
                readers.append(cls())
            elif issubclass(cls, MetricExporter):
                step_reader = StepMetricReader(
                    made(exporters.make_exporter(name, cls, "metrics", identity)),
                    stamp_identity=name != exporters.JSON_FILE_EXPORTER,
                )
                started.append(step_reader)
                readers.append(step_reader)
                step_readers.append(step_reader)
        meter_provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
        started = [p for p in started if not isinstance(p, StepMetricReader)] + [meter_provider]  # it owns them now

        logger_provider = None
        if classes["logs"]:  # OTEL_LOGS_EXPORTER=none: no logs
            logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
            started.append(logger_provider)
            for name, cls in classes["logs"].items():
                exporter = made(exporters.make_exporter(name, cls, "logs", identity))
                logger_provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    except BaseException:
        for part in reversed(started):
            run_bounded(part.shutdown, 1.0)
        spool_export.finish(spoolers)
        raise
    telemetry = Telemetry(
        tracer_provider,
        meter_provider,
        step_readers,
        owned=True,
        logger_provider=logger_provider,
        trees=trees,
        spoolers=spoolers,
    )
    atexit.register(telemetry.shutdown)
    logs.attach(logger_provider)  # Python logging -> this pipeline's logs
    sdk_log_throttle.attach()  # an unreachable endpoint: a line of a kind each 5 min, not one per retry
    register_overhead_metric(telemetry.meter)  # otel-verl's own CPU, in every process with a pipeline
    return telemetry


def _end_every_pipeline() -> None:
    """``per_process.reset``: every pipeline of this process ended (``Telemetry.end``), within
    ``RESET_BOUND_S`` in all. Registered after the spool's modules (imported above), so this runs
    before the spool is forgotten: a pipeline's last batches go to its own spool, which it hands back."""
    deadline = time.monotonic() + RESET_BOUND_S
    for telemetry in list(_LIVE):
        _LIVE.discard(telemetry)
        try:
            telemetry.end(max(0.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - the next pipeline is still ended
            _log.debug("ending a pipeline failed", exc_info=True)


per_process.register(__name__, reset=_end_every_pipeline)
