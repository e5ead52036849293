"""The run's model, what both renderers show (``text``: the summary's lines; ``page``: the report),
computed from a run's OTLP JSON files in one reading (``run_reader``): steps and their stages, step
timelines, per-step curves, and each fact of the list (``facts.folds``) under its name. ``build(folder)``
returns it all as a ``Report``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from otel_verl import semconv
from otel_verl.offline.bounded import Sample, SlowestPerRun, pick_steps, picked_text
from otel_verl.offline.facts import folds as fact_folds
from otel_verl.offline.facts import overhead
from otel_verl.offline.facts import step_facts as fact_step_facts
from otel_verl.offline.facts.goodput import Goodput, GoodputFold
from otel_verl.offline.facts.health import Finding, Health, health
from otel_verl.offline.facts.latency import FAILED_STATUSES, Histogram, trajectory_histogram
from otel_verl.offline.facts.overhead import Overhead
from otel_verl.offline.facts.slowest import (
    Trajectories,
    children_of,
    is_trajectory,
    slowest_rule,
    slowest_trajectory,
    trajectory_pool,
    tree_below,
)
from otel_verl.offline.facts.spool import SpoolFacts
from otel_verl.offline.facts.stall import StallReport
from otel_verl.offline.folds import StepFact, Steps, StepSpans
from otel_verl.offline.otlp_files import LogEntry, MetricPoint, Skipped, SpanRecord, signal_files
from otel_verl.offline.run_reader import (
    Held,
    MetricFold,
    SpanIndex,
    StepSpan,
    fold_metrics,
    index_spans,
    read_logs,
    step_spans,
)

MAX_TIMELINE_STEPS = 100  # steps whose timeline is in the page (``bounded.pick_steps`` beyond)
MAX_ROWS = 1000  # steps shown one by one in the tables (``bounded.pick_steps`` beyond)
MAX_COLUMNS = 500  # columns of the stacked stage chart (each run of steps: its slowest, beyond)
MAX_TRAJECTORY_ROWS = 48  # trajectory rows per step timeline (the slowest ones)

# (chart title, unit, [(metric, (attribute, value) or None, label)]); charts without data are left out
CURVES: tuple[tuple[str, str, list[tuple[str, tuple[str, str] | None, str]]], ...] = (
    (
        "Reward",
        "",
        [
            (semconv.M_REWARD, (semconv.ATTR_REWARD_SOURCE, v), k)
            for k, v in semconv.REWARD_KEYS.items()  # critic/score/mean, critic/rewards/mean
        ],
    ),
    ("KL", "", [(semconv.M_KL, (semconv.ATTR_KL_SOURCE, v), k) for k, v in semconv.KL_KEYS.items()]),
    ("Throughput", "tokens/s per GPU", [(semconv.M_THROUGHPUT, None, semconv.THROUGHPUT_KEY)]),
    ("Entropy", "", [(semconv.metric_name("actor/entropy"), None, "actor/entropy")]),
    ("Grad norm", "", [(semconv.metric_name("actor/grad_norm"), None, "actor/grad_norm")]),
    ("Response length", "tokens", [(semconv.metric_name("response_length/mean"), None, "response_length/mean")]),
    ("Step time", "s", [(semconv.metric_name("timing_s/step"), None, "timing_s/step")]),
)


@dataclass
class StepRow:
    step: int
    span: SpanRecord
    stages: dict[str, float]  # top-level stage -> seconds (summed if timed twice), in start order
    other: float  # step time not covered by a top-level stage
    slowest: SpanRecord | None = None  # the step's slowest trajectory (slowest.slowest_trajectory)
    trajectories: int = 0
    spans: int = 0  # in the step's trace, with the rollout traces joined to it
    tree_spans: int = 0  # spans in the kept tree of the step's slowest trajectory
    # those spans, for the step whose slowest trajectory is the run's (the others: their count only)
    tree: list[SpanRecord] = field(default_factory=list)
    # each per-step fact's value, by its name (``facts.step_facts``; read with ``StepFact.of(row)``)
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    span: SpanRecord
    depth: int
    kind: str  # step | stage | wg | worker | traj | tail | other
    segments: list[SpanRecord] = field(default_factory=list)  # LLM calls drawn inside a trajectory
    linked: bool = False  # joined by verl.rollout.submit_step, not by parentage
    slowest: bool = False


@dataclass
class Timeline:
    step: int
    rows: list[Row]
    t0: int
    t1: int
    slowest: SpanRecord | None
    trajectories: int  # trajectory spans of the step (all, before the row cap)
    tree: list[SpanRecord] = field(default_factory=list)  # the spans below the slowest one (its kept tree)


@dataclass(frozen=True)
class Column:
    """One column of the stacked stage chart: a step's stages."""

    step: int
    seconds: float
    stages: dict[str, float]
    other: float


