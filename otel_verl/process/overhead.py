"""``otel_verl.overhead.cpu_time``: the CPU time otel-verl itself spends in this process.

One observable counter per process (role and rank come from the resource), attribute
``otel_verl.component``:

* ``recorder``, ``exporter``, ``flusher``, ``watchdog``, ``stall_reporter``: the whole CPU time of
  otel-verl's threads (``otel-verl-record``, ``otel-verl-metrics``, ``otel-verl-export-*`` and the SDK's
  ``OtelBatch*RecordProcessor`` threads, ``otel-verl-flusher``/``-flush``, ``otel-verl-stall-watch``,
  ``otel-verl-stall``), read from each thread's kernel CPU clock at collection time. A thread that
  ended keeps its last reading (the counter never goes back);
* ``hooks``: the CPU time our hooks' own work takes on verl's threads (``otel_verl._hook_clock``).

Observable, because the source of truth is the kernel's clocks, read only when the metric is
exported (at step boundaries, like every step metric); a counter, because it is a cumulative
total: per step is the difference between two exports, per second ``rate()``.

What it does not count (so the figure is a lower bound of the true cost): native threads that
are not Python threads (gRPC's C-core threads when ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``), garbage
collection of our objects on verl's threads, the wrapper frames around hooks,
the GIL time verl's threads wait while ours run (wall time, not CPU), and everything before the
first hook ran: importing the SDK and our bootstrap at process start (``bench/startup_cost.py``).

Thread clocks are Linux's per-thread CPU clocks addressed by thread id (``CLOCK_THREAD_CPUTIME``
of a tid, the clock id glibc's ``pthread_getcpuclockid`` returns): unlike a ``pthread_t``, a tid of
a thread that just ended is refused by the kernel (EINVAL), never read from freed memory. Elsewhere
only ``hooks`` is reported.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from otel_verl import _hook_clock, per_process, semconv
from otel_verl._safe import warn_once
from otel_verl.instruments import catalog
from otel_verl.instruments.self_metrics import SelfMetrics

# thread-name prefix -> component; first match wins (``otel-verl-stall-watch`` before ``-stall``)
THREAD_COMPONENTS: tuple[tuple[str, str], ...] = (
    ("otel-verl-record", semconv.COMPONENT_RECORDER),
    ("otel-verl-metrics", semconv.COMPONENT_EXPORTER),
    ("OtelBatch", semconv.COMPONENT_EXPORTER),  # BatchSpanProcessor / BatchLogRecordProcessor
    ("otel-verl-flush", semconv.COMPONENT_FLUSHER),  # -flusher and the bounded -flush threads
    ("otel-verl-stall-watch", semconv.COMPONENT_WATCHDOG),
    ("otel-verl-stall", semconv.COMPONENT_STALL_REPORTER),
    ("otel-verl-export", semconv.COMPONENT_EXPORTER),  # sends and re-sends through the spool (spool_export)
    ("otel-verl-", semconv.COMPONENT_OTHER),
)
_CPUCLOCK_PERTHREAD_SCHED = 6  # CPUCLOCK_PERTHREAD_MASK (4) | CPUCLOCK_SCHED (2), linux/posix-timers.h


def component_of(thread_name: str) -> str | None:
    """The component an otel-verl thread counts under; None for a thread that is not ours."""
    for prefix, component in THREAD_COMPONENTS:
        if thread_name.startswith(prefix):
            return component
    return None


def _tid_clock(tid: int) -> int:
    return ((~tid) << 3) | _CPUCLOCK_PERTHREAD_SCHED


def thread_cpu_ns(tid: int) -> int | None:
    """CPU nanoseconds of thread ``tid`` of this process so far; None once it has ended."""
    try:
        return time.clock_gettime_ns(_tid_clock(tid))
    except OSError:
        return None


def thread_cpu_s(tid: int) -> float | None:
    """CPU seconds of thread ``tid`` of this process so far; None once it has ended."""
    ns = thread_cpu_ns(tid)
    return None if ns is None else ns / 1e9


def _thread_clocks_work() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    own = thread_cpu_ns(threading.get_native_id())
    return own is not None and own <= time.thread_time_ns() + 10**7  # the same clock, read first


class OverheadClock:
    """Per-component CPU seconds of this process's otel-verl threads and hooks, cumulative.

    Kept in integer nanoseconds, so a total never goes back by a rounding difference (Prometheus'
    ``rate()`` would read any decrease of a counter as a reset)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[tuple[int, int], tuple[str, int]] = {}  # (ident, tid) -> (component, last ns)
        self._ended: dict[str, int] = dict.fromkeys(semconv.OVERHEAD_COMPONENTS, 0)
        self._reported: dict[str, int] = {}  # the last totals handed out: never report less
        self._thread_clocks = _thread_clocks_work()

    @property
    def thread_clocks(self) -> bool:
        """Whether the threads' CPU clocks can be read here (Linux)."""
        return self._thread_clocks

    def totals(self) -> dict[str, float]:
        """CPU seconds per component (every component, 0 when it never ran), monotonic."""
        with self._lock:
            if self._thread_clocks:
                self._read_threads(threading.enumerate())
            out = dict(self._ended)
            for component, ns in self._threads.values():
                out[component] = out.get(component, 0) + ns
            out[semconv.COMPONENT_HOOKS] = _hook_clock.totals_ns()[0]
            for component, ns in out.items():
                out[component] = self._reported[component] = max(ns, self._reported.get(component, 0))
        return {component: ns / 1e9 for component, ns in out.items()}

    def _read_threads(self, threads: Iterable[threading.Thread]) -> None:
        seen: set[tuple[int, int]] = set()
        for thread in threads:
            component = component_of(thread.name)
            tid, ident = getattr(thread, "native_id", None), thread.ident
            if component is None or tid is None or ident is None:
                continue
            key = (ident, tid)
            ns = thread_cpu_ns(tid)
            if ns is None:
                continue  # ended since enumerate(): its last reading stays below
            seen.add(key)
            last = self._threads.get(key)
            if last is not None and ns < last[1]:  # a new thread with the same ids
                self._ended[last[0]] = self._ended.get(last[0], 0) + last[1]
            self._threads[key] = (component, ns)
        for key in [k for k in self._threads if k not in seen]:  # ended: keep what it had used
            component, ns = self._threads.pop(key)
            self._ended[component] = self._ended.get(component, 0) + ns


CLOCK = OverheadClock()
per_process.register(__name__, reset=CLOCK.__init__)  # the same object: others imported it by name


def _observe(options: CallbackOptions) -> Iterable[Observation]:
    try:
        totals = CLOCK.totals()
    except Exception:  # noqa: BLE001 - a failed reading must not fail the whole collection
        warn_once("overhead metric", "otel_verl.overhead.cpu_time could not be read", exc_info=True)
        return []
    return [Observation(seconds, {semconv.ATTR_OVERHEAD_COMPONENT: c}) for c, seconds in totals.items()]


_METRIC = SelfMetrics((catalog.OVERHEAD_CPU_TIME, _observe))


def register_overhead_metric(meter: Any) -> bool:
    """Add ``otel_verl.overhead.cpu_time`` to ``meter`` once; False when it was there already."""
    return _METRIC.register(meter)
