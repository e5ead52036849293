"""Goodput: each step's seconds per role in four buckets, from the step's time categories.

The step's account (``hooks.accounting``: every second of the step in one ``verl.time.category``) is
read per role, the same seconds for each role (a role's wall time is the step's):

* ``trainer`` (the actor, critic and ref worker pools, as the TaskRunner drives them):
  ``productive`` = ``training``; ``overhead`` = ``weight_sync``, ``checkpoint``, ``validation``,
  ``driver``, ``other`` (the trainer's own work between its calls); ``idle`` = ``rollout``,
  ``waiting``, ``poll_lag`` (the trainer waiting for rollouts); ``wasted`` = 0.
* ``rollout`` (the replicas and their agent loop): its generation is ``rollout`` + ``waiting``
  (the seconds the trainer generated or waited for rollouts still being generated), split into
  ``wasted`` (the share of that generation that made rollouts verl did not train on: ``wasted_share``)
  and ``productive`` (the rest); ``overhead`` = ``weight_sync``, ``validation``; ``idle`` = the
  rest of the step (the rollouts waiting for the trainer: ``training``, ``checkpoint``, ``driver``,
  ``other``, ``poll_lag``).

Both partition the step. The wasted share is verl's own figures of the step (its ``Tracking.log``
values, which come after the step's span ended: the account waits for them): ``D`` prompt groups
generated and dropped (``semconv.DROPPED_GROUP_KEYS``: DAPO's filtered groups and discarded surplus,
stale off-policy groups, failed groups refilled), the share ``a`` of the trained batch's samples
that were aborted (``response/aborted_ratio``: no response, no gradient), and the ``B`` prompt
groups a step trains on (``data.train_batch_size``): ``(D + a * B) / (D + B)``. That is a share by
count: the TaskRunner does not know each dropped rollout's seconds.

What the account does not say: the replicas' own clock (v1 ``colocate_async``'s replicas also
generate during the training stages: ``verl.rollout.replica.busy_time``), trajectories that failed
in the agent loop and were left out of the batch without verl counting them (the offline tools
count them from ``verl.rollout.trajectory.duration``), and time outside the steps (start-up,
validation outside a step, shutdown: the offline tools add it to ``overhead``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from otel_verl import semconv
from otel_verl._values import as_float
from otel_verl.semconv import (
    TIME_POLL_LAG,
    TIME_ROLLOUT,
    TIME_TRAINING,
    TIME_VALIDATION,
    TIME_WAITING,
    TIME_WEIGHT_SYNC,
)

TRAINER, ROLLOUT = semconv.GOODPUT_TRAINER, semconv.GOODPUT_ROLLOUT
PRODUCTIVE, OVERHEAD, IDLE, WASTED = (
    semconv.GOODPUT_PRODUCTIVE,
    semconv.GOODPUT_OVERHEAD,
    semconv.GOODPUT_IDLE,
    semconv.GOODPUT_WASTED,
)
ROLES = (TRAINER, ROLLOUT)
BUCKETS = (PRODUCTIVE, OVERHEAD, IDLE, WASTED)

# category -> its bucket per role; the rollout role's GENERATION is split by the wasted share.
GENERATION = "generation"
TRAINER_BUCKET = {
    TIME_TRAINING: PRODUCTIVE,
    TIME_ROLLOUT: IDLE,
    TIME_WAITING: IDLE,
    TIME_POLL_LAG: IDLE,
}  # the rest: OVERHEAD
ROLLOUT_BUCKET = {
    TIME_ROLLOUT: GENERATION,
    TIME_WAITING: GENERATION,
    TIME_WEIGHT_SYNC: OVERHEAD,
    TIME_VALIDATION: OVERHEAD,
}  # the rest: IDLE


def step_goodput(seconds: Mapping[str, float], wasted_share: float = 0.0) -> dict[tuple[str, str], float]:
    """(role, bucket) -> seconds of one step, from its categories' seconds; the buckets of each role
    add up to the step."""
    share = min(max(wasted_share, 0.0), 1.0) if math.isfinite(wasted_share) else 0.0
    out = {(role, bucket): 0.0 for role in ROLES for bucket in BUCKETS}
    generation = 0.0
    for category, value in seconds.items():
        value = max(0.0, value) if math.isfinite(value) else 0.0
        out[(TRAINER, TRAINER_BUCKET.get(category, OVERHEAD))] += value
        bucket = ROLLOUT_BUCKET.get(category, IDLE)
        if bucket == GENERATION:
            generation += value
        else:
            out[(ROLLOUT, bucket)] += value
    out[(ROLLOUT, WASTED)] = generation * share
    out[(ROLLOUT, PRODUCTIVE)] = generation - out[(ROLLOUT, WASTED)]
    return out


def dropped_groups(data: Mapping[str, Any]) -> float:
    """Prompt groups the step generated and did not train on, as verl logged them (0 when it logged none)."""
    total = 0.0
    for key in semconv.DROPPED_GROUP_KEYS:
        value = as_float(data.get(key))
        if value is not None and math.isfinite(value) and value > 0:
            total += value
    return total


def wasted_share(dropped: float, aborted_ratio: float | None, batch_groups: int | None) -> float:
    """The share of a step's generation that made rollouts it did not train on: ``(D + a * B) / (D + B)``
    (module docstring); without ``B`` (an unknown config), the aborted share alone when nothing was
    dropped, else 0 (not known)."""
    aborted = aborted_ratio if aborted_ratio is not None and math.isfinite(aborted_ratio) else 0.0
    aborted = min(max(aborted, 0.0), 1.0)
    if batch_groups is None or batch_groups <= 0:
        return aborted if dropped <= 0 else 0.0
    return (dropped + aborted * batch_groups) / (dropped + batch_groups)


def step_waste(data: Mapping[str, Any], batch_groups: int | None) -> tuple[float, float]:
    """(dropped groups, wasted share) of the step whose ``Tracking.log`` values are ``data``."""
    dropped = dropped_groups(data)
    return dropped, wasted_share(dropped, as_float(data.get(semconv.ABORTED_RATIO_KEY)), batch_groups)
