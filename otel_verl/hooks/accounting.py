"""Where a step's time went: every second of a ``verl.step`` in one category, from its stage spans.

Fed by the step and stage spans (``stages``) and the ``verl.wait`` spans (``waits``) the TaskRunner
already makes, on its training thread (two clock reads and a dict update per stage). At the end
of each step the categories partition the step's duration exactly:

* ``rollout``: the ``gen`` stage (v0: the agent loop's batch; v1: what the replay buffer's wait
  does not cover);
* ``waiting``: ``verl.wait`` in the step while rollouts were still being generated (v1: the
  trainer waiting for finished rollouts; both drivers: for the agent-loop workers to start a
  dispatched batch, ``rollout/handoff``); a wait inside another wait counts once;
* ``poll_lag``: the rest of those waits: the rollouts were done, the replay buffer had not polled
  again yet (``poll_lag``: v1 polls TransferQueue every 2 s);
* ``training``: ``old_log_prob``, ``ref``, ``values``, ``reward`` (a colocated reward model),
  ``update_actor``, ``update_critic``;
* ``weight_sync``: ``update_weights`` (trainer -> rollout weights);
* ``checkpoint``: ``save_checkpoint``; ``validation``: ``testing``;
* ``driver``: other stages (``adv``, profiling, dumps): the TaskRunner's own work;
* ``other``: step time outside any stage.

Recorded as ``verl.step.time`` (attribute ``verl.time.category``), put on the step span as
``verl.time.<category>`` attributes, and the trainer's idle ratio (``waiting`` + ``poll_lag``: all
its waits, over the step) as ``verl.trainer.idle_ratio``. Only top-level stages (children of the step span) count.

Per pool (``verl.pool.time``, attributes ``verl.pool.role`` and ``verl.pool.state``): from the same
stage spans, each role's ``busy`` seconds are the stages that hold it (verl's driver blocks on the
pool's result: a worker-group span covers only the dispatch of verl's non-blocking calls, so the
stage, not the ``verl.wg.*`` span, is the pool's busy time), ``waiting`` is the trainer roles'
``verl.wait`` for rollouts, ``idle`` the rest of the step; the three add up to the step. Roles:
``actor`` and ``rollout`` always, ``ref`` / ``critic`` / ``reward`` once a stage of theirs ran.
``verl.rollout.idle_ratio`` is the rollout role's idle / step: the share of the step the trainer
did not hold the replicas. On the sync drivers every LLM call lies inside those stages, so the
replicas' own idle share is at least this (v1 ``sync`` holds them for the replay buffer's 2 s poll
while they generate ~0.5 s); v1 ``colocate_async``'s replicas also generate during the training
stages. The replicas' own busy/idle, from the LLM-call spans of all processes:
``otel_verl.offline.facts.pools``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from otel_verl import per_process, semconv

# The clock every duration of the account is read on (and ``waits``' ``verl.wait`` seconds, which
# it adds up): one seam, so that tests can drive it.
clock: Callable[[], float] = time.perf_counter

# the categories by their short names here; their values are declared once, in semconv
CATEGORIES = semconv.TIME_CATEGORIES
ROLLOUT, WAITING, POLL_LAG, TRAINING, WEIGHT_SYNC, CHECKPOINT, VALIDATION, DRIVER, OTHER = CATEGORIES


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


# ---------------------------------------------------------------- per resource pool (role)
POOL_ACTOR = "actor"
POOL_ROLLOUT = "rollout"
POOL_REF = "ref"
POOL_CRITIC = "critic"
POOL_REWARD = "reward"
POOL_ROLES = (POOL_ACTOR, POOL_ROLLOUT, POOL_REF, POOL_CRITIC, POOL_REWARD)
ALWAYS_ROLES = (POOL_ACTOR, POOL_ROLLOUT)
BUSY = "busy"
POOL_WAITING = "waiting"
IDLE = "idle"
POOL_STATES = (BUSY, POOL_WAITING, IDLE)

# The roles a stage keeps busy: verl's driver waits on those pools' results for the whole stage.
ROLES_OF_STAGE: dict[str, tuple[str, ...]] = {
    "gen": (POOL_ROLLOUT,),  # v0: the agent loop's batch; v1: the replay buffer waiting on generation
    "old_log_prob": (POOL_ACTOR,),
    "ref": (POOL_REF,),
    "values": (POOL_CRITIC,),
    "update_critic": (POOL_CRITIC,),
    "reward": (POOL_REWARD,),  # a colocated reward model (v0 logs ~0 s here: the reward loop streams)
    "update_actor": (POOL_ACTOR,),
    "update_weights": (POOL_ACTOR, POOL_ROLLOUT),  # trainer -> rollout weight transfer
    "save_checkpoint": (POOL_ACTOR,),
    "testing": (POOL_ROLLOUT,),  # validation generation
}


def pool_seconds(
    stages: dict[str, float], waiting: float, total: float, roles: tuple[str, ...] | list[str] = POOL_ROLES
) -> dict[tuple[str, str], float]:
    """(role, state) -> seconds of one step, from its top-level stages' seconds and its wait.

    ``waiting`` (the trainer waiting for rollouts) is the trainer roles' waiting; for the rollout
    role it is busy time (its stage). Busy + waiting + idle = ``total`` for every role.
    """
    held = dict.fromkeys(roles, 0.0)
    for stage, sec in stages.items():  # one pass: this runs on the training thread at each step's end
        for role in ROLES_OF_STAGE.get(stage, ()):
            if role in held:
                held[role] += sec
    out: dict[tuple[str, str], float] = {}
    for role, busy in held.items():
        busy = min(busy, total)
        wait = 0.0 if role == POOL_ROLLOUT else min(waiting, total - busy)
        out[(role, BUSY)] = busy
        out[(role, POOL_WAITING)] = wait
        out[(role, IDLE)] = max(0.0, total - busy - wait)
    return out


def rollout_idle_ratio(pools: dict[tuple[str, str], float]) -> float | None:
    """The rollout role's idle share of the step, or None without one."""
    total = sum(pools.get((POOL_ROLLOUT, state), 0.0) for state in POOL_STATES)
    return pools[(POOL_ROLLOUT, IDLE)] / total if total > 0 else None