@dataclass
class StepTotals:
    """Every step, folded as its row is made: what ``Report.steps`` (a long run's picked steps) cannot say."""

    rows: int  # the most steps shown one by one (``bounded.pick_steps``)
    columns: SlowestPerRun[Column]  # the stacked chart's
    per_step: tuple[StepFact, ...] = ()  # the per-step facts (``facts.step_facts``): their totals kept here
    count: int = 0
    seconds: float = 0.0
    stage_order: dict[str, None] = field(default_factory=dict)  # stages in the order first seen
    # each per-step fact's run total, by its name (its ``StepFact.total``; read with ``StepFact.total_of``)
    fact_totals: dict[str, Any] = field(default_factory=dict)

    def add(self, row: StepRow) -> None:
        self.count += 1
        self.seconds += row.span.seconds
        self.stage_order.update(dict.fromkeys(row.stages))
        for fact in self.per_step:
            if fact.total is not None:
                self.fact_totals[fact.name] = fact.total.add(fact.total_of(self), fact.of(row))
        self.columns.add(row.step, row.span.seconds, Column(row.step, row.span.seconds, row.stages, row.other))

    def picked(self, shown: int) -> str | None:
        """How the tables say which steps they show, when not every one (``bounded.picked_text``)."""
        return picked_text(shown, self.count, self.rows) if shown < self.count else None


# Said when the folder has no metric points; a page from another source says instead where they are.
NO_POINTS_NOTE = "no metric points (metrics-*.jsonl missing or empty): no curves"


@dataclass
class Report:
    folder: Path
    files: dict[str, int]  # signal -> files read
    spans: int
    points: int
    skipped: Skipped  # what the reader left out (also in notes)
    slowest: SpanRecord | None  # the run's slowest trajectory (slowest.slowest_trajectory)
    slowest_rule: str  # which trajectories "the slowest" is chosen from (slowest.slowest_rule)
    meta: dict[str, str]
    processes: list[tuple[str, int]]  # ("taskrunner pid 870", spans)
    steps: list[StepRow]  # the steps shown one by one: every one, or a long run's picked ones (``totals``)
    totals: StepTotals  # every step, of which ``steps`` are shown
    stage_order: list[str]
    timelines: dict[int, Timeline]
    default_step: int | None
    trajectory_seconds: list[float]  # training trajectory spans: every one, or a uniform sample (``trajectories``)
    validation_trajectories: int
    trajectory_metric: Histogram | None
    curves: list[tuple[str, str, list[tuple[str, dict[int, float]]]]]
    gauges: dict[str, dict[int, float]]  # every per-step gauge series, label -> step -> value
    notes: list[str]
    stalled: list[LogEntry] = field(default_factory=list)  # verl.training.stalled records (facts.stall)
    stall_reports: list[StallReport] = field(default_factory=list)  # each process's latest stacks
    overhead: Overhead | None = None  # otel-verl's own CPU per step (overhead.overhead)
    health: Health | None = None  # the health box (offline.health), first in both tools
    senders: int = 0  # processes that sent spans or metric points
    spool: SpoolFacts | None = None  # export outages and losses (spool.spool_facts)
    held: Held = field(default_factory=Held)  # the most spans and points held at once while reading
    trajectories: Sample = field(default_factory=Sample)  # every training trajectory span's count, sum and max
    source: str | None = None  # where the spans were read, when not from ``folder`` (``live.jaeger_report``)
    facts: dict[str, Any] = field(default_factory=dict)  # each fact's, by its name (``facts.folds``)

    def spool_line(self) -> str | None:
        """Whether the run had an export outage, and whether anything was lost (``SpoolFacts.line``)."""
        return self.spool.line() if self.spool is not None else None

    def overhead_line(self) -> str | None:
        """The "telemetry cost per step" line (``overhead.cost_line``)."""
        return overhead.cost_line(self.overhead, self.totals.count, self.totals.seconds, self.senders)


