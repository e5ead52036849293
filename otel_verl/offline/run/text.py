"""The summary's lines: a run's model (``run.model.Report``) as a few lines of text, in RL terms first,
then in OpenTelemetry terms; the health box first, the telemetry's own cost last.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from otel_verl import semconv
from otel_verl.offline.bounded import Series
from otel_verl.offline.facts import stall
from otel_verl.offline.facts.engine import SPLIT
from otel_verl.offline.facts.step_trace import ERROR, RANKS
from otel_verl.offline.facts.tails import ALL_TRAJECTORIES, RATIO
from otel_verl.offline.facts.time_went import ATTRIBUTED, POLL_LAG, TIME_BY, category_words
from otel_verl.offline.folds import StepFact
from otel_verl.offline.otlp_files import SpanRecord
from otel_verl.offline.run.model import VALIDATION_KEYS, Report, StepRow, slowest_row
from otel_verl.printable import printable

MAX_STEP_COLUMNS = 12  # steps shown side by side; longer runs show the first and last half of these


MISSING = "-"


def lines(rep: Report) -> list[str]:
    """The summary's lines: the run's health first, the telemetry's own cost last."""
    out = [_headline(rep), *_health(rep)]
    out += [f"  note: {n}" for n in rep.notes if not (rep.skipped and n == rep.skipped.describe())]
    if rep.steps:
        out += ["", "time per stage, seconds (verl's timing_s/<stage>, from the verl.<stage> spans):"]
        stages = [("total", {r.step: r.span.seconds for r in rep.steps})]
        stages += [(st, {r.step: r.stages[st] for r in rep.steps if st in r.stages}) for st in rep.stage_order]
        stages.append(("other (outside any stage)", {r.step: r.other for r in rep.steps}))
        stages.append((COVERED, {r.step: ATTRIBUTED.of(r) or 0.0 for r in rep.steps}))
        out += _table(
            [r.step for r in rep.steps], stages, "{:.2f}", rep.totals.count, len(rep.steps) < rep.totals.count
        )
        out += ["  " + line for line in _where_the_time_went(rep)]
    all_series = [(label, values) for _, _, curve in rep.curves for label, values in curve]
    series = [(label, values) for label, values in all_series if values]
    if series:
        steps = sorted({s for _, values in series for s in values})
        out += ["", "metrics at each training step (the value verl logged, as exported at the end of the step):"]
        thinned = any(isinstance(v, Series) and v.thinned for _, v in series)
        out += _table(steps, series, "{:.4g}", max(len(steps), rep.totals.count) if thinned else len(steps), thinned)
        missing = [label for label, values in all_series if not values and label != VALIDATION_KEYS]
        if missing:
            out.append(f"  not logged by this run: {', '.join(missing)}")
    out += _slowest(rep)
    out += stall.lines(rep.stalled, rep.stall_reports)
    out += _telemetry(rep)
    cost = rep.overhead_line()
    if cost:
        out += ["", cost]
    return out


COVERED = "with a worker call, rollout or wait under it"


MARKS = {"ok": "[ok]   ", "warn": "[check]", "info": "[info] "}


def _health(rep: Report) -> list[str]:
    """The health box: one line per finding, with the report section that has the details."""
    h = rep.health
    if h is None:
        return []
    verdict = "nothing to check" if h.healthy else "something to check"
    out = [f"health: {verdict}"]
    for f in h.findings:
        where = f" (report: #{f.anchor})" if f.anchor else ""
        out.append(f"  {MARKS.get(f.level, f.level)} {f.topic}: {f.text}{where}")
    return out


def _where_the_time_went(rep: Report) -> list[str]:
    """Where the time went, in words: the share with work under it (every step), the slowest
    step's categories, and the v1 poll lag of each step shown."""
    steps = rep.steps
    total, covered = rep.totals.seconds, ATTRIBUTED.total_of(rep.totals)
    share = covered / total if total > 0 else 0.0
    out = [
        f"where the time went: {share:.0%} of step time has a worker call, rollout or wait under its stage; "
        f"the other {total - covered:.2f} s is the trainer's own work, inside stages and between them"
    ]
    timed = [r for r in steps if TIME_BY.of(r)]
    if timed:
        slow = slowest_row(timed)
        parts = sorted((TIME_BY.of(slow) or {}).items(), key=lambda kv: -kv[1])
        words = ", ".join(
            f"{category_words(c)} {v:.2f} s ({100 * v / slow.span.seconds:.0f}%)"
            for c, v in parts
            if v > 0 and slow.span.seconds > 0
        )
        out.append(f"slowest step {slow.step} ({slow.span.seconds:.2f} s): {words}")
    out += [f"step {r.step}: {v.line()}" for fact in STEP_LINES for r in steps if (v := fact.of(r)) is not None]
    return out


# The per-step facts said one line per step (their value's ``line()``), after where the time went.
STEP_LINES: tuple[StepFact, ...] = (POLL_LAG,)


def _headline(rep: Report) -> str:
    meta = rep.meta
    who = ", ".join(f"{k} {meta[k]}" for k in ("service", "driver", "experiment") if k in meta)
    total = rep.totals.seconds
    count = rep.totals.count
    steps = f"{count} training steps, {total:.1f} s in steps" if count else "no training steps"
    return f"verl run {meta.get('run id', '(no run id)')}{f' ({who})' if who else ''}: {steps}"


