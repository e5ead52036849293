"""OTLP exporters that spool what the endpoint does not take, and re-send it when it answers again.

``wrap(exporter, signal)`` puts an SDK OTLP exporter (gRPC or HTTP) behind a ``Spooler``, whose one
thread (``otel-verl-export-<signal>``, started with the first batch) makes every request:

* **Healthy:** each batch goes to the SDK exporter as before (its retries and settings unchanged),
  from that thread while the caller (the SDK's batch processor, otel-verl's metric reader) waits
  for the answer; nothing touches the disk.
* **Endpoint away:** a batch the exporter gives up on (``FAILURE``: after the SDK's own retries,
  about 7 s with the default ``OTEL_EXPORTER_OTLP_TIMEOUT``) is encoded as the OTLP request it would
  have been and spooled (``otel_verl.spool.store``). While this exporter's spool holds batches,
  every new one goes straight behind them, without an attempt: order is kept (a metric series'
  points arrive in time order), and the SDK's batch threads never wait for a dead endpoint again.
* **Back:** the same thread re-sends the oldest batch through the exporter's own client
  (``resend``), every ``MIN_BACKOFF_S`` to ``MAX_BACKOFF_S`` while the endpoint is away, and
  removes each one only once it was accepted. Spools that ended processes of this host left behind
  for this exporter's destination (``Spool.adopt``: when the thread starts, then every ``RESCAN_S``,
  and as soon as adopted ones are sent) go after this process's own. An authentication or routing
  answer (``resend.HOLD``) keeps the batch: said once, counted (``refused``), backed off.
* **Order, and no head-of-line blocking.** Batches go oldest first. One the endpoint answers
  ``ROTATE_AFTER`` times in a row without taking it (``resend.RETRY``: a throttling or server
  error; an endpoint that is away, ``AWAY``, says nothing about the batch) is followed by one try
  of the next batch: when that one is accepted (the endpoint works, that batch does not), the
  first goes after every other batch of this exporter (``Spool.defer``); when it is not, order is
  kept and the thread backs off. So a
  metric series' points arrive in time order, except those of a batch the endpoint kept refusing
  while it took later ones (a backend without an out-of-order window, Prometheus by default,
  then refuses those points).
* **Bounded copies.** A re-send with no answer in time (``resend.LATE``: it may have arrived)
  is counted in the batch's file name; after ``spool.MAX_LATE`` of them the batch is dropped,
  counted and said once.
* **The end** (``Telemetry.flush`` at the end of training and ``Telemetry.shutdown``, bounded
  together by ``OTEL_VERL_SHUTDOWN_TIMEOUT``): from ``closing`` on, a caller waits at most
  ``closing``'s limit for a send, then its batch is spooled and every later one goes to disk at
  once (the endpoint is not answering in time, and the exit is not held up; the caller is free to
  hand over the rest of its queue). ``drain`` waits while the endpoint takes what is spooled; then
  ``finish`` spools what is still on its way (``park``), stops the thread, shuts the SDK exporter
  down and hands the spool back: what is left is the next verl process's of this host to send (or
  ``otel-verl replay --spool``'s).

Nothing here runs on a training thread. At-least-once: a batch that reached the endpoint but whose
answer did not (a timeout, a kill at the wrong moment, a send given up on at exit) is sent again
(docs/faults.md says what each backend does with the duplicate), at most ``spool.MAX_LATE`` times
from the spool. Every send, re-send and shutdown here runs with OpenTelemetry's instrumentation
suppressed (``suppress_instrumentation``), as the SDK's own export threads do: an instrumented
``requests``, ``urllib3`` or ``grpc`` never makes a span of an export.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from enum import Enum, IntEnum
from typing import Any

from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_verl import per_process, private_api, semconv
from otel_verl._safe import warn_once
from otel_verl.spool import resend, stats
from otel_verl.spool import store as spool_store

_log = logging.getLogger(__name__)

MIN_BACKOFF_S = 0.5  # between two re-send attempts while the endpoint is away: doubled up to
MAX_BACKOFF_S = 5.0  # ... this, so a Collector that is back is used within seconds
RESCAN_S = 60.0  # a spooler looks for ended processes' spools this often (a listing of the root)
CLOSING_ATTEMPT_S = 2.0  # at exit a send may take this long (less of a short budget) before it is spooled
ROTATE_AFTER = 3  # re-sends of one batch not taken in a row before the next one is tried past it
_SDK = ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-common")


def _encoder(signal: str) -> Callable[[Any], bytes] | None:
    """The SDK's encoder of ``signal``'s batches into the OTLP request its exporters send."""
    module, name = {
        "traces": ("opentelemetry.exporter.otlp.proto.common.trace_encoder", "encode_spans"),
        "metrics": ("opentelemetry.exporter.otlp.proto.common.metrics_encoder", "encode_metrics"),
        # only the log encoder's module is private (the SDK's exporters import it from there)
        "logs": ("opentelemetry.exporter.otlp.proto.common._log_encoder", "encode_logs"),
    }[signal]
    encode = private_api.import_attribute(
        module,
        name,
        dists=_SDK,
        effect=f"no on-disk spool for {signal}: a batch the endpoint does not take is lost as without otel-verl",
    )
    if encode is None:
        return None
    return lambda batch: encode(batch).SerializeToString()


def _destination_of(sender: Any) -> spool_store.Destination | None:
    """Where ``sender``'s batches go; None when it cannot say (then nothing is adopted for it)."""
    try:
        return sender.destination()
    except Exception:  # noqa: BLE001 - a sender without one (or a private attribute gone)
        _log.debug("no destination for a spool sender", exc_info=True)
        return None