def series_label(name: str, attributes: dict[str, Any]) -> str:
    if not attributes:
        return name
    return name + "{" + ",".join(f"{k}={v}" for k, v in sorted(attributes.items())) + "}"


def _row_kind(span: SpanRecord) -> str:
    if span.name == semconv.SPAN_STEP:
        return "step"
    if semconv.ATTR_STAGE in span.attributes:
        return "stage"
    if span.name.startswith(semconv.SPAN_WG_PREFIX):
        return "wg"
    if span.name.startswith(semconv.SPAN_WORKER_PREFIX):
        return "worker"
    if span.name == semconv.SPAN_ROLLOUT_TRAJECTORY:
        return "traj"
    if span.name == semconv.SPAN_ROLLOUT_TAIL:
        return "tail"
    if semconv.is_llm_call(span.name, span.attributes):
        return "llm"
    return "other"


def _timeline(step: StepRow, members: list[SpanRecord], include_validation: bool) -> Timeline:
    ids = {s.span_id for s in members}
    children: dict[str, list[SpanRecord]] = defaultdict(list)
    for s in members:
        if s.span_id != step.span.span_id:
            children[s.parent_id if s.parent_id in ids else ""].append(s)
    # Roots other than the step: the v1 rollout traces (joined by submit_step) and spans whose
    # parent was not exported. They hang under the gen stage (rollouts) or the step.
    gen = next((s for s in children.get(step.span.span_id, []) if s.attributes.get(semconv.ATTR_STAGE) == "gen"), None)
    linked_roots = children.pop("", [])
    for s in linked_roots:
        rollout = s.name.startswith("verl.rollout.") or semconv.is_llm_call(s.name, s.attributes)
        anchor = gen if gen is not None and rollout else step.span
        children[anchor.span_id].append(s)
    linked = {s.span_id for s in linked_roots}

    trajectories = [s for s in members if is_trajectory(s)]
    slowest = slowest_trajectory(trajectories, include_validation)
    shown = set()
    if len(trajectories) > MAX_TRAJECTORY_ROWS:
        shown = {s.span_id for s in sorted(trajectories, key=lambda s: s.start_ns - s.end_ns)[:MAX_TRAJECTORY_ROWS]}

    rows: list[Row] = []
    # Depth first, children in start order, each span once: a file can hold a chain of parents
    # deeper than Python recurses, or a span whose id is its parent's (a cycle).
    todo: list[tuple[SpanRecord, int]] = [(step.span, 0)]
    seen: set[int] = set()
    while todo:
        span, depth = todo.pop()
        kind = _row_kind(span)
        if id(span) in seen or (kind == "traj" and shown and span.span_id not in shown):
            continue
        seen.add(id(span))
        row = Row(span, depth, kind, linked=span.span_id in linked)
        row.slowest = slowest is not None and span.span_id == slowest.span_id
        rows.append(row)
        below = []
        for child in sorted(children.get(span.span_id, []), key=lambda s: (s.start_ns, s.name)):
            if kind == "traj" and semconv.is_llm_call(child.name, child.attributes):
                row.segments.append(child)
            else:
                below.append((child, depth + 1))
        todo.extend(reversed(below))
    drawn = [r.span for r in rows] + [seg for r in rows for seg in r.segments]
    t0 = min(s.start_ns for s in drawn)
    t1 = max(s.end_ns for s in drawn)
    tree = tree_below(slowest, children_of(members)) if slowest is not None else []
    return Timeline(step.step, rows, t0, max(t1, t0 + 1), slowest, len(trajectories), tree)


