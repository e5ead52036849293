"""The rollout latency the trajectories' histogram metric counts (``verl.rollout.trajectory.duration``,
every trajectory, not only those with spans), summed over processes and attribute sets."""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from otel_verl import semconv
from otel_verl.offline.folds import Fold
from otel_verl.offline.otlp_files import MetricPoint
from otel_verl.offline.values import INSTANCE, AttrKeys, attr_key, share


@dataclass
class Histogram:
    bounds: list[float]
    counts: list[int]
    count: int
    total: float


# the statuses of trajectories left out of the batch (``hooks.rollout.state.status_of``)
FAILED_STATUSES = frozenset({semconv.STATUS_ERROR, semconv.STATUS_CANCELLED})


def trajectory_histogram(
    points: Iterable[MetricPoint], validate: bool = False, statuses: Collection[str] | None = None
) -> Histogram | None:
    """The ``verl.rollout.trajectory.duration`` histogram summed over processes and attribute sets
    (``statuses``: of the trajectories that ended so, ``verl.rollout.status``; None: all)."""
    latest: dict[tuple, MetricPoint] = {}
    deltas: list[MetricPoint] = []
    for p in points:
        if p.name != semconv.M_ROLLOUT_TRAJECTORY_DURATION or p.kind != "histogram" or not p.bucket_counts:
            continue
        if bool(p.attributes.get(semconv.ATTR_ROLLOUT_VALIDATE)) != validate:
            continue
        if statuses is not None and p.attributes.get(semconv.ATTR_ROLLOUT_STATUS) not in statuses:
            continue
        if p.temporality == 1:
            deltas.append(p)
            continue
        key = (p.resource.get(INSTANCE), attr_key(p.attributes), p.start_ns)
        if key not in latest or p.time_ns >= latest[key].time_ns:
            latest[key] = p
    chosen = list(latest.values()) + deltas
    if not chosen:
        return None
    bounds = chosen[0].bounds or []
    counts = [0] * (len(bounds) + 1)
    hist = Histogram(bounds, counts, 0, 0.0)
    for p in chosen:
        if p.bounds != bounds or len(p.bucket_counts or []) != len(counts):
            continue  # another bucket layout: cannot be added up
        for i, c in enumerate(p.bucket_counts or []):
            counts[i] += c
        hist.count += p.count or 0
        hist.total += p.value or 0.0
    return hist


class Durations(Fold):
    """The trajectories' histogram points, folded as they come: of each cumulative series only its
    latest point (it is the whole count), the delta points added up into one per attributes and
    buckets (``trajectory_histogram`` adds them up the same way)."""

    POINTS = frozenset({semconv.M_ROLLOUT_TRAJECTORY_DURATION})

    def __init__(self) -> None:
        self.kept: list[MetricPoint] = []  # points of another kind, as they are
        self._last: dict[tuple, MetricPoint] = {}  # cumulative: the latest point per series
        self._deltas: dict[tuple, MetricPoint] = {}  # delta: added up
        self._dicts: dict[tuple, dict] = {}  # shared resources and attributes (``values.share``)
        self._attr_key = AttrKeys()

    @property
    def holding(self) -> int:  # type: ignore[override]
        return len(self.kept) + len(self._last) + len(self._deltas)

    def on_point(self, p: MetricPoint) -> None:
        if p.kind == "histogram" and p.temporality != 1:
            key = (p.name, p.resource.get(INSTANCE), self._attr_key(p.attributes), p.start_ns)
            old = self._last.get(key)
            if old is None or p.time_ns >= old.time_ns:
                self._last[key] = p  # shared at ``close``: most are replaced by the next export
        elif p.kind == "histogram":
            self._add_delta(p)
        else:
            self.kept.append(self._shared(p))

    def _shared(self, p: MetricPoint) -> MetricPoint:
        p.resource, p.attributes = share(self._dicts, p.resource), share(self._dicts, p.attributes)
        return p

    def _add_delta(self, p: MetricPoint) -> None:
        """A delta trajectory histogram point, added into the one point of its attributes and
        buckets (``run.model.trajectory_histogram`` adds them up the same way)."""
        key = (p.name, attr_key(p.attributes), tuple(p.bounds or ()), len(p.bucket_counts or ()))
        into = self._deltas.get(key)
        if into is None:  # a copy: the sums go into it
            copied = copy.copy(p)
            copied.bucket_counts = list(p.bucket_counts or ())
            self._deltas[key] = self._shared(copied)
            return
        into.value = (into.value or 0.0) + (p.value or 0.0)
        into.count = (into.count or 0) + (p.count or 0)
        into.bucket_counts = [a + b for a, b in zip(into.bucket_counts or (), p.bucket_counts or (), strict=True)]

    def close(self) -> list[MetricPoint]:
        """The points kept (``trajectory_histogram`` of them is the run's)."""
        return [*self.kept, *map(self._shared, self._last.values()), *self._deltas.values()]