def _table(
    steps: Sequence[int], rows: list[tuple[str, dict[int, float]]], fmt: str, total: int, picked: bool
) -> list[str]:
    """Rows of values under one column per step (``steps``: those held, of ``total``; ``picked``:
    not every step is held); long runs show the first and last steps."""
    shown: list[int | None] = list(steps)
    note = ""
    if len(steps) > MAX_STEP_COLUMNS:
        half = MAX_STEP_COLUMNS // 2
        shown = [*steps[:half], None, *steps[-half:]]
        where = "the report has more" if picked else "the report has all"
        note = f"  (steps {steps[0]}-{steps[half - 1]} and {steps[-half]}-{steps[-1]} of {total}; {where})"
    cells = [["step", *("..." if s is None else str(s) for s in shown)]]
    for label, values in rows:
        cells.append(
            [
                printable(label),
                *("..." if s is None else fmt.format(values[s]) if s in values else MISSING for s in shown),
            ]
        )
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    table = [
        "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in cells
    ]
    return table + ([note] if note else [])


def _step_of(rep: Report, step: object) -> StepRow | None:
    return next((r for r in rep.steps if r.step == step), None)


def _slowest(rep: Report) -> list[str]:
    s = rep.slowest
    if s is None:
        if rep.validation_trajectories and not rep.trajectory_seconds:
            return [
                "",
                f"slowest rollout: none among training trajectories ({rep.validation_trajectories} validation "
                f"ones; {rep.slowest_rule})",
            ]
        return []
    a = s.attributes
    what = (
        " ".join(
            bit
            for bit in (
                f"sample {a[semconv.ATTR_ROLLOUT_SAMPLE_INDEX]}" if semconv.ATTR_ROLLOUT_SAMPLE_INDEX in a else "",
                f"rollout {a[semconv.ATTR_ROLLOUT_INDEX]}" if semconv.ATTR_ROLLOUT_INDEX in a else "",
            )
            if bit
        )
        or f"span {s.span_id}"
    )
    if a.get(semconv.ATTR_ROLLOUT_VALIDATE):
        what = f"validation {what}"
    submit = a.get(semconv.ATTR_ROLLOUT_SUBMIT_STEP)
    tokens = a.get(semconv.ATTR_ROLLOUT_RESPONSE_TOKENS)
    facts = [f"{s.seconds:.2f} s", what]
    facts += [f"submitted at step {submit}"] if submit is not None else []
    facts += [f"{tokens} response tokens"] if tokens is not None else []
    row = _step_of(rep, submit)
    ratio = RATIO.of(row) if row is not None else None
    if row is not None and ratio is not None and row.slowest is not None and row.slowest.span_id == s.span_id:
        gen = row.stages.get("gen")
        facts.append(f"{ratio:.1f}x its step's median" + (f", in a gen stage of {gen:.2f} s" if gen else ""))
    tree = [] if row is None or row.slowest is None or row.slowest.span_id != s.span_id else [_tree(s, row.tree)]
    return [
        "",
        f"slowest rollout trajectory ({rep.slowest_rule}):",
        "  " + ", ".join(facts),
        "  A step's rollout ends with its slowest trajectory: a long tail idles the other rollout slots and",
        "  delays the whole step (verl.rollout.tail_ratio tracks it; the report's timeline shows it in red).",
        *tree,
        *_engine(rep),
    ]


def _tree(s: SpanRecord, tree: Sequence[SpanRecord]) -> str:
    """Where the trajectory's kept tree is: its trace and span id, what it holds, why it was kept."""
    names = Counter(t.name for t in tree)
    held = ", ".join(f"{n} {name}" for name, n in sorted(names.items())) or "no child spans"
    because = s.attributes.get(semconv.ATTR_ROLLOUT_KEPT_BECAUSE)
    why = f" (kept because {because})" if isinstance(because, str) else ""
    return f"  its tree{why}: trace {s.trace_id} span {s.span_id}, {held}"


def _engine(rep: Report) -> list[str]:
    """Each step's slowest trajectory, split by the engine's own request spans (queue / prefill / decode)."""
    split = [(r.step, e) for r in rep.steps if (e := SPLIT.of(r)) is not None]
    if not split:
        return []
    out = ["  in the engine (its llm_request spans under the trajectory's LLM calls), each step's slowest:"]
    return out + [f"    step {n}: {e.line()}" for n, e in split]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 'es' if noun.endswith('s') else 's'}"


def _telemetry(rep: Report) -> list[str]:
    out = [
        "",
        f"telemetry: {rep.spans} spans and {rep.points} metric points from {_count(rep.senders, 'process')}; "
        f"{_count(len(rep.processes), 'process')} sent spans:",
    ]
    outage = rep.spool_line()
    if outage:
        out.append(f"  {outage}")
    out += [f"  {proc}: {n} spans" for proc, n in rep.processes]
    if rep.steps:
        out.append("step traces (verl.step roots; v1 rollout traces joined by verl.rollout.submit_step):")
        picked = rep.totals.picked(len(rep.steps))
        if picked:
            out.append(f"  ({picked}; the others in the report's charts)")
    for r in rep.steps:
        worker_ranks = RANKS.of(r)
        ranks = f" from ranks {', '.join(worker_ranks)}" if worker_ranks else ""
        error = "; ERROR" if ERROR.of(r) else ""
        out.append(
            f"  step {r.step}: trace {r.span.trace_id}, {r.spans} spans, {r.trajectories} trajectories"
            f"{', worker spans' + ranks if worker_ranks else ''}{error}"
        )
        if r.slowest is not None:  # where to open the step's slowest trajectory, its tree kept whole
            every = ALL_TRAJECTORIES.of(r)
            of = "" if every is None else f" (trees of {r.trajectories} of its {every})"
            out.append(
                f"    slowest trajectory{of}: span {r.slowest.span_id} in trace {r.slowest.trace_id}, "
                f"{r.tree_spans} spans below it"
            )
    return out