def build(folder: str | Path, include_validation: bool = False) -> Report:
    """Read ``folder``'s traces and metrics and work out everything the page shows, holding at
    most about a step's spans at a time (``offline.run_reader``) and of a long run's steps and
    values a bounded part (``offline.bounded``).

    ``include_validation``: validation trajectories may be "the slowest" (``slowest.trajectory_pool``).
    """
    folder = Path(folder)
    skipped = Skipped()
    folds = fact_folds(include_validation)
    index = index_spans(folder, skipped, list(folds.values()))
    first = index.first
    durations = [(n, st.seconds) for n, st in first.items()]
    chosen = pick_steps(durations, MAX_TIMELINE_STEPS)
    shown = pick_steps(durations, MAX_ROWS) | chosen
    at = [(n, st.start_ns, st.end_ns) for n, st in first.items()]
    fold, series = fold_metrics(folder, skipped, Steps(at, shown), list(folds.values()), CURVE_SERIES)
    read_logs(folder, skipped, list(folds.values()))
    facts = {name: f.close() for name, f in folds.items() if name not in COMBINED}
    trajectories: Trajectories = facts["slowest"]
    points: list[MetricPoint] = facts["latency"]
    stalled, reports = facts["stall"]  # the stall doctor's, if any
    notes: list[str] = []
    if skipped:
        notes.append(skipped.describe())
    notes += [f"step {n} has more than one verl.step span; the first is shown" for n in index.duplicate_steps]
    if len(chosen) < len(first):
        notes.append(f"timelines are included for {picked_text(len(chosen), len(first), MAX_TIMELINE_STEPS)}")
    per_step = fact_step_facts()
    rows: dict[int, StepRow] = {}
    timelines: dict[int, Timeline] = {}
    totals = StepTotals(MAX_ROWS, SlowestPerRun(MAX_COLUMNS), tuple(per_step))
    held = fold.held
    run_slowest = trajectories.slowest.span_id if trajectories.slowest is not None else None

    def add(n: int, members: list[SpanRecord]) -> None:
        st = first[n]
        span = next((s for s in members if s.span_id == st.span_id and s.name == semconv.SPAN_STEP), None)
        if span is None:
            span = _bare_step(st)
            members = [span, *members]
        row = _step_row(span, members, per_step, facts, include_validation, run_slowest)
        totals.add(row)
        if n in shown or row.tree:  # the row of the run's slowest trajectory too
            rows[n] = row
        if n in chosen:
            timelines[n] = _timeline(row, members, include_validation)

    done: set[int] = set()
    for n, members in step_spans(folder, index, held):
        if n in first and n not in done:
            done.add(n)
            add(n, members)
    for n in first:  # a step whose spans the second reading did not find again
        if n not in done:
            add(n, [])
    steps = [rows[n] for n in sorted(rows)]
    default_step = slowest_row(steps).step if steps else None
    account = _goodput(folds["goodput"], index, totals, points)  # type: ignore[arg-type]
    checks = health(
        folds["health"].guards,  # type: ignore[attr-defined]
        folds["health"].guard_records,  # type: ignore[attr-defined]
        folds["health"],  # type: ignore[arg-type]
        stalled,
        len(reports),
        _slowest_findings(steps, trajectories.slowest, include_validation, per_step),
        folds["generation"],  # type: ignore[arg-type]
        account,
    )
    if not index.spans:
        notes.append("no spans (traces-*.jsonl missing or empty): no stage breakdown, timeline or trajectory spans")
    elif not steps:
        notes.append("no verl.step spans: the run ended before its first step, or spans of the TaskRunner are missing")
    if not fold.points:
        notes.append(NO_POINTS_NOTE)
    return Report(
        folder=folder,
        files={sig: len(signal_files(folder, sig)) for sig in ("traces", "metrics", "logs")},
        spans=index.spans,
        points=fold.points,
        skipped=skipped,
        slowest=trajectories.slowest,
        slowest_rule=slowest_rule(include_validation),
        meta=_meta(index, fold),
        processes=sorted(index.senders.counts.items()),
        senders=len(set(index.senders.counts) | set(fold.senders.counts)),
        steps=steps,
        totals=totals,
        stage_order=list(totals.stage_order),
        timelines={n: timelines[n] for n in sorted(timelines)},
        default_step=default_step,
        trajectory_seconds=trajectories.seconds.values,
        validation_trajectories=trajectories.validation,
        trajectory_metric=trajectory_histogram(points),
        curves=_curves(series, checks.validation),
        gauges={series_label(name, dict(attrs)): values for (name, attrs), values in sorted(series.items())},
        notes=notes,
        stalled=stalled,
        stall_reports=reports,
        overhead=facts["overhead"],
        spool=facts["spool"],
        health=checks,
        held=held,
        trajectories=trajectories.seconds,
        facts=facts,
    )


