"""What the run's on-disk spools did: export outages, and whether anything was lost."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from otel_verl import semconv
from otel_verl.offline.folds import Fold
from otel_verl.offline.otlp_files import MetricPoint
from otel_verl.offline.values import AttrKeys, exporter, share

DROPPED = semconv.M_TELEMETRY_DROPPED


@dataclass
class SpoolFacts:
    """What the on-disk spools of a run did (``otel_verl.spool.batches``/``.bytes``, and
    ``otel_verl.telemetry.dropped``), summed over the processes: the last value of each counter."""

    batches: dict[str, int]  # outcome -> batches, all signals
    bytes: dict[str, int]  # outcome -> bytes
    processes: int  # processes that spooled something
    dropped: int  # otel_verl.telemetry.dropped, every kind

    def line(self) -> str | None:
        """One line: whether the run had an export outage and whether anything was lost; None when
        no batch ever waited and nothing was dropped."""
        b = self.batches
        spooled, resent = b.get(semconv.SPOOL_SPOOLED, 0), b.get(semconv.SPOOL_RESENT, 0)
        lost, rejected = b.get(semconv.SPOOL_DROPPED, 0), b.get(semconv.SPOOL_REJECTED, 0)
        if not spooled and not self.dropped:
            return None
        if not spooled:
            return f"telemetry lost: {self.dropped} items or batches dropped by full queues ({DROPPED})"
        mib = self.bytes.get(semconv.SPOOL_SPOOLED, 0) / 2**20
        line = (
            f"export outage: the endpoint did not take {spooled} batches ({mib:.1f} MiB) of {self.processes} "
            f"processes, which waited in the on-disk spool; {resent} re-sent"
        )
        left = max(0, spooled - resent - lost - rejected)
        if left:
            line += (
                f", {left} not re-sent by the last export (the next verl process of the host sends them, "
                "or otel-verl replay --spool)"
            )
        if rejected:
            line += f", {rejected} refused for good by the endpoint"
        if lost or self.dropped:
            line += f"; LOST: {lost} batches dropped from the full spool (OTEL_VERL_SPOOL_MAX_MB)"
            other = self.dropped - lost
            line += f" and {other} more by full queues ({DROPPED})" if other > 0 else ""
        else:
            line += "; nothing lost"
        return line


def spool_facts(points: Iterable[MetricPoint]) -> SpoolFacts | None:
    """The run's spool counters (``SpoolFacts``), or None when no process reported them."""
    points = list(points)

    def last(name: str, key: Any) -> dict[tuple, float]:
        """(process, ``key(point)``) -> the value of the series' latest point."""
        latest: dict[tuple, tuple[int, float]] = {}
        for p in points:
            if p.name == name and p.kind == "sum" and p.value is not None:
                k, point = (exporter(p.resource), key(p)), (p.time_ns, float(p.value))
                if k not in latest or point >= latest[k]:
                    latest[k] = point
        return {k: value for k, (_, value) in latest.items()}

    outcome = lambda p: p.attributes.get(semconv.ATTR_SPOOL_OUTCOME)  # noqa: E731
    batches, nbytes = last(semconv.M_SPOOL_BATCHES, outcome), last(semconv.M_SPOOL_BYTES, outcome)
    dropped = last(semconv.M_TELEMETRY_DROPPED, lambda p: p.attributes.get(semconv.ATTR_DROPPED_KIND))
    if not batches and not any(dropped.values()):
        return None
    by_outcome: dict[str, int] = defaultdict(int)
    by_bytes: dict[str, int] = defaultdict(int)
    for (_, what), n in batches.items():
        by_outcome[str(what)] += int(n)
    for (_, what), n in nbytes.items():
        by_bytes[str(what)] += int(n)
    spooling = {who for (who, what), n in batches.items() if what == semconv.SPOOL_SPOOLED and n > 0}
    return SpoolFacts(dict(by_outcome), dict(by_bytes), len(spooling), int(sum(dropped.values())))


class Spool(Fold):
    """The spools' and queues' counters: of each series only its latest point is read (``spool_facts``)."""

    POINTS = frozenset({semconv.M_SPOOL_BATCHES, semconv.M_SPOOL_BYTES, semconv.M_TELEMETRY_DROPPED})

    def __init__(self) -> None:
        self._last: dict[tuple, MetricPoint] = {}
        self._attr_key = AttrKeys()

    @property
    def holding(self) -> int:  # type: ignore[override]
        return len(self._last)

    def on_point(self, p: MetricPoint) -> None:
        key = (exporter(p.resource), p.name, self._attr_key(p.attributes), p.kind)
        old = self._last.get(key)
        if old is None or p.time_ns >= old.time_ns:
            self._last[key] = p

    def close(self) -> SpoolFacts | None:
        dicts: dict[tuple, dict[str, Any]] = {}
        for p in self._last.values():
            p.resource, p.attributes = share(dicts, p.resource), share(dicts, p.attributes)
        return spool_facts(self._last.values())
