"""In every verl process: a daemon thread that reads the job board's stall topic and reports its stacks.

Started when the process imports verl (never in Ray's own daemons), and only with a run id and
the stall doctor on. It reads one small key from Ray's GCS every ``POLL_S`` seconds; for each new
publication of a stall (an episode, or its bounded repeats) it emits this process's stacks
(``stacks.report``). A process that never made telemetry before (a rollout server, a reward
worker) builds its pipeline then, named by its Ray actor class.
"""

from __future__ import annotations

import threading
from typing import Any

from otel_verl import job_board, per_process, semconv
from otel_verl._safe import safe
from otel_verl.config import settings
from otel_verl.process.resource import UNKNOWN_ACTOR, ray_actor_class
from otel_verl.process.state import PROCESS
from otel_verl.stall import stacks

POLL_S = 5.0


class Reporter:
    def __init__(self) -> None:
        self.seen: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        cfg = settings()
        if self._thread is not None or not cfg.run_id or cfg.stall_after_s == 0:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(self._stop,), name=stacks.OWN_THREADS[0], daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """``uninstrument()``: the thread ends at its next wake-up."""
        self._stop.set()
        self._thread = None

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(POLL_S):
            self.poll()

    @safe("stall reporter")
    def poll(self) -> bool:
        """Read the board once; True when this process reported its stacks."""
        state: dict[str, Any] | None = job_board.read(str(settings().run_id))
        if not state or state.get("state") != "stalled":
            return False
        key = (int(state.get("episode", 0)), int(state.get("seq", 0)))
        if key == self.seen:
            return False
        self.seen = key
        actor = ray_actor_class()
        if PROCESS.identity.role == semconv.ROLE_UNKNOWN:  # no hook named it: a rollout server, the driver...
            PROCESS.identify(role=semconv.ROLE_RAY_ACTOR if actor else semconv.ROLE_LAUNCHER)
        return stacks.report(state, None if actor == UNKNOWN_ACTOR else actor)


REPORTER = Reporter()


def _forget() -> None:
    REPORTER.stop()
    REPORTER.seen = None


per_process.register(__name__, reset=_forget)  # no thread, no publication seen


def start_on_verl_import(_module: Any = None) -> None:
    """``verl`` was imported here: this is a verl process, so it reports its stacks on a stall."""
    REPORTER.start()