class Phase(IntEnum):
    """Where a ``Spooler`` is in its life. It only moves forward (``Spooler._to``), one step or more."""

    OPEN = 0  # each batch is sent while its caller waits for the answer (or spooled behind others)
    CLOSING = 1  # the process is ending: a caller waits at most ``closing``'s limit for a send
    GAVE_UP = 2  # at exit the endpoint did not answer in time: every later batch goes to disk at once
    STOPPED = 3  # ``finish``: no thread, no spool; a batch goes to the SDK exporter as without otel-verl
    SHUT = 4  # the SDK exporter is shut down too


class JobState(Enum):
    """What became of a batch handed to the thread for a direct send."""

    WAITING = "waiting"  # for the thread
    SENDING = "sending"  # the thread took it
    SENT = "sent"  # the SDK exporter said SUCCESS
    FAILED = "failed"  # it said FAILURE (or raised): its caller spools it
    PARKED = "parked"  # spooled instead (``park``, or its caller stopped waiting): a late answer is ignored


class _Job:
    """One batch handed to the thread for a direct send, and what became of it (``state``)."""

    __slots__ = ("batch", "created", "send", "state")

    def __init__(self, batch: Any, send: Callable[[Any], bool]) -> None:
        self.batch, self.send = batch, send
        self.created = time.monotonic()
        self.state = JobState.WAITING

    @property
    def answered(self) -> bool:
        """The send ended (or the batch was spooled instead): its caller stops waiting."""
        return self.state in (JobState.SENT, JobState.FAILED, JobState.PARKED)


_spoolers: weakref.WeakSet[Spooler] = weakref.WeakSet()


