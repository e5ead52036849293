"""A run folder read at any size, for ``summary`` and ``report``: what they hold stays bounded by
a step's telemetry and a few numbers per step, not by the run's spans and points. The reader knows
no fact: it hands each fact's fold (``folds.Fold``, from the list the run's model gives it,
``facts.folds``) the spans, points and log records the fold names, and keeps only what grouping by
step needs.

A multi-day run stores hundreds of thousands of spans and millions of metric points; holding them
all as records takes gigabytes. So:

- **spans are read twice**, both times the files side by side, each batch in the order of its
  spans' ends (``_merged``). Which step a trace belongs to (its own ``verl.step``, or for v1's
  rollout traces of their own the ``verl.rollout.submit_step`` of their root) is decided as its
  spans are read (``TraceSteps``), so neither reading holds a map of the run's traces. The first
  reading (``index_spans``) keeps per step its span's times and ids and its span count, and the
  processes and resources; each span a fold names goes to it (``Fold.on_span``: the guard's spans,
  the workers' long-tail events, the trajectories). The second reading (``step_spans``) hands over
  each step's spans (its trace and the rollout traces joined to it) as soon as the count the first
  reading found is complete; the step's spans are let go after that. Whatever is still open at the
  end (a file that changed in between) is handed over then.
- **metric points are read once** (``fold_metrics``), after the folds were told the steps
  (``Fold.on_steps``): every gauge folds into its per-step series as its export completes
  (``exports.StepGauges``' rule: the export's ``verl.training.step`` names the step, the latest
  value for a step wins), each series thinned as it grows (``bounded``); a fold with an ``export``
  method is handed each placed export (``exports.ExportListener``), and each point a fold names
  goes to it (``Fold.on_point``).
- **log records** are read once (``read_logs``), each handed to the folds that name its event.
"""

from __future__ import annotations

import heapq
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

from otel_verl import semconv
from otel_verl.offline.bounded import Series
from otel_verl.offline.exports import StepGauges
from otel_verl.offline.folds import Fold, Steps
from otel_verl.offline.otlp_files import (
    MetricPoint,
    Reading,
    Skipped,
    SpanRecord,
    file_records,
    signal_files,
)
from otel_verl.offline.values import share

T = TypeVar("T")
META_KEYS = (semconv.RES_RUN_ID, semconv.RES_SERVICE_NAME, semconv.RES_PROJECT, semconv.RES_EXPERIMENT)


def process_name(resource: dict[str, Any]) -> str:
    """ "taskrunner pid 870", "worker rank 1 pid 901": how both tools name a process."""
    rank = resource.get(semconv.RES_RANK)
    # no role: a provider otel-verl did not build (a distro's in the launcher: its resource may lack the pid too)
    role = resource.get(semconv.RES_ROLE) or f"{resource.get(semconv.RES_SERVICE_NAME, 'a process')} (no verl role)"
    pid = resource.get("process.pid")
    return f"{role}{'' if rank is None else f' rank {rank}'}{'' if pid is None else f' pid {pid}'}"


@dataclass
class Senders:
    """The processes and resources seen, once per stored request (not per item)."""

    counts: Counter[str] = field(default_factory=Counter)  # process name -> items
    meta: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # resource key -> values
    _last: tuple[dict[str, Any] | None, str] = (
        None,
        "",
    )  # the last resource seen and its name (held: its id names no other)

    def add(self, resource: dict[str, Any], items: int = 1) -> None:
        if self._last[0] is not resource:
            self._last = (resource, process_name(resource))
            # only otel-verl's resources (with a run id) say whose run it is: a distro's service name is not the run's
            for key in META_KEYS if semconv.RES_RUN_ID in resource else ():
                if resource.get(key) is not None:
                    self.meta[key].add(str(resource[key]))
        self.counts[self._last[1]] += items


# A trace's step, as the readings decide it: (step, the verl.step span's id) for a step's own trace,
# (submit step, "") for a rollout trace joined to it by ``verl.rollout.submit_step``, None for
# neither.
TraceKey = tuple[int, str] | None
MAX_DECIDED = 16_384  # traces whose key is remembered for a span that comes after the trace's root
LARGE_TRACE = 10_000  # spans of a trace held undecided past which the first reading names it to the second