class StepAccount:
    """The open step of this process (the TaskRunner's training thread).

    Every method reads and writes its state under its one lock: the stage and wait hooks that
    feed it need not run on one thread (an async trainer's replay buffer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget the run: what a new process's account holds (each test's instrumented process)."""
        self._step_id: int | None = None  # span id of the open verl.step
        self._step_start = 0.0
        self._open: dict[int, float] = {}  # span id of an open top-level stage -> clock() at start
        self._last_stage_end = 0.0  # clock() when the step's last top-level stage ended
        self._waits = 0  # waits open now (one inside another counts once)
        self._seconds: dict[str, float] = {}
        self._waiting_in_stage = 0.0  # verl.wait seconds inside the open top-level stage
        self._lag_in_stage = 0.0  # of those, the seconds after the rollouts were done (poll lag)
        self._stages: dict[str, float] = {}  # top-level stage -> seconds in this step
        self._roles: list[str] = list(ALWAYS_ROLES)  # pool roles seen in this run
        self.last_pools: dict[tuple[str, str], float] | None = None  # of the last step that ended
        self._lag_measured = False  # a wait of this step told its poll lag
        self.last_poll_lag: float | None = None  # of the last step that ended, when one was measured

    def step_started(self, span_id: int) -> None:
        with self._lock:
            self._step_id, self._step_start = span_id, clock()
            self._last_stage_end = self._step_start
            self._open.clear()
            self._seconds = dict.fromkeys(CATEGORIES, 0.0)
            self._waiting_in_stage = self._lag_in_stage = 0.0
            self._stages = {}
            self.last_pools = None
            self._lag_measured, self.last_poll_lag = False, None

    def stage_started(self, span_id: int, parent_id: int | None) -> None:
        with self._lock:
            if self._step_id is not None and parent_id == self._step_id:
                self._open[span_id] = clock()

    def wait_started(self) -> bool:
        """A wait begins (pass what this returns to ``wait_ended``): False inside another wait."""
        with self._lock:
            self._waits += 1
            return self._waits == 1

    def wait_ended(self, seconds: float, outermost: bool | None = None, lag: float | None = None) -> None:
        """A wait of ``seconds`` ended: ``waiting`` time of the step, the last ``lag`` of them after
        its rollouts were done (``poll_lag``; None: not known). ``outermost``: what its
        ``wait_started`` said (None: a wait measured after the fact, counted unless one is open)."""
        with self._lock:
            if outermost is not None:
                self._waits = max(0, self._waits - 1)
            elif self._waits:
                return  # inside a wait that counts this time already
            if outermost is False or self._step_id is None:
                return
            if self._open:
                self._waiting_in_stage += seconds
                if lag is not None:
                    self._lag_in_stage += min(max(lag, 0.0), seconds)
                    self._lag_measured = True
            else:  # between stages (v1 dispatches in prepare_step): out of "other", never more than it
                self._seconds[WAITING] += min(seconds, max(0.0, clock() - self._last_stage_end))

    def stage_ended(self, span_id: int, stage: str) -> None:
        with self._lock:
            start = self._open.pop(span_id, None)
            if start is None:
                return
            self._last_stage_end = clock()
            seconds = self._last_stage_end - start
            waiting = min(self._waiting_in_stage, seconds)
            lag = min(self._lag_in_stage, waiting)
            self._waiting_in_stage = self._lag_in_stage = 0.0
            self._seconds[WAITING] += waiting - lag
            self._seconds[POLL_LAG] += lag
            self._seconds[category_of(stage)] += seconds - waiting
            self._stages[stage] = self._stages.get(stage, 0.0) + seconds
            for role in ROLES_OF_STAGE.get(stage, ()):
                if role not in self._roles and seconds > 0.001:  # v0's always-run ~0 s reward stage
                    self._roles.append(role)

    def step_ended(self, span_id: int) -> dict[str, float] | None:
        """The step's seconds by category (they add up to the step), or None if it was not open."""
        with self._lock:
            if span_id != self._step_id:
                return None
            total = clock() - self._step_start
            seconds, self._step_id = self._seconds, None
            seconds[OTHER] = max(0.0, total - sum(v for k, v in seconds.items() if k != OTHER))
            self.last_poll_lag = seconds[POLL_LAG] if self._lag_measured else None
            self.last_pools = pool_seconds(self._stages, seconds[WAITING] + seconds[POLL_LAG], total, self._roles)
            return seconds


ACCOUNT = StepAccount()


def step_span_attributes(
    seconds: dict[str, float], pools: dict[tuple[str, str], float] | None = None
) -> dict[str, Any]:
    """``verl.time.<category>`` and ``verl.pool.<role>.<state>`` attributes of the step span."""
    attrs: dict[str, Any] = {semconv.ATTR_TIME_PREFIX + k: round(v, 6) for k, v in seconds.items()}
    for (role, state), value in (pools or {}).items():
        attrs[f"{semconv.ATTR_POOL_PREFIX}{role}.{state}"] = round(value, 6)
    return attrs


def idle_ratio(seconds: dict[str, float]) -> float:
    """The trainer's share of the step spent waiting for rollouts, its poll lag included (verl's
    async modes' idle ratio)."""
    total = sum(seconds.values())
    return (seconds[WAITING] + seconds.get(POLL_LAG, 0.0)) / total if total > 0 else 0.0


per_process.register(__name__, reset=ACCOUNT.reset)
