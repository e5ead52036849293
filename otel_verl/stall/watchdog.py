"""In the TaskRunner: the step clock, and the decision that training stalled (or resumed).

The stage hook tells the clock when a step starts and ends. A daemon thread checks it every few
seconds: when no step has finished for ``OTEL_VERL_STALL_AFTER`` (``auto``: 10x the median of the
last 20 steps, at least ``FLOOR_S``), it records ``verl.training.stalled`` = 1, emits a
``verl.training.stalled`` log record and a console line, and publishes the stall on the job board, so
that every process reports its stacks; it publishes again every ``OTEL_VERL_STALL_AFTER`` while the
stall lasts (a bounded rate), and says when a step completes again.

Validation and checkpoint saves (``LONG_STAGES``: verl's ``testing`` and ``save_checkpoint``
stages, and the validation before training) may take far longer than a training step, so the
clock knows the stage in progress: such a stage counts as progress for as long as that stage
usually takes (the median of its own last 20 runs; the first time, the stall limit itself), and
only its time beyond that counts towards the limit. A slow validation is no stall; a validation
that hangs is one, once it has run its usual time plus the limit.

A stall inside a wait is said with what that wait waits for, from the hook that watches the wait
(``add_wait_note``: v1's wait for rollouts, ``hooks.waiting_for``, gives the groups pending, running
and finished of the number needed, and the oldest still in flight).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from opentelemetry._logs import SeverityNumber

from otel_verl import job_board, per_process, semconv
from otel_verl._safe import safe
from otel_verl.config import settings
from otel_verl.process.state import PROCESS

# What the trainer waits for when it stalls inside a wait: the attributes and words for the stall's
# record, or None (not in that wait). The hook that watches the wait registers its note (the stall
# doctor imports no hook).
WaitNote = Callable[[], tuple[dict[str, Any], str] | None]
_WAIT_NOTES: list[WaitNote] = []


def add_wait_note(note: WaitNote) -> None:
    """Have a stall's record and console line say ``note()`` when it is not None (once per function)."""
    if note not in _WAIT_NOTES:
        _WAIT_NOTES.append(note)


FLOOR_S = 600.0  # auto: never sooner than 10 minutes (first steps compile, load, warm up)
AUTO_FACTOR = 10.0
VALIDATION = "testing"  # verl's timer name of a validation inside the loop; the first one reuses it
CHECKPOINT = "save_checkpoint"
LONG_STAGES = frozenset({VALIDATION, CHECKPOINT})
STAGE_WORDS = {VALIDATION: "validation", CHECKPOINT: "checkpoint save"}


class StepClock:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget the run: what a new process's clock holds."""
        self.step: int | None = None  # the step in progress, or the last one
        self.context: Any = None  # its span context
        self.started: float | None = None
        self.last_end: float | None = None  # monotonic; the fit's start before the first step
        self.durations: deque[float] = deque(maxlen=20)
        self.stage: tuple[str, float] | None = None  # the long stage in progress and its start
        self.excluded = 0.0  # seconds since last_end of long stages that ran no longer than usual
        self.stage_durations: dict[str, deque[float]] = {}

    def fit_started(self) -> None:
        with self.lock:
            self.last_end = time.monotonic()

    def step_started(self, step: int | None, context: Any) -> None:
        with self.lock:
            self.step, self.context, self.started = step, context, time.monotonic()
            if self.last_end is None:
                self.last_end = self.started

    def step_ended(self, now: float | None = None) -> None:
        with self.lock:
            now = time.monotonic() if now is None else now
            if self.started is not None:
                self.durations.append(now - self.started)
            self.last_end, self.started = now, None
            self.excluded = 0.0

    def usual(self, stage: str, limit: float) -> float:
        """How long ``stage`` may run and still count as progress: the median of its last runs,
        or ``limit`` before its first run ended (call with the lock held)."""
        runs = self.stage_durations.get(stage)
        return statistics.median(runs) if runs else limit

    def stage_started(self, stage: str, now: float | None = None) -> None:
        """A validation or checkpoint save starts (``LONG_STAGES``; other stages are not told)."""
        with self.lock:
            if self.stage is None:
                self.stage = (stage, time.monotonic() if now is None else now)

    def stage_ended(self, stage: str, now: float | None = None) -> None:
        limit = limit_s()
        with self.lock:
            if self.stage is None or self.stage[0] != stage:
                return
            ran = (time.monotonic() if now is None else now) - self.stage[1]
            if limit is not None:
                self.excluded += min(ran, self.usual(stage, limit))
            self.stage_durations.setdefault(stage, deque(maxlen=20)).append(ran)
            self.stage = None

    def without_progress(self, now: float, limit: float) -> tuple[float, float, tuple[str, float, float] | None]:
        """(seconds since the last step ended, of them the seconds that count towards ``limit``,
        and the long stage in progress as (stage, seconds it has run, its usual seconds) or None)."""
        with self.lock:
            assert self.last_end is not None
            since = now - self.last_end
            counted = since - self.excluded
            stage = None
            if self.stage is not None:
                name, start = self.stage
                ran, usual = max(0.0, now - start), self.usual(name, limit)
                counted -= min(ran, usual)
                stage = (name, ran, usual)
            return since, max(0.0, counted), stage


STEP_CLOCK = StepClock()


def limit_s() -> float | None:
    """Seconds without a finished step that count as a stall; None: the stall doctor is off."""
    configured = settings().stall_after_s
    if configured is not None:
        return configured if configured > 0 else None
    durations = list(STEP_CLOCK.durations)
    auto = AUTO_FACTOR * statistics.median(durations) if durations else 0.0
    return max(FLOOR_S, auto)


