"""``IdleExport``: exports of a process that has no step boundary of its own, when its work pauses.

Worker ranks, reward-loop workers and rollout servers serve calls and never see a step end. They
export when their last running call ends:

* spans at once: Ray may end the actor without ``atexit`` soon after the job's last call (worker
  ranks within milliseconds of the last update; reward workers ~0.5 s after the last score, so
  waiting for the metric gap lost the last step's spans: seen in CI). Processes idle after almost
  every call (reward workers, servers: ``coalesce_spans``) may wait until
  ``telemetry.SPAN_FLUSH_GAP_S`` (0.1 s) after the previous span export, so calls ending close
  together share one;
* metrics at most once per ``gap_s`` (1 s), from the background recorder thread: a collection
  and its export cost about the same however few points they hold, and a worker rank serves several driver
  calls a step (``compute_log_prob``, ``update_actor``, ...), a reward worker one per trajectory.
  Calls that end while an export waits join it. What a process's last second recorded may be
  cut short at the job's end: these metrics (``process.*``, ``hw.gpu.*``, otel-verl's own cost,
  user metrics) are sampled, not per-step values.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from otel_verl.process.state import PROCESS

if TYPE_CHECKING:  # the SDK is imported where the pipeline is built, not with the hooks
    from otel_verl.process.telemetry import Telemetry

IDLE_EXPORT_GAP_S = 1.0


class IdleExport:
    """Counts the calls running in this process and exports when none is."""

    def __init__(self, gap_s: float = IDLE_EXPORT_GAP_S, *, coalesce_spans: bool = True) -> None:
        self.gap_s = gap_s
        self.coalesce_spans = coalesce_spans
        self.in_flight = 0
        self._lock = threading.Lock()  # a worker rank's sync and async methods run on two threads
        self._pending = False  # a metric export is queued: later idle moments join it
        self._last = 0.0  # time.monotonic() of the last one

    def begin(self) -> None:
        with self._lock:
            self.in_flight += 1

    def end(self) -> None:
        with self._lock:
            self.in_flight -= 1
            if self.in_flight > 0:
                return
            queue, self._pending = not self._pending, True
        telemetry = PROCESS.telemetry  # the pipeline of now, not of when the export runs
        telemetry.request_flush(coalesce=self.coalesce_spans)
        if queue:
            telemetry.submit(lambda: self._export(telemetry))

    def _export(self, telemetry: Telemetry) -> None:
        wait = self._last + self.gap_s - time.monotonic()
        if wait > 0:
            telemetry.sleep(wait)  # the background recorder thread, never verl's; less when the pipeline ends
        with self._lock:
            self._pending = False
        self._last = time.monotonic()
        telemetry.mark_step()  # the spans' flush was asked for when the work paused