class _Seen:
    """Trace ids seen decided, approximately: a Bloom filter of fixed size (1 MiB). An id it does
    not hold was never added; one it holds may have been."""

    BITS = 1 << 23

    def __init__(self) -> None:
        self._bits = bytearray(self.BITS // 8)

    def _slots(self, key: str) -> tuple[int, int, int]:
        h = hash(key) & (2**64 - 1)
        return h % self.BITS, (h >> 21) % self.BITS, (h >> 42) % self.BITS

    def add(self, key: str) -> None:
        for slot in self._slots(key):
            self._bits[slot >> 3] |= 1 << (slot & 7)

    def __contains__(self, key: str) -> bool:
        return all(self._bits[slot >> 3] >> (slot & 7) & 1 for slot in self._slots(key))


class TraceSteps(Generic[T]):
    """Which step each trace belongs to, decided while the spans are read, holding only the traces
    still open: both readings read the files side by side in the same order (``_merged``), so they
    decide alike, and the first one's counts are what the second one finds.

    A trace is decided when its ``verl.step`` span comes (its step), else when its root comes: the
    root's ``verl.rollout.submit_step``, or another span's when the root has none. Spans end before
    their parent, so a trace's root comes after the rest of it; a span that comes later still takes
    the key its trace was given (the last ``MAX_DECIDED`` traces decided are remembered; a span
    that comes later still opens its trace again). A trace whose root never comes is decided at the
    end. ``add`` takes each span with what the reading keeps of it (``item``) and returns, once its
    trace is decided, the key and the items held.

    The traces the first reading held long (more than ``LARGE_TRACE`` spans before their root, or
    no root at all) and opened only once are ``named`` to the second as ``known``: it decides each
    of their spans as it comes, never holding them undecided, and remembers them where the first
    reading did, so that both forget the same traces at the same spans.
    """

    def __init__(self, known: dict[str, TraceKey] | None = None) -> None:
        self._open: dict[str, tuple[list[T], list[Any]]] = {}  # trace -> (items, [submit step, opened again])
        self._decided: OrderedDict[str, TraceKey] = OrderedDict()
        self._known = known
        self._seen = _Seen() if known is None else None  # the first reading's: which traces open again
        self.named: dict[str, TraceKey] = {}  # for a second reading's ``known``

    def add(self, s: SpanRecord, item: T) -> tuple[TraceKey, list[T]] | None:
        step = s.attributes.get(semconv.ATTR_STEP) if s.name == semconv.SPAN_STEP else None
        steps = isinstance(step, int) and not isinstance(step, bool)
        if self._known is not None and s.trace_id in self._known:
            key = self._known[s.trace_id]
            if (steps or not s.parent_id) and s.trace_id not in self._decided:
                self._remember(s.trace_id, key)  # as the first reading did when it decided it
            return key, [item]
        if s.trace_id in self._decided:
            return self._decided[s.trace_id], [item]
        held = self._open.get(s.trace_id)
        if held is None:
            again = self._seen is not None and s.trace_id in self._seen
            if again:  # opened again (or a false positive): the second reading must decide it as this one
                self.named.pop(s.trace_id, None)
            held = self._open[s.trace_id] = ([], [None, again])
        held[0].append(item)
        submit = s.attributes.get(semconv.ATTR_ROLLOUT_SUBMIT_STEP)
        submit = submit if isinstance(submit, int) and not isinstance(submit, bool) else None
        if steps:
            key: TraceKey = (step, s.span_id)  # type: ignore[assignment]
        elif not s.parent_id:
            key = self._joined(submit if submit is not None else held[1][0])
        else:
            if held[1][0] is None:
                held[1][0] = submit
            return None
        return key, self._decide(s.trace_id, key)

    @staticmethod
    def _joined(submit: int | None) -> TraceKey:
        return None if submit is None else (submit, "")

    def _decide(self, trace_id: str, key: TraceKey, rootless: bool = False) -> list[T]:
        items, (_, again) = self._open.pop(trace_id)
        if self._seen is not None:
            if not again and (rootless or len(items) > LARGE_TRACE):
                self.named[trace_id] = key
            self._seen.add(trace_id)
        if not rootless:
            self._remember(trace_id, key)
        return items

    def _remember(self, trace_id: str, key: TraceKey) -> None:
        self._decided[trace_id] = key
        if len(self._decided) > MAX_DECIDED:
            self._decided.popitem(last=False)

    def close(self) -> Iterator[tuple[TraceKey, list[T]]]:
        """The traces whose root never came, decided by the submit step one of their spans carries."""
        for trace_id in list(self._open):
            key = self._joined(self._open[trace_id][1][0])
            yield key, self._decide(trace_id, key, rootless=True)


def _merged(
    folder: Path, skipped: Skipped, reading: Reading, again: bool, dicts: dict[tuple, dict[str, Any]] | None = None
) -> Iterator[list[SpanRecord]]:
    """``folder``'s spans a batch at a time, its files read side by side, each batch in the order of its spans' ends;
    ``again``: the second reading (the files the first one read, the same lines; each batch's
    resources shared through ``dicts``)."""
    files = signal_files(folder, "traces")
    if again:
        files = [p for p in files if p in reading.files]

    def batches(path: Path) -> Iterator[tuple[int, list[SpanRecord]]]:
        last = 0
        for _, records in file_records(path, "traces", skipped, reading, again=again):
            last = min((s.end_ns for s in records), default=last)
            if dicts is not None:
                shared: dict[int, dict[str, Any]] = {}  # a batch's spans have their resource in common
                for s in records:  # what a step keeps (its slowest trajectory's tree) shares one copy
                    found = shared.get(id(s.resource))
                    if found is None:
                        found = shared[id(s.resource)] = share(dicts, s.resource)
                    s.resource = found
            yield last, records

    for _, records in heapq.merge(*(batches(p) for p in files), key=lambda b: b[0]):
        yield records


class StepSpan(NamedTuple):
    """What the first reading keeps of a ``verl.step`` span (the second reading hands over the span
    itself with its step's other spans)."""

    step: int
    start_ns: int
    end_ns: int
    trace_id: str
    span_id: str

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


@dataclass
class SpanIndex:
    """What the first reading of the traces keeps (see the module's docstring)."""

    reading: Reading
    spans: int = 0
    step_spans: list[StepSpan] = field(default_factory=list)  # verl.step spans with a step number (until ``resolve``)
    drivers: set[str] = field(default_factory=set)  # the step spans' verl.driver values
    senders: Senders = field(default_factory=Senders)
    start_ns: int | None = None
    end_ns: int | None = None
    traces: TraceSteps[None] = field(default_factory=TraceSteps)
    long_traces: dict[str, TraceKey] = field(default_factory=dict)  # ``TraceSteps.named`` (after ``resolve``)
    # spans per trace key (``TraceKey``): a step's own trace, the rollout traces joined to a step
    counts: Counter[tuple[int, str]] = field(default_factory=Counter)
    expected: dict[int, int] = field(default_factory=dict)  # step -> spans (after ``resolve``)
    first: dict[int, StepSpan] = field(default_factory=dict)  # step -> its first verl.step span (after ``resolve``)
    duplicate_steps: list[int] = field(default_factory=list)  # steps with more than one verl.step span
    dicts: dict[tuple, dict[str, Any]] = field(default_factory=dict)  # shared resources (``share``)
    folds: Sequence[Fold] = ()  # handed the spans they name (``folds.Fold.SPANS``)
    _routes: dict[str, list[Fold]] = field(init=False)

    def __post_init__(self) -> None:
        self._routes = routes(self.folds, "SPANS")

    def add(self, s: SpanRecord) -> None:
        self.add_batch([s])

    def add_batch(self, batch: list[SpanRecord]) -> None:
        """The spans of one stored request, in its order."""
        if not batch:
            return
        self.spans += len(batch)
        lo, hi = min(s.start_ns for s in batch), max(s.end_ns for s in batch)
        self.start_ns = lo if self.start_ns is None else min(self.start_ns, lo)
        self.end_ns = hi if self.end_ns is None else max(self.end_ns, hi)
        resource, items = None, 0  # a request's spans share their resource: one ``Senders.add`` per run
        traces, counts, folds = self.traces, self.counts, self._routes
        for s in batch:
            if s.resource is not resource:
                if items:
                    self.senders.add(resource, items)  # type: ignore[arg-type]
                resource, items = s.resource, 0
            items += 1
            decided = traces.add(s, None)
            if decided is not None and decided[0] is not None:
                counts[decided[0]] += len(decided[1])
            name = s.name
            if name == semconv.SPAN_STEP:
                step = s.attributes.get(semconv.ATTR_STEP)
                if isinstance(step, int) and not isinstance(step, bool):
                    self.step_spans.append(StepSpan(step, s.start_ns, s.end_ns, s.trace_id, s.span_id))
                    if semconv.ATTR_DRIVER in s.attributes:
                        self.drivers.add(str(s.attributes[semconv.ATTR_DRIVER]))
            got = folds.get(name)
            if got:
                for fold in got:
                    fold.on_span(s)
        if items:
            self.senders.add(resource, items)  # type: ignore[arg-type]

    def resolve(self) -> None:
        """Each step's first ``verl.step`` span and how many spans the step has in all: its own
        trace's and those of the rollout traces joined to it."""
        for key, items in self.traces.close():
            if key is not None:
                self.counts[key] += len(items)
        self.step_spans.sort(key=lambda s: (s.step, s.start_ns))
        for st in self.step_spans:
            if st.step in self.first:
                self.duplicate_steps.append(st.step)
            else:
                self.first[st.step] = st
        for (n, span_id), spans in self.counts.items():
            st = self.first.get(n)
            if st is not None and span_id in ("", st.span_id):
                self.expected[n] = self.expected.get(n, 0) + spans
        self.counts.clear()
        self.step_spans.clear()  # ``first`` holds what is read of them from now on
        self.long_traces = self.traces.named
        self.traces = TraceSteps()  # the second reading decides them again

    def step_of(self, key: TraceKey) -> int | None:
        """The step a trace key names, when the run has that step (a step's own trace: its first span's)."""
        if key is None:
            return None
        st = self.first.get(key[0])
        return key[0] if st is not None and key[1] in ("", st.span_id) else None


def routes(folds: Iterable[Fold], names: str) -> dict[str, list[Fold]]:
    """Name -> the folds that read it (``names``: which of ``Fold``'s name sets), in their order."""
    out: dict[str, list[Fold]] = {}
    for fold in folds:
        for name in getattr(fold, names):
            out.setdefault(name, []).append(fold)
    return out


def index_spans(folder: Path, skipped: Skipped, folds: Sequence[Fold] = ()) -> SpanIndex:
    """The first reading of ``folder``'s traces, each span handed to the ``folds`` that name it."""
    index = SpanIndex(Reading(), folds=folds)
    for batch in _merged(folder, skipped, index.reading, again=False):
        index.add_batch(batch)
    index.resolve()
    return index


@dataclass
class Held:
    """The most records held at once by the second reading and the metric fold (bounded by a step)."""

    spans: int = 0  # after each span read
    points: int = 0  # after each stored request folded


def step_spans(folder: Path, index: SpanIndex, held: Held | None = None) -> Iterator[tuple[int, list[SpanRecord]]]:
    """The second reading: (step, its spans) for each step, as soon as all of them were read."""
    held = Held() if held is None else held
    traces: TraceSteps[SpanRecord] = TraceSteps(index.long_traces)
    open_steps: dict[int, list[SpanRecord]] = {}
    holding = 0  # spans held: of traces not yet decided, and of steps not yet complete

    def joined(key: TraceKey, spans: list[SpanRecord]) -> Iterator[tuple[int, list[SpanRecord]]]:
        nonlocal holding
        n = index.step_of(key)
        if n is None:
            holding -= len(spans)
            return
        members = open_steps.setdefault(n, [])
        members += spans
        if len(members) >= index.expected.get(n, 0):
            holding -= len(open_steps.pop(n))
            yield n, members

    for batch in _merged(folder, Skipped(), index.reading, again=True, dicts=index.dicts):
        for s in batch:
            holding += 1
            if holding > held.spans:
                held.spans = holding
            decided = traces.add(s, s)
            if decided is not None:
                yield from joined(*decided)
    for key, spans in traces.close():
        yield from joined(key, spans)
    for n in sorted(open_steps):
        yield n, open_steps.pop(n)


@dataclass
class MetricFold:
    """What the one reading of the metric points keeps (see the module's docstring)."""

    folds: Sequence[Fold] = ()  # handed the points they name, and, with an ``export``, each placed export
    keep: Collection[int] = ()  # steps whose values the ``tabled`` series keep exactly (the tables' rows)
    tabled: Collection[tuple[str, tuple]] = ()  # (name, attributes) of the series the tables show
    points: int = 0
    gauges: StepGauges = field(init=False)
    senders: Senders = field(default_factory=Senders)
    held: Held = field(default_factory=Held)
    _routes: dict[str, list[Fold]] = field(init=False)

    def __post_init__(self) -> None:
        listeners = [f for f in self.folds if hasattr(f, "export")]
        self.gauges = StepGauges(self.keep, listeners, self.tabled)  # type: ignore[arg-type]
        self._routes = routes(self.folds, "POINTS")

    def add(self, p: MetricPoint) -> None:
        self.add_request((p,))

    def add_request(self, points: Sequence[MetricPoint]) -> None:
        """The points of one stored request, in its order: each goes to the folds that read it
        (the gauges' per request, the facts' per point of the metrics they name)."""
        self.points += len(points)
        resource, items = None, 0  # a request's points share their resource: one ``Senders.add`` per run
        folds = self._routes
        for p in points:
            if p.resource is not resource:
                if items:
                    self.senders.add(resource, items)  # type: ignore[arg-type]
                resource, items = p.resource, 0
            items += 1
            got = folds.get(p.name)
            if got:
                for fold in got:
                    fold.on_point(p)
        if items:
            self.senders.add(resource, items)  # type: ignore[arg-type]
        self.gauges.add_request(points)
        holding = self.gauges.holding + sum(f.holding for f in self.folds)
        self.held.points = max(self.held.points, holding)

    def close(self) -> dict[tuple[str, tuple], Series]:
        """Every export placed: the per-step series (``exports.StepGauges``)."""
        return self.gauges.close()


def fold_metrics(
    folder: Path,
    skipped: Skipped,
    steps: Steps,
    folds: Sequence[Fold] = (),
    tabled: Collection[tuple[str, tuple]] = (),
) -> tuple[MetricFold, dict[tuple[str, tuple], Series]]:
    """The one reading of ``folder``'s metric points: the fold and its per-step gauge series. The
    ``folds`` are told the ``steps`` first (``Fold.on_steps``); the ``tabled`` series keep the
    values of ``steps.keep`` exactly."""
    for fold in folds:
        fold.on_steps(steps)
    fold = MetricFold(folds, steps.keep, tabled)
    reading = Reading()
    # the TaskRunner's files first (named by role: ``process.exporters``): its exports set the
    # step boundaries the other processes' cost waits for
    for path in sorted(signal_files(folder, "metrics"), key=lambda p: f"-{semconv.ROLE_TASKRUNNER}-" not in p.name):
        for _, points in file_records(path, "metrics", skipped, reading):
            fold.add_request(points)
    return fold, fold.close()


def read_logs(folder: Path, skipped: Skipped, folds: Sequence[Fold] = ()) -> int:
    """The one reading of ``folder``'s log records, each handed to the ``folds`` that name its
    event (``Fold.EVENTS``); the records read."""
    reading = Reading()
    by_event = routes(folds, "EVENTS")
    read = 0
    for path in signal_files(folder, "logs"):
        for _, records in file_records(path, "logs", skipped, reading):
            read += len(records)
            for r in records:
                for fold in by_event.get(r.event_name, ()):
                    fold.on_log(r)
    return read
