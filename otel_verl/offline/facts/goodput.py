"""Goodput by role over a run, for ``summary`` and ``report``: where each role's time went, as
productive / overhead / idle / wasted seconds, from the TaskRunner's ``verl.goodput.time`` counter
(``instruments/goodput.py`` defines the buckets; docs/time.md).

Each export of the TaskRunner names its step (``exports.StepGauges``): a counter's growth since
the same series' previous point (its value, for a delta point) is that step's seconds. The run's
figures are the steps' sums, plus the run's time outside its steps (start-up after the first span,
validation outside a step, logging between steps, shutdown), counted ``overhead`` for each role, so
that each role's buckets add up to the time the run's spans cover. Trajectories that failed or were
cancelled in the agent loop (``verl.rollout.trajectory.duration{verl.rollout.status!=ok}``) were
not trained on either; verl does not count them unless it refills their groups, so they are named
beside the buckets, not in them.

Memory: per role and bucket one sum, and per step kept (the report's rows) its eight figures.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field

from otel_verl import semconv
from otel_verl.instruments.goodput import BUCKETS, OVERHEAD, ROLES, WASTED
from otel_verl.offline.exports import GroupPoint
from otel_verl.offline.folds import Fold, Steps

NAMES = frozenset({semconv.M_GOODPUT_TIME, semconv.M_GOODPUT_DROPPED_GROUPS})
DROPPED = "dropped"  # the key of the dropped groups' counter among the fold's series
Account = dict[tuple[str, str], float]  # (role, bucket) -> seconds


def percent(share: float) -> str:
    """A share as both tools write it (0.5% , 12%, 100%)."""
    return f"{100 * share:.2g}%" if share < 0.1 else f"{100 * share:.0f}%"


@dataclass(frozen=True)
class Goodput:
    """The run's account: ``steps_s`` per (role, bucket) over ``steps`` steps, ``outside_s`` of the
    run outside them (overhead of each role), the dropped prompt groups, and the failed trajectories."""

    steps_s: Account
    steps: int
    outside_s: float = 0.0
    dropped_groups: float = 0.0
    failed: int = 0  # trajectories failed or cancelled in the agent loop (training ones)
    failed_s: float = 0.0  # their seconds (each trajectory's own: they overlap)
    per_step: dict[int, Account] = field(default_factory=dict)  # the steps kept (the report's rows)

    def run_s(self) -> Account:
        """The run's seconds per (role, bucket): the steps' with the time outside them as overhead."""
        out = {(role, b): self.steps_s.get((role, b), 0.0) for role in ROLES for b in BUCKETS}
        for role in ROLES:
            out[(role, OVERHEAD)] += self.outside_s
        return out

    def shares(self, role: str, account: Account | None = None) -> dict[str, float]:
        """bucket -> its share of ``role``'s time in ``account`` (the run's by default)."""
        account = self.run_s() if account is None else account
        total = sum(account.get((role, b), 0.0) for b in BUCKETS)
        return {b: (account.get((role, b), 0.0) / total if total > 0 else 0.0) for b in BUCKETS}

    def _shares_text(self, account: Account | None) -> str:
        parts = []
        for role in ROLES:
            shares = self.shares(role, account)
            parts.append(f"{role} " + ", ".join(f"{b} {percent(shares[b])}" for b in BUCKETS))
        return "; ".join(parts)

    def line(self) -> str:
        """The run's shares by role in words (both tools)."""
        in_steps = sum(self.steps_s.get((ROLES[0], b), 0.0) for b in BUCKETS)
        text = (
            f"of the run's {in_steps + self.outside_s:.1f} s ({in_steps:.1f} s in {self.steps} "
            f"step{'s' if self.steps != 1 else ''}, the {self.outside_s:.1f} s outside them counted overhead): "
            f"{self._shares_text(None)}; in the steps alone: {self._shares_text(self.steps_s)}"
        )
        text += f"; {self.dropped_groups:g} prompt group{'s' if self.dropped_groups != 1 else ''} dropped by verl"
        if self.failed:
            text += (
                f"; {self.failed} trajector{'ies' if self.failed != 1 else 'y'} failed in the agent loop "
                f"({self.failed_s:.2f} s), not trained on and not in {WASTED}"
            )
        return text


class GoodputFold(Fold):
    """``verl.goodput.time`` and ``verl.goodput.dropped_groups`` folded one export at a time (a
    listener of ``exports.StepGauges``, which hands it the export's sums of ``NAMES``); ``keep``:
    the steps whose own figures are kept."""

    READS = NAMES  # the points of an export it is handed (``exports.ExportListener``)

    def __init__(self, keep: Collection[int] = ()) -> None:
        self._keep = keep
        self._last: dict[tuple[str, str, str], float] = {}  # (process, role, bucket) -> cumulative value
        self.totals: Account = {}
        self.dropped = 0.0
        self.per_step: dict[int, Account] = {}

    def on_steps(self, steps: Steps) -> None:
        self._keep = steps.keep

    def export(self, who: str, time_ns: int, step: int | None, group: list[GroupPoint]) -> None:
        for name, attrs, value, kind, temporality in group:
            if kind != "sum" or name not in NAMES or not math.isfinite(value) or value < 0:
                continue
            if name == semconv.M_GOODPUT_DROPPED_GROUPS:
                role, bucket = DROPPED, DROPPED
            else:
                a = dict(attrs)
                role, bucket = a.get(semconv.ATTR_GOODPUT_ROLE), a.get(semconv.ATTR_GOODPUT_BUCKET)
                if role not in ROLES or bucket not in BUCKETS:
                    continue  # not a figure this fold knows
            key = (who, role, bucket)
            if temporality == 1:  # delta
                grown = value
            else:
                last = self._last.get(key, 0.0)
                grown = value - last if value >= last else value  # a lower value: the counter restarted
                self._last[key] = value
            if grown <= 0:
                continue
            if role == DROPPED:
                self.dropped += grown
                continue
            self.totals[(role, bucket)] = self.totals.get((role, bucket), 0.0) + grown
            if step is not None and step in self._keep:
                row = self.per_step.setdefault(step, {})
                row[(role, bucket)] = row.get((role, bucket), 0.0) + grown

    def close(self, steps: int, outside_s: float = 0.0, failed: tuple[int, float] = (0, 0.0)) -> Goodput | None:
        """The run's account (``steps``: its steps; ``outside_s``: its time outside them; ``failed``: the
        count and seconds of its failed trajectories), or None when the run has no goodput figures."""
        if not self.totals:
            return None
        return Goodput(
            dict(self.totals),
            steps,
            max(0.0, outside_s),
            self.dropped,
            failed[0],
            failed[1],
            dict(sorted(self.per_step.items())),
        )