class Spooler:
    """The spool of one exporter: direct sends while the endpoint takes them, disk while it does not.

    Its state: the ``phase`` of its life (``Phase``, forward only), whether the endpoint is away
    (``_down``: the last attempt failed), and the one batch a caller waits on (``_job``)."""

    def __init__(self, signal: str, inner: Any, sender: resend.Sender, encode: Callable[[Any], bytes]) -> None:
        self.signal = signal
        self.inner = inner
        self._sender = sender
        self._encode = encode
        store = spool_store.current()
        assert store is not None  # wrap() checked
        self._store = store
        self.folder = store.folder_name(signal, _destination_of(sender))
        self._export_lock = threading.Lock()  # one caller at a time (the SDK's processors serialize already)
        self._cv = threading.Condition()
        self._job: _Job | None = None
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self.phase = Phase.OPEN
        self._closing_at: float | None = None  # time.monotonic() of ``closing`` (from ``Phase.CLOSING`` on)
        self._limit_s = CLOSING_ATTEMPT_S
        self._down = False  # the last attempt failed (the endpoint is away)
        self._next_try = 0.0  # time.monotonic() of the next re-send attempt
        self._next_scan = time.monotonic()  # the thread's first task: ended processes' spools
        _spoolers.add(self)
        if os.path.isdir(store.root):  # something may wait there: look now (in the thread, not here)
            self._start()

    def _to(self, phase: Phase) -> bool:
        """Move on to ``phase`` (never back); whether it moved."""
        if phase <= self.phase:
            return False
        self.phase = phase
        return True

    @property
    def stopped(self) -> bool:
        return self.phase >= Phase.STOPPED

    def _after_fork_in_child(self) -> None:
        """A forked child: fresh locks, no job of the parent's, its own thread when it first exports."""
        self._export_lock = threading.Lock()
        self._cv = threading.Condition()
        self._job = None
        self._thread = None

    # ------------------------------------------------------------------ the exporter's side
    @property
    def pending(self) -> int:
        """This exporter's batches waiting on disk."""
        return self._store.pending(self.folder)

    def export(self, batch: Any, send: Callable[[Any], bool]) -> bool:
        """Send ``batch`` with ``send`` (the SDK exporter), or spool it; True once it is sent or on disk."""
        if self.stopped:
            with suppress_instrumentation():
                return send(batch)  # after ``finish``: as the SDK alone
        with self._export_lock:
            if self.phase >= Phase.GAVE_UP or self.pending:
                return self._spool(batch)  # behind what already waits, without an attempt
            job = _Job(batch, send)
            with self._cv:
                self._job = job
                self._start_locked()
                self._cv.notify_all()
                while not job.answered:
                    deadline = self._deadline(job)
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    self._cv.wait(left)
                if job.state in (JobState.PARKED, JobState.SENT):
                    return True  # sent, or on disk already (``park``)
                if not job.answered:
                    self._to(Phase.GAVE_UP)  # at exit, and the endpoint does not answer in time
                    if self._job is job:
                        self._job = None
                job.state = JobState.PARKED  # whatever the thread's late answer, this batch is spooled below
            return self._spool(batch)

    def _deadline(self, job: _Job) -> float | None:
        if self._closing_at is None:
            return None
        return max(job.created, self._closing_at) + self._limit_s

    def _spool(self, batch: Any) -> bool:
        try:
            body = self._encode(batch)
        except Exception:  # noqa: BLE001 - a batch the SDK could not encode either
            warn_once(f"spool encode {self.signal}", "a %s batch could not be encoded for the spool", self.signal)
            return False
        ok = self._store.put(self.signal, self.folder, body)
        with self._cv:
            if not self._down:
                self._next_try = time.monotonic() + MIN_BACKOFF_S  # it just failed: not at once again
            self._down = True
            if ok:
                self._start_locked()
            self._cv.notify_all()
        return ok

    # ------------------------------------------------------------------ the thread
    def _start(self) -> None:
        with self._cv:
            self._start_locked()

    def _start_locked(self) -> None:
        if self.stopped:
            return
        if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
            return
        self._pid = os.getpid()  # a forked child starts its own
        self._thread = threading.Thread(target=self._run, name=f"otel-verl-export-{self.signal}", daemon=True)
        self._thread.start()

    def _next(self) -> _Job | bool | None:
        """What the thread does next: a job, True (re-send the oldest spooled batch), None (stop)."""
        with self._cv:
            while True:
                if self.stopped:
                    return None
                job = self._job
                if job is not None and job.state is JobState.WAITING:
                    job.state = JobState.SENDING
                    return job
                now = time.monotonic()
                if now >= self._next_scan or self._store.wants_adoption(self.signal):
                    return False  # look for ended processes' spools
                waiting = self._store.waiting(self.signal, self.folder)
                if waiting and now >= self._next_try:
                    return True
                if not waiting and self._down:
                    self._down = False  # nothing waits: whatever failed was dropped or rejected
                    self._cv.notify_all()
                wake = self._next_scan if not waiting else min(self._next_scan, self._next_try)
                self._cv.wait(max(0.0, wake - now))

    def _run(self) -> None:
        with suppress_instrumentation():  # no span of an export, whatever is instrumented
            self._loop()

    def _loop(self) -> None:
        backoff = MIN_BACKOFF_S
        while True:
            what = self._next()
            if what is None:
                return
            if isinstance(what, _Job):
                self._send(what)
            elif what is False:
                self._next_scan = time.monotonic() + RESCAN_S
                self._store.adopt(self.signal, self.folder)
            else:
                backoff = self._resend_oldest(backoff)

    def _send(self, job: _Job) -> None:
        try:
            ok = bool(job.send(job.batch))
        except Exception:  # noqa: BLE001 - the SDK's exporters return FAILURE; another may raise
            _log.debug("%s export failed", self.signal, exc_info=True)
            ok = False
        with self._cv:
            if job.state is not JobState.PARKED:  # a parked batch is on disk: its answer came too late
                job.state = JobState.SENT if ok else JobState.FAILED
            if self._job is job:
                self._job = None
            if ok:
                self._down = False
            self._cv.notify_all()

    def _resend_oldest(self, backoff: float) -> float:
        entry = self._store.head(self.signal, self.folder)
        if entry is None:
            return backoff  # another handle took it
        outcome, nbytes = self._attempt(entry)
        if outcome in _KEPT:
            strikes = self._not_taken(entry, outcome, nbytes)
            if strikes >= ROTATE_AFTER and self._probe_past(entry):
                return MIN_BACKOFF_S  # the endpoint takes others: that one waits behind them
            with self._cv:
                self._down = True
                self._next_try = time.monotonic() + backoff
                self._cv.notify_all()
            return min(backoff * 2, MAX_BACKOFF_S)
        self._finished(entry, outcome, nbytes)
        return MIN_BACKOFF_S

    def _attempt(self, entry: spool_store.Entry) -> tuple[str, int]:
        try:
            return self._resend(entry)
        except Exception:  # noqa: BLE001 - never lose the thread; the batch stays
            _log.debug("spool re-send failed", exc_info=True)
            return resend.RETRY, 0

    def _not_taken(self, entry: spool_store.Entry, outcome: str, nbytes: int) -> int:
        """``entry`` stays (``AWAY``, ``RETRY``, ``LATE``, ``HOLD``): released, counted; how many
        ``RETRY`` answers in a row it had (the others end a row: they say nothing against the batch)."""
        if outcome == resend.HOLD:
            stats.count(self.signal, semconv.SPOOL_REFUSED, nbytes)
            warn_once(
                f"spool refused {self.signal}",
                "the OTLP endpoint refused a spooled %s batch (authentication or routing: a configuration "
                "fault, not the data's); it is kept and sent again until the endpoint takes it",
                self.signal,
            )
        elif outcome == resend.LATE and self._store.late(entry) >= spool_store.MAX_LATE:
            self._store.done(entry, semconv.SPOOL_DROPPED, nbytes)
            warn_once(
                f"spool late {self.signal}",
                "a spooled %s batch was sent %d times without an answer in time (the endpoint may have it); "
                "it is not sent again (dropped, counted)",
                self.signal,
                spool_store.MAX_LATE,
            )
            return 0
        if outcome == resend.RETRY:
            return self._store.strike(entry)
        self._store.release(entry, reset=True)
        return 0

    def _probe_past(self, stuck: spool_store.Entry) -> bool:
        """Send the batch after ``stuck`` once; True when it was taken (then ``stuck`` is deferred)."""
        probe = self._store.head(self.signal, self.folder, skip=stuck)
        if probe is None:
            return False
        outcome, nbytes = self._attempt(probe)
        if outcome in _KEPT:
            self._not_taken(probe, outcome, nbytes)
            return False
        if outcome == resend.SENT:
            self._store.defer(stuck)
        self._finished(probe, outcome, nbytes)
        return outcome == resend.SENT

    def _finished(self, entry: spool_store.Entry, outcome: str, nbytes: int) -> None:
        self._store.done(entry, _OUTCOMES[outcome], nbytes)
        if outcome == resend.REJECTED:
            warn_once(
                f"spool rejected {self.signal}",
                "the endpoint refused a spooled %s batch for good (not a valid request for it); it is dropped",
                self.signal,
            )
        with self._cv:
            if outcome == resend.SENT:
                self._down = False  # back (at exit, a spooler that gave up stays so: ``Phase``)
            self._next_try = 0.0
            self._cv.notify_all()

    def _resend(self, entry: spool_store.Entry) -> tuple[str, int]:
        body = self._store.read(entry)
        if body is None:
            return "unreadable", 0
        return self._sender.send(body), len(body)

    # ------------------------------------------------------------------ the end
    def closing(self, limit_s: float = CLOSING_ATTEMPT_S) -> None:
        """The process is ending: from now on a caller waits at most ``limit_s`` for a send."""
        with self._cv:
            if self._to(Phase.CLOSING):
                self._closing_at = time.monotonic()
            self._limit_s = min(self._limit_s, max(0.0, limit_s))
            self._cv.notify_all()

    def wait_drained(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until this exporter's spool is empty or the endpoint is away."""
        with self._cv:
            return self._cv.wait_for(lambda: not self.pending or self._down or self.phase >= Phase.GAVE_UP, timeout_s)

    def park(self) -> int:
        """Spool the batch whose send is still under way (at exit, on a dead endpoint): the batches parked."""
        with self._cv:
            job = self._job
            if job is None or job.answered:
                return 0
            job.state = JobState.PARKED
            self._job = None
            self._cv.notify_all()
        self._spool(job.batch)
        return 1

    def stop(self) -> None:
        with self._cv:
            self._to(Phase.STOPPED)
            self._cv.notify_all()

    def shut_inner(self) -> None:
        with self._cv:
            if not self._to(Phase.SHUT):
                return
            self._cv.notify_all()
        try:
            with suppress_instrumentation():
                self.inner.shutdown()
        except Exception:  # noqa: BLE001
            _log.debug("exporter shutdown failed", exc_info=True)


def _after_fork_in_child() -> None:
    for s in list(_spoolers):
        s._after_fork_in_child()


per_process.register(__name__, after_fork=_after_fork_in_child)


_KEPT = frozenset({resend.AWAY, resend.RETRY, resend.LATE, resend.HOLD})  # the batch stays
_OUTCOMES = {
    resend.SENT: semconv.SPOOL_RESENT,
    resend.REJECTED: semconv.SPOOL_REJECTED,
    "unreadable": semconv.SPOOL_DROPPED,
}


def closing(spoolers: Sequence[Spooler], budget_s: float) -> None:
    """The process is ending with ``budget_s`` left to it: sends may take ``CLOSING_ATTEMPT_S``, at most
    0.4 of that budget, so that what is still queued behind a slow send reaches the disk in time."""
    for s in spoolers:
        s.closing(min(CLOSING_ATTEMPT_S, 0.4 * budget_s))


def drain(spoolers: Sequence[Spooler], timeout_s: float) -> bool:
    """Wait (at most ``timeout_s`` in all) while the endpoints take what is spooled."""
    deadline = time.monotonic() + timeout_s
    return all(s.wait_drained(max(0.0, deadline - time.monotonic())) for s in spoolers)


def finish(spoolers: Sequence[Spooler]) -> None:
    """At exit, after the bounded shutdown: park what is still on its way, stop the threads, shut the
    SDK exporters down, hand the spool back. Never raises; takes milliseconds."""
    for s in spoolers:
        try:
            s.park()
        except Exception:  # noqa: BLE001
            _log.debug("spool park failed", exc_info=True)
        s.stop()
    for s in spoolers:
        s.shut_inner()
    # their own spools, not ``spool_store.current()``: that may be another by now (``per_process.reset``,
    # a test's ``spool.use``), or make one where none was
    for store in {id(s._store): s._store for s in spoolers}.values():
        if all(s.stopped for s in list(_spoolers) if s._store is store):
            store.close()


# ------------------------------------------------------------------ the SDK's exporter interfaces
class SpoolingSpanExporter(SpanExporter):
    def __init__(self, inner: SpanExporter, spooler: Spooler) -> None:
        self.inner = inner
        self.spooler = spooler

    def _send(self, spans: Sequence[ReadableSpan]) -> bool:
        return self.inner.export(spans) == SpanExportResult.SUCCESS

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        ok = self.spooler.export(spans, self._send)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        """Only marks the end: ``finish`` shuts the SDK exporter down once the spool had its time."""
        self.spooler.closing(timeout_millis / 1000.0)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class SpoolingMetricExporter(MetricExporter):
    def __init__(self, inner: MetricExporter, spooler: Spooler) -> None:
        # The SDK exporter's temporality and aggregation, which the readers take from their exporter.
        preferences = {
            what: private_api.attribute(
                inner,
                f"_preferred_{what}",
                name=f"MetricExporter._preferred_{what}",
                dists=("opentelemetry-sdk",),
                effect="the step metric reader uses the SDK's default temporality and aggregation",
            )
            for what in ("temporality", "aggregation")
        }
        super().__init__(
            preferred_temporality=preferences["temporality"], preferred_aggregation=preferences["aggregation"]
        )
        self.inner = inner
        self.spooler = spooler

    def _send(self, data: MetricsData) -> bool:
        return self.inner.export(data) == MetricExportResult.SUCCESS

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
        ok = self.spooler.export(metrics_data, self._send)
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.spooler.closing(timeout_millis / 1000.0)


class SpoolingLogExporter(LogRecordExporter):
    def __init__(self, inner: LogRecordExporter, spooler: Spooler) -> None:
        self.inner = inner
        self.spooler = spooler

    def _send(self, batch: Sequence[ReadableLogRecord]) -> bool:
        return self.inner.export(batch) == LogRecordExportResult.SUCCESS

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        ok = self.spooler.export(batch, self._send)
        return LogRecordExportResult.SUCCESS if ok else LogRecordExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.spooler.closing(timeout_millis / 1000.0)


_WRAPPERS: dict[str, type] = {
    "traces": SpoolingSpanExporter,
    "metrics": SpoolingMetricExporter,
    "logs": SpoolingLogExporter,
}


def wrap(exporter: Any, signal: str) -> Any:
    """``exporter`` behind a spool when it is an SDK OTLP exporter and spooling is on
    (``OTEL_VERL_SPOOL``); else ``exporter`` itself."""
    if spool_store.current() is None:
        return exporter
    sender = resend.sender_for(exporter, signal)
    if sender is None:
        return exporter
    encode = _encoder(signal)
    if encode is None:
        return exporter
    return _WRAPPERS[signal](exporter, Spooler(signal, exporter, sender, encode))


def spooler_of(exporter: Any) -> Spooler | None:
    """The spooler behind an exporter ``wrap`` returned, or None."""
    spooler = getattr(exporter, "spooler", None)
    return spooler if isinstance(spooler, Spooler) else None