# the facts that take the steps' figures and the other facts: closed by ``build`` itself
COMBINED = frozenset({"health", "generation", "goodput"})


def _goodput(fold: GoodputFold, index: SpanIndex, totals: StepTotals, points: list[MetricPoint]) -> Goodput | None:
    """The run's goodput account (``facts.goodput``): its steps' figures, the time its spans cover
    outside the steps, and the training trajectories that failed in the agent loop."""
    cover = (index.end_ns - index.start_ns) / 1e9 if index.start_ns is not None and index.end_ns is not None else 0.0
    failed = trajectory_histogram(points, statuses=FAILED_STATUSES)
    return fold.close(
        totals.count,
        cover - totals.seconds,
        (failed.count, failed.total) if failed is not None else (0, 0.0),
    )


def _bare_step(st: StepSpan) -> SpanRecord:
    """A step span the second reading did not find again, from what the first kept of it."""
    return SpanRecord(
        semconv.SPAN_STEP, st.trace_id, st.span_id, "", st.start_ns, st.end_ns, {semconv.ATTR_STEP: st.step}, {}, ""
    )


def _step_row(
    st: SpanRecord,
    members: list[SpanRecord],
    per_step: Iterable[StepFact],
    run: dict[str, Any],
    include_validation: bool,
    run_slowest: str | None = None,
) -> StepRow:
    """One step's row: its top-level stages, its trajectories, and each per-step fact's value
    (``per_step``: ``facts.step_facts``; ``run``: the facts the run's folds closed to).
    ``members``: the step's trace and the rollout traces joined to it; ``run_slowest``: the span id
    of the run's slowest trajectory, whose tree the row keeps (a long run's rows hold no trees)."""
    n = st.attributes[semconv.ATTR_STEP]
    trace = [s for s in members if s.trace_id == st.trace_id]
    stages: dict[str, float] = {}
    covered = 0.0
    for s in sorted(trace, key=lambda s: s.start_ns):
        stage = s.attributes.get(semconv.ATTR_STAGE)
        if s.parent_id == st.span_id and isinstance(stage, str):
            stages[stage] = stages.get(stage, 0.0) + s.seconds
            covered += s.seconds
    trajectories = [s for s in members if is_trajectory(s)]
    pool = trajectory_pool(trajectories, include_validation)
    slowest = slowest_trajectory(pool, include_validation)
    tree = tree_below(slowest, children_of(members)) if slowest is not None else []
    step = StepSpans(st, members, trace, pool, slowest, run)
    return StepRow(
        n,
        st,
        stages,
        max(0.0, st.seconds - covered),
        slowest,
        len(trajectories),
        len(members),
        len(tree),
        tree if slowest is not None and slowest.span_id == run_slowest else [],
        {f.name: f.compute(step) for f in per_step},
    )


def slowest_row(rows: Iterable[StepRow]) -> StepRow:
    """ "The slowest step" of both tools: the longest step span, the later step of equal ones."""
    return max(rows, key=lambda r: (r.span.seconds, r.step))


