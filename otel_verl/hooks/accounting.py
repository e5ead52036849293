"""Where a step's time went: every second of a ``verl.step`` in one category, from its stage spans.

Fed by the step and stage spans (``stages``) and the ``verl.wait`` spans (``waits``) the TaskRunner
already makes, on its training thread (two clock reads and a dict update per stage). At the end
of each step the categories partition the step's duration exactly:

* ``rollout``: the ``gen`` stage (v0: the agent loop's batch; v1: what the replay buffer's wait
  does not cover);
* ``waiting``: ``verl.wait`` inside any stage (v1: the trainer waiting for finished rollouts);
* ``training``: ``old_log_prob``, ``ref``, ``values``, ``reward`` (a colocated reward model),
  ``update_actor``, ``update_critic``;
* ``weight_sync``: ``update_weights`` (trainer -> rollout weights);
* ``checkpoint``: ``save_checkpoint``; ``validation``: ``testing``;
* ``driver``: other stages (``adv``, profiling, dumps): the TaskRunner's own work;
* ``other``: step time outside any stage.

Recorded as ``verl.step.time`` (attribute ``verl.time.category``), put on the step span as
``verl.time.<category>`` attributes, and the trainer's idle ratio (``waiting`` / step) as
``verl.trainer.idle_ratio``. Only top-level stages (children of the step span) count.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from otel_verl import semconv

ROLLOUT = "rollout"
WAITING = "waiting"
TRAINING = "training"
WEIGHT_SYNC = "weight_sync"
CHECKPOINT = "checkpoint"
VALIDATION = "validation"
DRIVER = "driver"
OTHER = "other"
CATEGORIES = (ROLLOUT, WAITING, TRAINING, WEIGHT_SYNC, CHECKPOINT, VALIDATION, DRIVER, OTHER)

CATEGORY_OF_STAGE = {
    "gen": ROLLOUT,
    "old_log_prob": TRAINING,
    "ref": TRAINING,
    "values": TRAINING,
    "reward": TRAINING,
    "update_actor": TRAINING,
    "update_critic": TRAINING,
    "update_weights": WEIGHT_SYNC,
    "save_checkpoint": CHECKPOINT,
    "testing": VALIDATION,
}


def category_of(stage: str) -> str:
    return CATEGORY_OF_STAGE.get(stage, DRIVER)


class StepAccount:
    """The open step of this process (the TaskRunner's training thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._step_id: int | None = None  # span id of the open verl.step
        self._step_start = 0.0
        self._open: dict[int, float] = {}  # span id of an open top-level stage -> perf_counter at start
        self._seconds: dict[str, float] = {}
        self._waiting_in_stage = 0.0  # verl.wait seconds inside the open top-level stage

    def step_started(self, span_id: int) -> None:
        with self._lock:
            self._step_id, self._step_start = span_id, time.perf_counter()
            self._open.clear()
            self._seconds = dict.fromkeys(CATEGORIES, 0.0)
            self._waiting_in_stage = 0.0

    def stage_started(self, span_id: int, parent_id: int | None) -> None:
        if self._step_id is not None and parent_id == self._step_id:
            self._open[span_id] = time.perf_counter()

    def wait_ended(self, seconds: float) -> None:
        if self._step_id is not None and self._open:
            self._waiting_in_stage += seconds

    def stage_ended(self, span_id: int, stage: str) -> None:
        start = self._open.pop(span_id, None)
        if start is None:
            return
        with self._lock:
            seconds = time.perf_counter() - start
            waiting = min(self._waiting_in_stage, seconds)
            self._waiting_in_stage = 0.0
            self._seconds[WAITING] += waiting
            self._seconds[category_of(stage)] += seconds - waiting

    def step_ended(self, span_id: int) -> dict[str, float] | None:
        """The step's seconds by category (they add up to the step), or None if it was not open."""
        with self._lock:
            if span_id != self._step_id:
                return None
            total = time.perf_counter() - self._step_start
            seconds, self._step_id = self._seconds, None
            seconds[OTHER] = max(0.0, total - sum(v for k, v in seconds.items() if k != OTHER))
            return seconds


ACCOUNT = StepAccount()


def step_span_attributes(seconds: dict[str, float]) -> dict[str, Any]:
    return {semconv.ATTR_TIME_PREFIX + k: round(v, 6) for k, v in seconds.items()}


def idle_ratio(seconds: dict[str, float]) -> float:
    """The trainer's share of the step spent waiting for rollouts (verl's async modes' idle ratio)."""
    total = sum(seconds.values())
    return seconds[WAITING] / total if total > 0 else 0.0
