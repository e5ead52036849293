"""Generation health over a run, for ``summary`` and ``report``: each degenerate kind's share of the
training responses (the validation ones kept apart) and its worst step, from the agent-loop workers'
``verl.rollout.degenerate_ratio`` gauges (``hooks/rollout/health.py``: a step's share of each kind
in one worker).

A worker sets its gauge when a step's responses in it are all scored, and a cumulative gauge is
exported with every later export of the worker until it is set again. So each point is placed at
the training step in which it was exported (by its time: the last ``verl.step`` span that started at
or before it; before the first one, step 0: the validation before training), and:

- a worker's share in a step is its latest point there (a repeat of the same value when the step's
  responses were scored before an export that repeated the last step's);
- a step's share is the mean over the workers that reported in it (as the alert's ``avg by``);
- the run's share is the mean over the steps that have one (each step counts once: verl's steps
  have one batch size, which its agent-loop workers share equally);
- the worst step is the one with the largest share (the earliest of equal ones).

A worker that scored nothing of a kind of rollout in a step repeats its last value there: a
validation's share counts in every step until the next validation.

The alert ``VerlRolloutDegenerateResponses`` (``collector/prometheus/rules``) fires on the
repetitive or empty share of training responses above ``ALERT_THRESHOLD``; the health finding uses
that threshold on the run's share (a test checks the rule's text against these constants). The
length-limit share is reported, never a finding: how many responses a healthy run truncates
depends on the task and the limit.

Memory: per (validate flag, kind) seen, two numbers per step in flat arrays (the reading holds the
steps' spans anyway), and per worker series its latest point; not the points.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from otel_verl import semconv
from otel_verl.offline.folds import Fold, Steps

ALERT = "VerlRolloutDegenerateResponses"
ALERT_THRESHOLD = 0.2  # the alert's: a share above it is a finding
# the kinds the alert and the finding watch, in the order both tools name the kinds
ALERT_KINDS = (semconv.DEGENERATE_REPETITIVE, semconv.DEGENERATE_EMPTY)
KINDS = (*ALERT_KINDS, semconv.DEGENERATE_LENGTH_LIMIT)


def percent(share: float) -> str:
    """A share as both tools write it (three significant digits: 12.5%, 30%, 0%)."""
    return f"{100 * share:.3g}%"


@dataclass(frozen=True)
class KindShare:
    """One degenerate kind's share of the training (or validation) responses over the run."""

    share: float  # the mean of the steps' shares
    steps: int  # steps with a share
    worst_step: int  # the step with the largest share (0: before the first step)
    worst: float  # its share

    @property
    def alerting(self) -> bool:
        """Above the alert's threshold (``ALERT_KINDS`` only make a finding)."""
        return self.share > ALERT_THRESHOLD


@dataclass(frozen=True)
class Generation:
    """kind -> its share, of the training responses and of the validation ones (kinds in ``KINDS``
    order, those the run reported)."""

    training: dict[str, KindShare]
    validation: dict[str, KindShare]

    def alerting(self) -> list[str]:
        """The kinds whose training share is above the alert's threshold."""
        return [k for k in ALERT_KINDS if k in self.training and self.training[k].alerting]


def _validate_flag(value: str) -> bool | None:
    text = value.strip().lower()
    return True if text == "true" else False if text == "false" else None


class GenerationFold(Fold):
    """The run's ``verl.rollout.degenerate_ratio`` points folded one export at a time (a listener of
    ``exports.StepGauges``); ``steps``: (step, span start, span end) in ns, as the first reading of
    the spans found them."""

    READS = frozenset({semconv.M_ROLLOUT_DEGENERATE_RATIO})  # the points of an export it is handed

    def __init__(self, steps: Sequence[tuple[int, int, int]] = ()) -> None:
        ordered = sorted(steps, key=lambda s: (s[1], s[0]))
        self._starts = array("q", (start for _, start, _ in ordered))
        self._numbers = array("q", [0, *(n for n, _, _ in ordered)])  # slot -> step (slot 0: before the first)
        self._sums: dict[tuple[bool, str], array] = {}  # (validate, kind) -> slot -> sum of the workers' shares
        self._counts: dict[tuple[bool, str], array] = {}  # ... -> slot -> workers
        self._latest: dict[tuple[str, bool, str], list] = {}  # (worker, validate, kind) -> [slot, time, share]

    def on_steps(self, steps: Steps) -> None:
        self.__init__(steps.at)  # type: ignore[misc]

    def export(self, who: str, time_ns: int, step: int | None, group: list) -> None:
        for name, attrs, value, kind, _ in group:
            if name != semconv.M_ROLLOUT_DEGENERATE_RATIO or kind != "gauge":
                continue
            a = dict(attrs)
            validate = _validate_flag(str(a.get(semconv.ATTR_ROLLOUT_VALIDATE, "")))
            which = a.get(semconv.ATTR_ROLLOUT_DEGENERATE_KIND)
            if validate is None or which not in KINDS or not (math.isfinite(value) and 0.0 <= value <= 1.0):
                continue  # not a share this fold knows (a hostile file bounds nothing here)
            slot = bisect_right(self._starts, time_ns)
            key = (who, validate, which)
            held = self._latest.get(key)
            if held is None:
                self._latest[key] = [slot, time_ns, value]
            elif slot > held[0]:
                self._add(validate, which, held[0], held[2])
                held[:] = [slot, time_ns, value]
            elif slot == held[0] and time_ns >= held[1]:
                held[1], held[2] = time_ns, value
            # else: older than the series' latest point (a process's exports come in time order)

    def _add(self, validate: bool, kind: str, slot: int, share: float) -> None:
        sums = self._sums.get((validate, kind))
        if sums is None:
            sums = self._sums[(validate, kind)] = array("d", bytes(8 * len(self._numbers)))
            self._counts[(validate, kind)] = array("I", bytes(4 * len(self._numbers)))
        sums[slot] += share
        self._counts[(validate, kind)][slot] += 1

    def close(self) -> Generation | None:
        """Every export folded: each kind's share, or None when no worker reported one."""
        for (_, validate, kind), (slot, _, share) in self._latest.items():
            self._add(validate, kind, slot, share)
        self._latest.clear()
        if not self._sums:
            return None
        out: dict[bool, dict[str, KindShare]] = {False: {}, True: {}}
        for validate, kind in sorted(self._sums, key=lambda vk: (vk[0], KINDS.index(vk[1]))):
            sums, counts = self._sums[(validate, kind)], self._counts[(validate, kind)]
            total, steps, worst, worst_slot = 0.0, 0, -1.0, 0
            for slot, n in enumerate(counts):
                if n:
                    share = sums[slot] / n
                    total += share
                    steps += 1
                    if share > worst:
                        worst, worst_slot = share, slot
            out[validate][kind] = KindShare(total / steps, steps, self._numbers[worst_slot], worst)
        return Generation(out[False], out[True])