def _slowest_findings(
    steps: list[StepRow], slowest: SpanRecord | None, include_validation: bool, per_step: Sequence[StepFact]
) -> list[Finding]:
    """The health box's slowest step and slowest trajectory, with what each per-step fact says of
    them (``StepFact.slowest_step``, ``StepFact.slowest_trajectory``, in list order)."""
    out: list[Finding] = []
    if steps:
        slow = slowest_row(steps)
        text, anchor = f"step {slow.step}, {slow.span.seconds:.2f} s", None
        for fact in per_step:
            value = fact.of(slow)
            phrase = fact.slowest_step(value, slow) if value is not None and fact.slowest_step is not None else None
            if phrase is not None:
                text += phrase.text
                anchor = anchor or phrase.anchor
        out.append(Finding("slowest step", "info", text, anchor or "stages"))
    else:
        out.append(Finding("slowest step", "info", "no training steps", ""))
    if slowest is None:
        out.append(Finding("slowest trajectory", "info", "no trajectory spans", ""))
    else:
        a = slowest.attributes
        bits = [f"{slowest.seconds:.2f} s"]
        if semconv.ATTR_ROLLOUT_SAMPLE_INDEX in a:
            bits.append(f"sample {a[semconv.ATTR_ROLLOUT_SAMPLE_INDEX]}")
        if semconv.ATTR_ROLLOUT_SUBMIT_STEP in a:
            bits.append(f"step {a[semconv.ATTR_ROLLOUT_SUBMIT_STEP]}")
        row = next((r for r in steps if r.slowest is not None and r.slowest.span_id == slowest.span_id), None)
        for fact in per_step:
            value = fact.of(row) if row is not None else None
            if row is not None and value is not None and fact.slowest_trajectory is not None:
                said = fact.slowest_trajectory(value, row)
                if said:
                    bits.append(said)
        rule = "" if not include_validation else " (validation ones included)"
        out.append(Finding("slowest trajectory", "info", ", ".join(bits) + rule, "rollout"))
    return out


VALIDATION_CHART = "Validation score"
VALIDATION_KEYS = "val-core/<data source>/<score>/mean@<n>"  # verl's keys, when a run logged none
MAX_VALIDATION_LINES = 5


def in_step_order(values: dict[int, float]) -> dict[int, float]:
    """``values`` sorted by step: the same dict when it already is (a run's series, as they were
    read), so that the charts and the page's series share one copy."""
    return values if all(a < b for a, b in pairwise(values)) else dict(sorted(values.items()))


def _series_key(name: str, attr: tuple[str, str] | None) -> tuple[str, tuple]:
    """The (name, attributes) key of a ``CURVES`` line."""
    return name, ((attr[0], attr[1]),) if attr else ()


CURVE_SERIES = frozenset(_series_key(name, attr) for _, _, wanted in CURVES for name, attr, _ in wanted)


def _curves(
    series: dict[tuple[str, tuple], dict[int, float]], validation: dict[str, dict[int, float]] | None = None
) -> list[tuple[str, str, list[tuple[str, dict[int, float]]]]]:
    """The ``CURVES`` charts, each line's values in step order, and the validation score (verl's
    ``val-core/...`` keys, step 0: before training). A key the run never logged is a line with no
    values: the page says "not logged by this run" instead of drawing it."""
    curves: list[tuple[str, str, list[tuple[str, dict[int, float]]]]] = []
    for title, unit, wanted in CURVES:
        lines = []
        for name, attr, label in wanted:
            values = series.get(_series_key(name, attr))
            lines.append((label, in_step_order(values) if values else {}))
        curves.append((title, unit, lines))
    if validation:
        curves.insert(1, (VALIDATION_CHART, "", list(validation.items())[:MAX_VALIDATION_LINES]))
    else:
        curves.insert(1, (VALIDATION_CHART, "", [(VALIDATION_KEYS, {})]))
    return curves


def _meta(index: SpanIndex, fold: MetricFold) -> dict[str, str]:
    """The run's identity from the resources (run id, service, ...), its driver and how long the spans cover."""
    meta: dict[str, str] = {}
    for key, label in (
        (semconv.RES_RUN_ID, "run id"),
        (semconv.RES_SERVICE_NAME, "service"),
        (semconv.RES_PROJECT, "project"),
        (semconv.RES_EXPERIMENT, "experiment"),
    ):
        values = sorted(index.senders.meta.get(key, set()) | fold.senders.meta.get(key, set()))
        if values:
            meta[label] = ", ".join(values)
    drivers = sorted(index.drivers)
    if drivers:
        meta["driver"] = ", ".join(drivers)
    if index.start_ns is not None and index.end_ns is not None:
        meta[SPANS_COVER] = (
            f"{(index.end_ns - index.start_ns) / 1e9:.1f} s, from the first span's start to the last one's end "
            "(the run's start-up before its first span, Ray and model loading, is not in it)"
        )
    return meta


SPANS_COVER = "time the spans cover"
