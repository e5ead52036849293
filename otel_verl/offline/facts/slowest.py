"""Which trajectory is "the slowest" (one rule for both tools) and the tree kept under it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from otel_verl import semconv
from otel_verl.offline.bounded import Sample
from otel_verl.offline.folds import Fold
from otel_verl.offline.otlp_files import SpanRecord
from otel_verl.offline.values import share


def is_trajectory(span: SpanRecord) -> bool:
    return span.name == semconv.SPAN_ROLLOUT_TRAJECTORY


def is_validation(span: SpanRecord) -> bool:
    return bool(span.attributes.get(semconv.ATTR_ROLLOUT_VALIDATE))


def trajectory_pool(spans: Iterable[SpanRecord], include_validation: bool = False) -> list[SpanRecord]:
    """The trajectory spans "the slowest" is chosen from: training ones, or all with ``include_validation``.

    Validation rollouts run with other sampling settings (often longer answers) outside the training
    loop, so by default they do not compete with the training steps' rollouts.
    """
    return [s for s in spans if is_trajectory(s) and (include_validation or not is_validation(s))]


def slowest_trajectory(spans: Iterable[SpanRecord], include_validation: bool = False) -> SpanRecord | None:
    """The longest span of ``trajectory_pool`` (ties: the larger span id, so both tools agree)."""
    pool = trajectory_pool(spans, include_validation)
    return max(pool, key=lambda s: (s.end_ns - s.start_ns, s.span_id)) if pool else None


def slowest_rule(include_validation: bool) -> str:
    """The definition, as both tools state it next to the slowest trajectory."""
    if include_validation:
        return "training and validation trajectories"
    return "training trajectories only; --include-validation counts validation ones too"


def tree_below(root: SpanRecord, children: dict[str, list[SpanRecord]]) -> list[SpanRecord]:
    """Every span under ``root`` (``children``: parent span id -> spans), in every process: the
    trajectory tree otel-verl kept (its LLM, tool and reward worker spans, user spans under them)."""
    out: list[SpanRecord] = []
    seen = {root.span_id}
    todo = [root.span_id]
    while todo and len(out) < 100_000:  # a file may hold a cycle or a chain too deep to recurse
        for child in children.get(todo.pop(), ()):
            if child.span_id not in seen:
                seen.add(child.span_id)
                out.append(child)
                todo.append(child.span_id)
    return out


def children_of(spans: Iterable[SpanRecord]) -> dict[str, list[SpanRecord]]:
    out: dict[str, list[SpanRecord]] = defaultdict(list)
    for s in spans:
        if s.parent_id:
            out[s.parent_id].append(s)
    return out


class Trajectories(Fold):
    """The run's trajectory spans, one at a time: their seconds (training ones: every one, or a
    uniform sample, ``bounded.Sample``), the validation ones' count and the run's slowest
    (``slowest_trajectory``' rule)."""

    SPANS = frozenset({semconv.SPAN_ROLLOUT_TRAJECTORY})

    def __init__(self, include_validation: bool = False) -> None:
        self.include_validation = include_validation
        self.seconds = Sample()  # training trajectories
        self.validation = 0
        self.slowest: SpanRecord | None = None
        self._dicts: dict[tuple, dict] = {}  # the slowest's resource, one copy (``values.share``)

    def on_span(self, s: SpanRecord) -> None:
        if is_validation(s):
            self.validation += 1
        else:
            self.seconds.add(s.seconds)
        if self.include_validation or not is_validation(s):
            best = self.slowest
            if best is None or (s.end_ns - s.start_ns, s.span_id) > (best.end_ns - best.start_ns, best.span_id):
                s.resource = share(self._dicts, s.resource)
                self.slowest = s

    def close(self) -> Trajectories:
        return self
