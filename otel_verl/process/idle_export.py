"""``IdleExport``: exports of a process that has no step boundary of its own, when its work pauses.

The reward-loop workers and the rollout servers serve many concurrent calls and never see a
step end. They export when their last running call ends: spans at once, or within
``telemetry.SPAN_FLUSH_GAP_S`` (0.1 s) of the previous span export (Ray may end the actor
without ``atexit`` ~0.5 s after the job's last step, so waiting for the metric gap lost the last
step's spans: seen in CI), metrics at most once per ``gap_s`` (with rollouts trickling in, v1 and
async, the process is idle after almost every call). Calls that end while an export waits join it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from otel_verl.process.state import PROCESS

if TYPE_CHECKING:  # the SDK is imported where the pipeline is built, not with the hooks
    from otel_verl.process.telemetry import Telemetry

IDLE_EXPORT_GAP_S = 1.0


class IdleExport:
    """Counts the calls running in this process (on its event loop) and exports when none is."""

    def __init__(self, gap_s: float = IDLE_EXPORT_GAP_S) -> None:
        self.gap_s = gap_s
        self.in_flight = 0
        self._pending = False  # a metric export is queued: later idle moments join it
        self._last = 0.0  # time.monotonic() of the last one

    def begin(self) -> None:
        self.in_flight += 1

    def end(self) -> None:
        self.in_flight -= 1
        if self.in_flight > 0:
            return
        telemetry = PROCESS.telemetry  # the pipeline of now, not of when the export runs
        telemetry.request_flush(coalesce=True)  # its last call ends well before the job's last step
        if not self._pending:
            self._pending = True
            telemetry.submit(lambda: self._export(telemetry))

    def _export(self, telemetry: Telemetry) -> None:
        wait = self._last + self.gap_s - time.monotonic()
        if wait > 0:
            time.sleep(wait)  # the background recorder thread, never verl's
        self._pending = False
        self._last = time.monotonic()
        telemetry.export_now()