class Watchdog:
    def __init__(self) -> None:
        self.episode = 0
        self.seq = 0
        self.stalled_since: float | None = None
        self.published_at = 0.0
        self.ended_at_stall: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None and limit_s() is not None and settings().run_id:
            # Each thread gets an event of its own: a stopped one still waiting must see it set,
            # never cleared again by the next start (two watchdogs would then run).
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._stop,), name="otel-verl-stall-watch", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """End of ``fit``, ``uninstrument()``: the thread ends at its next wake-up."""
        self._stop.set()
        self._thread = None

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self._interval()):
            self.check()

    @staticmethod
    def _interval() -> float:
        limit = limit_s()
        return 5.0 if limit is None else min(5.0, max(limit / 4, 0.5))

    @safe("stall watchdog")
    def check(self, now: float | None = None) -> str | None:
        """One look at the clock; returns what it did (``stalled``, ``repeated``, ``resumed``) or None."""
        limit = limit_s()
        with STEP_CLOCK.lock:
            last_end, step, context = STEP_CLOCK.last_end, STEP_CLOCK.step, STEP_CLOCK.context
            # verl validates after its step span ended and before it logs the step: still that step
            in_progress = STEP_CLOCK.started is not None or STEP_CLOCK.stage is not None
        if limit is None or last_end is None:
            return None
        now = time.monotonic() if now is None else now
        since, counted, stage = STEP_CLOCK.without_progress(now, limit)
        if self.stalled_since is not None and last_end > self.ended_at_stall:  # type: ignore[operator]
            self._resumed(step, now - self.stalled_since)
            return "resumed"
        if counted <= limit:
            return None
        current = step if in_progress or step is None else step + 1
        if self.stalled_since is None:
            self.episode += 1
            self.seq = 1
            self.stalled_since, self.ended_at_stall = now, last_end
            self._publish(current, context, since, limit, now)
            self._stalled(current, since, limit, stage)
            return "stalled"
        if now - self.published_at >= limit:
            self.seq += 1
            self._publish(current, context, since, limit, now)
            return "repeated"
        return None

    def _publish(self, step: int | None, context: Any, since: float, limit: float, now: float) -> None:
        doc: dict[str, Any] = {"state": "stalled", "episode": self.episode, "seq": self.seq}
        doc.update(stalled_s=round(since, 3), limit_s=limit)
        if step is not None:
            doc["step"] = step
        if context is not None and getattr(context, "is_valid", False):
            doc["trace_id"] = format(context.trace_id, "032x")
            doc["span_id"] = format(context.span_id, "016x")
        job_board.publish(str(settings().run_id), doc)
        self.published_at = now

    def _emit(self, event: str, text: str, severity: SeverityNumber, attrs: dict[str, Any]) -> None:
        print(text, file=sys.stdout, flush=True)
        provider = PROCESS.logger_provider()
        if provider is not None:
            attrs = {**attrs, semconv.ATTR_EVENT_NAME: event}  # where Loki and VictoriaLogs keep it
            provider.get_logger(semconv.SCOPE).emit(
                event_name=event, body=text, severity_number=severity, severity_text=severity.name, attributes=attrs
            )
        PROCESS.instruments.training.stalled.set(1 if event == semconv.EVENT_TRAINING_STALLED else 0)
        PROCESS.telemetry.export_soon()  # no step boundary comes to export it

    def _stalled(
        self, step: int | None, since: float, limit: float, stage: tuple[str, float, float] | None = None
    ) -> None:
        attrs: dict[str, Any] = {semconv.ATTR_STALL_EPISODE: self.episode, semconv.ATTR_STALL_SECONDS: since}
        if step is not None:
            attrs[semconv.ATTR_STEP] = step
        where = ""
        if stage is not None:
            name, ran, usual = stage
            attrs[semconv.ATTR_STAGE] = name
            where = f" in its {STAGE_WORDS.get(name, name)}, running for {ran:.0f} s (usually {usual:.0f} s)"
        for note in tuple(_WAIT_NOTES):  # the trainer inside a wait: what it waits for
            said = note()
            if said is not None:
                attrs.update(said[0])
                where += f", {said[1]}"
                break
        text = (
            f"otel-verl: no training step has finished for {since:.0f} s (limit {limit:.0f} s, step {step} in "
            f"progress){where}: every verl process reports its threads' stacks (log records verl.stall.stacks)"
        )
        self._emit(semconv.EVENT_TRAINING_STALLED, text, SeverityNumber.WARN, attrs)

    def _resumed(self, step: int | None, lasted: float) -> None:
        job_board.publish(str(settings().run_id), {"state": "resumed", "episode": self.episode, "seq": self.seq})
        attrs: dict[str, Any] = {semconv.ATTR_STALL_EPISODE: self.episode, semconv.ATTR_STALL_SECONDS: lasted}
        if step is not None:
            attrs[semconv.ATTR_STEP] = step
        text = f"otel-verl: training resumed: step {step} finished after a stall of {lasted:.0f} s"
        self._emit(semconv.EVENT_TRAINING_RESUMED, text, SeverityNumber.INFO, attrs)
        self.stalled_since = self.ended_at_stall = None


WATCHDOG = Watchdog()


def _forget() -> None:
    WATCHDOG.stop()
    WATCHDOG.__init__()  # type: ignore[misc] - the object stays: hooks imported it by name
    STEP_CLOCK.reset()


per_process.register(__name__, reset=_forget)
