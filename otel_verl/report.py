"""``otel-verl report RUN_DIR``: one self-contained HTML page about a run, from its OTLP JSON files.

Reads what the ``otlp_json_file`` exporters wrote (``traces-*.jsonl``, ``metrics-*.jsonl``) and
renders, with inline CSS, SVG and a few lines of JavaScript (no network, no dependency):

- the stage breakdown of every step (``verl.<stage>`` children of each ``verl.step`` root span),
  as stacked columns and as a table with the span durations;
- the timeline of one step (a waterfall of its spans: stages, ``verl.wg.*`` driver calls,
  ``verl.worker.*`` rank spans, ``verl.rollout.trajectory`` spans with their LLM calls drawn
  inside; the v1 driver's trajectories, which are traces of their own, are joined by
  ``verl.rollout.submit_step``), with the step's slowest trajectory marked. The page opens on the
  slowest step; a picker (or a click on a table row) shows any other;
- the rollout latency distribution: trajectory span durations, and the
  ``verl.rollout.trajectory.duration`` histogram metric (which counts every trajectory, not only
  the sampled ones with spans);
- reward, KL, throughput and a few more curves per step, from the gauges exported at each step
  boundary (``verl.training.step`` in the same export says which step), plus a picker for any
  ``verl.<key>`` gauge.

Everything the page shows is in its DOM without JavaScript except the "any metric" chart.
"""

from __future__ import annotations

import html
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_verl import semconv
from otel_verl.files import MetricPoint, SpanRecord, read_metric_points, read_spans, signal_files
from otel_verl.version import __version__

MAX_TIMELINE_STEPS = 100  # steps whose timeline is in the page (the slowest and the last ones beyond)
MAX_TRAJECTORY_ROWS = 48  # trajectory rows per step timeline (the slowest ones)
FOLD_ROWS = 50  # longer tables start folded
INSTANCE = "service.instance.id"

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

STAGE_COLORS = {
    "gen": "#4e79a7",
    "reward": "#59a14f",
    "old_log_prob": "#f28e2b",
    "ref": "#edc948",
    "values": "#b07aa1",
    "adv": "#76b7b2",
    "update_critic": "#ff9da7",
    "update_actor": "#e15759",
    "update_weights": "#9c755f",
    "testing": "#bab0ac",
    "save_checkpoint": "#8cd17d",
}
EXTRA_COLORS = ("#499894", "#86bcb6", "#d37295", "#fabfd2", "#b6992d", "#f1ce63", "#79706e", "#d4a6c8")
OTHER = "other"
OTHER_COLOR = "#d9d9d9"
SLOWEST_COLOR = "#d62728"


# ------------------------------------------------------------------------------------------- data


@dataclass
class StepRow:
    step: int
    span: SpanRecord
    stages: dict[str, float]  # top-level stage -> seconds (summed if timed twice), in start order
    other: float  # step time not covered by a top-level stage
    slowest: SpanRecord | None = None  # slowest (training) trajectory of the step
    trajectories: int = 0
    error: bool = False


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


@dataclass
class Histogram:
    bounds: list[float]
    counts: list[int]
    count: int
    total: float


@dataclass
class Report:
    folder: Path
    files: dict[str, int]  # signal -> files read
    spans: int
    points: int
    bad_lines: int
    meta: dict[str, str]
    processes: list[tuple[str, int]]  # ("taskrunner pid 870", spans)
    steps: list[StepRow]
    stage_order: list[str]
    timelines: dict[int, Timeline]
    default_step: int | None
    trajectory_seconds: list[float]  # training trajectory spans
    validation_trajectories: int
    trajectory_metric: Histogram | None
    curves: list[tuple[str, str, list[tuple[str, dict[int, float]]]]]
    gauges: dict[str, dict[int, float]]  # every per-step gauge series, label -> step -> value
    notes: list[str]


def _attr_key(attributes: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in attributes.items()))


def _series_label(name: str, attributes: dict[str, Any]) -> str:
    if not attributes:
        return name
    return name + "{" + ",".join(f"{k}={v}" for k, v in sorted(attributes.items())) + "}"


def step_gauges(points: Iterable[MetricPoint]) -> dict[tuple[str, tuple], dict[int, float]]:
    """Gauge values per training step: (name, attributes) -> {step: value}.

    A process exports all its gauges at each step boundary with one timestamp; the
    ``verl.training.step`` gauge of the same export names the step. Exports without it
    (validation before training, processes that log nothing) are left out.
    """
    groups: dict[tuple[Any, int], list[MetricPoint]] = defaultdict(list)
    for p in points:
        if p.kind == "gauge" and p.value is not None:
            who = p.resource.get(INSTANCE) or p.resource.get("process.pid")
            groups[(who, p.time_ns)].append(p)
    out: dict[tuple[str, tuple], dict[int, float]] = defaultdict(dict)
    for key in sorted(groups, key=lambda k: k[1]):
        batch = groups[key]
        step = next((p.value for p in batch if p.name == semconv.M_TRAINING_STEP and not p.attributes), None)
        if step is None:
            continue
        for p in batch:
            if p.name != semconv.M_TRAINING_STEP:
                out[(p.name, _attr_key(p.attributes))][int(step)] = float(p.value)  # type: ignore[arg-type]
    return dict(out)


def trajectory_histogram(points: Iterable[MetricPoint], validate: bool = False) -> Histogram | None:
    """The ``verl.rollout.trajectory.duration`` histogram summed over processes and attribute sets."""
    latest: dict[tuple, MetricPoint] = {}
    deltas: list[MetricPoint] = []
    for p in points:
        if p.name != semconv.M_ROLLOUT_TRAJECTORY_DURATION or p.kind != "histogram" or not p.bucket_counts:
            continue
        if bool(p.attributes.get(semconv.ATTR_ROLLOUT_VALIDATE)) != validate:
            continue
        if p.temporality == 1:
            deltas.append(p)
            continue
        key = (p.resource.get(INSTANCE), _attr_key(p.attributes), p.start_ns)
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


def _kind(span: SpanRecord) -> str:
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
    if span.name == semconv.SPAN_ROLLOUT_LLM_CALL:
        return "llm"
    return "other"


def _is_training_trajectory(span: SpanRecord) -> bool:
    return span.name == semconv.SPAN_ROLLOUT_TRAJECTORY and not span.attributes.get(semconv.ATTR_ROLLOUT_VALIDATE)


def _slowest(trajectories: list[SpanRecord]) -> SpanRecord | None:
    training = [s for s in trajectories if not s.attributes.get(semconv.ATTR_ROLLOUT_VALIDATE)]
    pool = training or trajectories
    return max(pool, key=lambda s: (s.end_ns - s.start_ns, s.span_id)) if pool else None


def _timeline(step: StepRow, members: list[SpanRecord]) -> Timeline:
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
        anchor = gen if gen is not None and s.name.startswith("verl.rollout.") else step.span
        children[anchor.span_id].append(s)
    linked = {s.span_id for s in linked_roots}

    trajectories = [s for s in members if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY]
    slowest = _slowest(trajectories)
    shown = set()
    if len(trajectories) > MAX_TRAJECTORY_ROWS:
        shown = {s.span_id for s in sorted(trajectories, key=lambda s: s.start_ns - s.end_ns)[:MAX_TRAJECTORY_ROWS]}

    rows: list[Row] = []

    def visit(span: SpanRecord, depth: int) -> None:
        kind = _kind(span)
        if kind == "traj" and shown and span.span_id not in shown:
            return
        row = Row(span, depth, kind, linked=span.span_id in linked)
        row.slowest = slowest is not None and span.span_id == slowest.span_id
        rows.append(row)
        for child in sorted(children.get(span.span_id, []), key=lambda s: (s.start_ns, s.name)):
            if kind == "traj" and child.name == semconv.SPAN_ROLLOUT_LLM_CALL:
                row.segments.append(child)
            else:
                visit(child, depth + 1)

    visit(step.span, 0)
    drawn = [r.span for r in rows] + [seg for r in rows for seg in r.segments]
    t0 = min(s.start_ns for s in drawn)
    t1 = max(s.end_ns for s in drawn)
    return Timeline(step.step, rows, t0, max(t1, t0 + 1), slowest, len(trajectories))


def build(folder: str | Path) -> Report:
    folder = Path(folder)
    bad: list[tuple[Path, int]] = []
    spans = read_spans(folder, bad)
    points = read_metric_points(folder, bad)
    notes: list[str] = []
    if bad:
        notes.append(f"{len(bad)} line(s) that are not OTLP JSON were skipped (first: {bad[0][0].name}:{bad[0][1]})")

    by_id = {s.span_id: s for s in spans}
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for s in spans:
        by_trace[s.trace_id].append(s)

    # ----------------------------------------------------------------- steps and their stages
    step_spans = sorted(
        (s for s in spans if s.name == semconv.SPAN_STEP and isinstance(s.attributes.get(semconv.ATTR_STEP), int)),
        key=lambda s: (s.attributes[semconv.ATTR_STEP], s.start_ns),
    )
    step_traces = {s.trace_id for s in step_spans}
    # v1: rollout traces of their own, joined to a step by verl.rollout.submit_step
    linked_traces: dict[int, list[str]] = defaultdict(list)
    for trace_id, members in by_trace.items():
        if trace_id in step_traces:
            continue
        roots = [s for s in members if s.parent_id not in by_id]
        submit = next(
            (
                r.attributes.get(semconv.ATTR_ROLLOUT_SUBMIT_STEP)
                for r in roots
                if semconv.ATTR_ROLLOUT_SUBMIT_STEP in r.attributes
            ),
            None,
        )
        if isinstance(submit, int):
            linked_traces[submit].append(trace_id)

    steps: list[StepRow] = []
    stage_order: list[str] = []
    members_of: dict[int, list[SpanRecord]] = {}
    for st in step_spans:
        n = st.attributes[semconv.ATTR_STEP]
        if n in members_of:
            notes.append(f"step {n} has more than one verl.step span; the first is shown")
            continue
        members = list(by_trace[st.trace_id])
        for trace_id in linked_traces.get(n, []):
            members.extend(by_trace[trace_id])
        members_of[n] = members
        stages: dict[str, float] = {}
        covered = 0.0
        for s in sorted(by_trace[st.trace_id], key=lambda s: s.start_ns):
            stage = s.attributes.get(semconv.ATTR_STAGE)
            if s.parent_id == st.span_id and isinstance(stage, str):
                stages[stage] = stages.get(stage, 0.0) + s.seconds
                covered += s.seconds
                if stage not in stage_order:
                    stage_order.append(stage)
        trajectories = [s for s in members if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY]
        steps.append(
            StepRow(
                n,
                st,
                stages,
                max(0.0, st.seconds - covered),
                _slowest(trajectories),
                len(trajectories),
                any(s.status == "STATUS_CODE_ERROR" for s in by_trace[st.trace_id]),
            )
        )

    default_step = max(steps, key=lambda r: (r.span.seconds, r.step)).step if steps else None
    chosen = [r.step for r in steps]
    if len(chosen) > MAX_TIMELINE_STEPS:
        half = MAX_TIMELINE_STEPS // 2
        slow = sorted(steps, key=lambda r: -r.span.seconds)[:half]
        chosen = sorted({r.step for r in slow} | set(chosen[-half:]))
        notes.append(
            f"timelines are included for {len(chosen)} of {len(steps)} steps (the {half} slowest and the last {half})"
        )
    by_step = {r.step: r for r in steps}
    timelines = {n: _timeline(by_step[n], members_of[n]) for n in chosen}

    # ----------------------------------------------------------------- rollout latency
    trajectory_spans = [s for s in spans if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY]
    training = [s.seconds for s in trajectory_spans if _is_training_trajectory(s)]
    hist = trajectory_histogram(points)

    # ----------------------------------------------------------------- curves
    series = step_gauges(points)
    curves: list[tuple[str, str, list[tuple[str, dict[int, float]]]]] = []
    for title, unit, wanted in CURVES:
        lines = []
        for name, attr, label in wanted:
            values = series.get((name, ((attr[0], attr[1]),) if attr else ()))
            if values:
                lines.append((label, dict(sorted(values.items()))))
        if lines:
            curves.append((title, unit, lines))
    gauges = {
        _series_label(name, dict(attrs)): dict(sorted(values.items()))
        for (name, attrs), values in sorted(series.items())
    }

    # ----------------------------------------------------------------- who reported
    meta: dict[str, str] = {}
    resources = [s.resource for s in spans] + [p.resource for p in points]
    for key, label in (
        (semconv.RES_RUN_ID, "run id"),
        ("service.name", "service"),
        (semconv.RES_PROJECT, "project"),
        (semconv.RES_EXPERIMENT, "experiment"),
    ):
        values = sorted({str(r[key]) for r in resources if r.get(key) is not None})
        if values:
            meta[label] = ", ".join(values)
    drivers = sorted(
        {str(s.attributes[semconv.ATTR_DRIVER]) for s in step_spans if semconv.ATTR_DRIVER in s.attributes}
    )
    if drivers:
        meta["driver"] = ", ".join(drivers)
    if spans:
        start = min(s.start_ns for s in spans)
        end = max(s.end_ns for s in spans)
        meta["spans cover"] = f"{(end - start) / 1e9:.1f} s"
    procs: dict[str, int] = defaultdict(int)
    for r in [s.resource for s in spans]:
        rank = r.get(semconv.RES_RANK)
        procs[f"{r.get(semconv.RES_ROLE)}{'' if rank is None else f' rank {rank}'} pid {r.get('process.pid')}"] += 1
    if not spans:
        notes.append("no spans (traces-*.jsonl missing or empty): no stage breakdown, timeline or trajectory spans")
    elif not steps:
        notes.append("no verl.step spans: the run ended before its first step, or spans of the TaskRunner are missing")
    if not points:
        notes.append("no metric points (metrics-*.jsonl missing or empty): no curves")
    return Report(
        folder=folder,
        files={sig: len(signal_files(folder, sig)) for sig in ("traces", "metrics", "logs")},
        spans=len(spans),
        points=len(points),
        bad_lines=len(bad),
        meta=meta,
        processes=sorted(procs.items()),
        steps=steps,
        stage_order=stage_order,
        timelines=timelines,
        default_step=default_step,
        trajectory_seconds=training,
        validation_trajectories=sum(1 for s in trajectory_spans if not _is_training_trajectory(s)),
        trajectory_metric=hist,
        curves=curves,
        gauges=gauges,
        notes=notes,
    )


# ------------------------------------------------------------------------------------------- SVG


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _dur(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 600:
        return f"{seconds:.3f} s"
    return f"{seconds / 60:.1f} min"


def _num(value: float) -> str:
    return f"{value:.6g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step + 1e-9) * step
    out = [round(first, 12)]
    while out[-1] < hi - step * 1e-9:  # the last tick is at or above hi
        out.append(round(first + len(out) * step, 12))
    return out


def _stage_colors(stages: list[str]) -> dict[str, str]:
    colors = {}
    extra = iter(EXTRA_COLORS * 10)
    for s in stages:
        colors[s] = STAGE_COLORS.get(s) or next(extra)
    colors[OTHER] = OTHER_COLOR
    return colors


def _stacked_svg(report: Report, colors: dict[str, str]) -> str:
    rows = report.steps
    width, height, left, bottom, top = 1100, 300, 60, 40, 10
    plot_w, plot_h = width - left - 10, height - top - bottom
    top_value = max((r.span.seconds for r in rows), default=1.0) or 1.0
    ticks = nice_ticks(0, top_value)
    ymax = ticks[-1] or 1.0
    slot = plot_w / max(len(rows), 1)
    bar_w = max(1.0, min(48.0, slot * 0.8))
    out = [f'<svg class="chart stacked" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">']
    for t in ticks:
        y = top + plot_h - t / ymax * plot_h
        out.append(f'<line class="grid" x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_num(t)} s</text>')
    label_every = max(1, math.ceil(len(rows) / 25))
    for i, r in enumerate(rows):
        x = left + i * slot + (slot - bar_w) / 2
        y = top + plot_h
        for stage, seconds in [*r.stages.items(), (OTHER, r.other)]:
            h = seconds / ymax * plot_h
            if h <= 0:
                continue
            y -= h
            out.append(
                f'<rect class="seg" data-step="{r.step}" data-stage="{_e(stage)}" data-seconds="{seconds!r}" '
                f'x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.2f}" fill="{colors[stage]}">'
                f"<title>step {r.step} {_e(stage)}: {_dur(seconds)}</title></rect>"
            )
        if i % label_every == 0 or i == len(rows) - 1:
            out.append(
                f'<text class="tick" x="{x + bar_w / 2:.1f}" y="{top + plot_h + 16}" '
                f'text-anchor="middle">{r.step}</text>'
            )
    out.append(f'<text class="axis" x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle">step</text>')
    out.append("</svg>")
    return "".join(out)


def _legend(colors: dict[str, str]) -> str:
    items = "".join(f'<span class="key"><i style="background:{c}"></i>{_e(name)}</span>' for name, c in colors.items())
    return f'<div class="legend">{items}</div>'


def _stage_table(report: Report) -> str:
    head = "".join(f'<th data-stage="{_e(s)}">{_e(s)}</th>' for s in report.stage_order)
    out = [
        '<table id="stage-table" class="num"><thead><tr><th>step</th>'
        f"<th>step span</th>{head}<th>{OTHER}</th><th>trajectories</th><th>slowest trajectory</th></tr></thead><tbody>"
    ]
    for r in report.steps:
        cells = "".join(
            f'<td data-stage="{_e(s)}" data-seconds="{r.stages[s]!r}">{r.stages[s]:.3f}</td>'
            if s in r.stages
            else f'<td data-stage="{_e(s)}"></td>'
            for s in report.stage_order
        )
        slow = (
            f'<td class="slowest-cell" data-span-id="{r.slowest.span_id}" data-seconds="{r.slowest.seconds!r}">'
            f"{r.slowest.seconds:.3f} <code>{r.slowest.span_id}</code></td>"
            if r.slowest
            else "<td></td>"
        )
        cls = ' class="error"' if r.error else ""
        out.append(
            f'<tr data-step="{r.step}"{cls}><th>{r.step}</th>'
            f'<td class="step-total" data-seconds="{r.span.seconds!r}">{r.span.seconds:.3f}</td>{cells}'
            f'<td data-stage="{OTHER}" data-seconds="{r.other!r}">{r.other:.3f}</td>'
            f"<td>{r.trajectories}</td>{slow}</tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


_KIND_COLORS = {"wg": "#8e9aaf", "worker": "#6b8f71", "traj": "#a0c4e8", "tail": "#555", "other": "#b8a9c9"}


def _row_label(row: Row) -> str:
    s = row.span
    a = s.attributes
    label = s.name
    if row.kind == "worker" and semconv.RES_RANK in s.resource:
        label += f" [rank {s.resource[semconv.RES_RANK]}]"
    elif row.kind == "traj":
        label = "trajectory"
        if semconv.ATTR_ROLLOUT_SAMPLE_INDEX in a:
            label += f" sample {a[semconv.ATTR_ROLLOUT_SAMPLE_INDEX]}"
        if semconv.ATTR_ROLLOUT_INDEX in a:
            label += f" #{a[semconv.ATTR_ROLLOUT_INDEX]}"
        if a.get(semconv.ATTR_ROLLOUT_VALIDATE):
            label += " (val)"
    return label


def _timeline_svg(tl: Timeline, colors: dict[str, str]) -> str:
    width, label_w, row_h, top = 1100, 330, 18, 24
    plot_w = width - label_w - 70
    span_ns = tl.t1 - tl.t0
    height = top + row_h * len(tl.rows) + 6
    out = [f'<svg class="chart waterfall" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">']
    for t in nice_ticks(0, span_ns / 1e9, 8):
        if t * 1e9 > span_ns:
            break
        x = label_w + t * 1e9 / span_ns * plot_w
        out.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{top - 4}" y2="{height}"/>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{top - 8}" text-anchor="middle">{_num(t)} s</text>')
    for i, row in enumerate(tl.rows):
        s = row.span
        y = top + i * row_h
        x = label_w + (s.start_ns - tl.t0) / span_ns * plot_w
        w = max(1.0, (s.end_ns - s.start_ns) / span_ns * plot_w)
        stage = s.attributes.get(semconv.ATTR_STAGE)
        fill = SLOWEST_COLOR if row.slowest else colors.get(stage, "#4e79a7") if row.kind in ("stage", "step") else None
        if row.kind == "step":
            fill = "#333"
        fill = fill or _KIND_COLORS.get(row.kind, "#b8a9c9")
        classes = ["row", f"kind-{row.kind}"]
        if row.slowest:
            classes.append("slowest")
        if row.linked:
            classes.append("linked")
        if s.status == "STATUS_CODE_ERROR":
            classes.append("error")
        label = ("★ " if row.slowest else "") + _row_label(row)
        title = f"{s.name} {_dur(s.seconds)} span {s.span_id} trace {s.trace_id}"
        if row.linked:
            title += f" (own trace, joined by {semconv.ATTR_ROLLOUT_SUBMIT_STEP})"
        out.append(
            f'<g class="{" ".join(classes)}" data-span-id="{s.span_id}" data-name="{_e(s.name)}" '
            f'data-seconds="{s.seconds!r}"><title>{_e(title)}</title>'
        )
        if i % 2:
            out.append(f'<rect class="band" x="0" y="{y}" width="{width}" height="{row_h}"/>')
        out.append(
            f'<text class="label" x="{4 + row.depth * 12}" y="{y + 13}">{_e(label[: 52 - row.depth * 2])}</text>'
        )
        dash = ' stroke-dasharray="3 2"' if row.linked else ""
        out.append(
            f'<rect class="bar" x="{x:.2f}" y="{y + 3}" width="{w:.2f}" height="{row_h - 6}" fill="{fill}"{dash}/>'
        )
        for seg in row.segments:
            sx = label_w + (seg.start_ns - tl.t0) / span_ns * plot_w
            sw = max(1.0, (seg.end_ns - seg.start_ns) / span_ns * plot_w)
            out.append(
                f'<rect class="llm" x="{sx:.2f}" y="{y + 6}" width="{sw:.2f}" height="{row_h - 12}">'
                f"<title>{_e(seg.name)} {_dur(seg.seconds)}</title></rect>"
            )
        text = _dur(s.seconds) + ("  slowest" if row.slowest else "")
        out.append(f'<text class="dur" x="{x + w + 4:.1f}" y="{y + 13}">{_e(text)}</text></g>')
    out.append("</svg>")
    return "".join(out)


def _timeline_section(tl: Timeline, colors: dict[str, str], shown: bool, step_seconds: float) -> str:
    s = tl.slowest
    if s is not None:
        a = s.attributes
        bits = [
            f"sample {a[semconv.ATTR_ROLLOUT_SAMPLE_INDEX]}" if semconv.ATTR_ROLLOUT_SAMPLE_INDEX in a else "",
            f"rollout {a[semconv.ATTR_ROLLOUT_INDEX]}" if semconv.ATTR_ROLLOUT_INDEX in a else "",
            f"{a[semconv.ATTR_ROLLOUT_RESPONSE_TOKENS]} response tokens"
            if semconv.ATTR_ROLLOUT_RESPONSE_TOKENS in a
            else "",
            f"{s.resource.get(semconv.RES_ROLE)} pid {s.resource.get('process.pid')}",
        ]
        slow = (
            f'<p class="slowest-note" data-span-id="{s.span_id}" data-seconds="{s.seconds!r}">'
            f'<span class="swatch" style="background:{SLOWEST_COLOR}"></span> Slowest trajectory: '
            f'<code class="span-id">{s.span_id}</code> <b class="seconds">{_dur(s.seconds)}</b> '
            f"({_e(', '.join(b for b in bits if b))}; trace <code>{s.trace_id}</code>)</p>"
        )
    else:
        slow = '<p class="slowest-note none">No trajectory spans in this step.</p>'
    capped = ""
    if tl.trajectories > MAX_TRAJECTORY_ROWS:
        capped = f" Showing the {MAX_TRAJECTORY_ROWS} slowest of {tl.trajectories} trajectories."
    return (
        f'<section class="timeline{" shown" if shown else ""}" data-step="{tl.step}">'
        f"<h3>Step {tl.step} <small>{_dur(step_seconds)}, {len(tl.rows)} rows.{capped}</small></h3>"
        f"{slow}{_timeline_svg(tl, colors)}</section>"
    )


def _histogram_svg(edges: list[float], counts: list[int], unit: str, marks: dict[str, float], css: str) -> str:
    width, height, left, bottom, top = 540, 240, 50, 42, 14
    plot_w, plot_h = width - left - 12, height - top - bottom
    count_ticks = nice_ticks(0, max(counts, default=1) or 1, 4)
    top_count = count_ticks[-1] or 1
    out = [f'<svg class="chart {css}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">']
    for t in count_ticks:
        y = top + plot_h - t / top_count * plot_h
        out.append(f'<line class="grid" x1="{left}" x2="{width - 12}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_num(t)}</text>')
    n = len(counts)
    slot = plot_w / max(n, 1)
    for i, c in enumerate(counts):
        h = c / top_count * plot_h
        x = left + i * slot
        lo, hi = edges[i], edges[i + 1]
        out.append(
            f'<rect class="bin" data-lo="{lo!r}" data-hi="{hi!r}" data-count="{c}" x="{x + 1:.1f}" '
            f'y="{top + plot_h - h:.1f}" width="{max(slot - 2, 1):.1f}" height="{h:.1f}">'
            f"<title>{_num(lo)}–{_num(hi)} {unit}: {c}</title></rect>"
        )
    label_every = max(1, math.ceil((n + 1) / 8))
    for i, edge in enumerate(edges):
        if i % label_every == 0 or i == n:
            x = left + i * slot
            shown = "+inf" if math.isinf(edge) else _num(edge)
            out.append(f'<text class="tick" x="{x:.1f}" y="{top + plot_h + 14}" text-anchor="middle">{shown}</text>')
    lo_edge, hi_edge = edges[0], edges[-1]
    for name, value in marks.items():
        if math.isfinite(hi_edge) and hi_edge > lo_edge:
            x = left + (value - lo_edge) / (hi_edge - lo_edge) * plot_w
            out.append(f'<line class="mark" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}"/>')
            out.append(f'<text class="mark" x="{x + 3:.1f}" y="{top + 10}">{_e(name)}</text>')
    out.append(f'<text class="axis" x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle">{unit}</text>')
    out.append("</svg>")
    return "".join(out)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _rollout_section(report: Report) -> str:
    out = ['<section id="rollout"><h2>Rollout latency</h2><div class="row">']
    values = report.trajectory_seconds
    if values:
        hi = max(values)
        ticks = nice_ticks(0.0, hi, max(5, min(30, math.ceil(math.sqrt(len(values))))))
        width = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
        n_bins = max(1, math.floor(hi / width) + 1)
        edges = [round(i * width, 12) for i in range(n_bins + 1)]
        counts = [0] * n_bins
        for v in values:
            counts[min(int(v / width), n_bins - 1)] += 1
        p50, p90, p99 = (_quantile(values, q) for q in (0.5, 0.9, 0.99))
        stats = (
            f'<p class="stats" data-count="{len(values)}" data-max="{hi!r}">{len(values)} training trajectory spans; '
            f"p50 {_dur(p50)}, p90 {_dur(p90)}, p99 {_dur(p99)}, max <b>{_dur(hi)}</b>, mean "
            f"{_dur(statistics.fmean(values))}"
            + (
                f"; {report.validation_trajectories} validation trajectories not counted"
                if report.validation_trajectories
                else ""
            )
            + "</p>"
        )
        out.append(
            '<div class="panel"><h3>From trajectory spans</h3>'
            + stats
            + _histogram_svg(edges, counts, "s", {"p50": p50, "p90": p90}, "spans-hist")
            + "</div>"
        )
    else:
        out.append('<div class="panel"><h3>From trajectory spans</h3><p class="empty">No trajectory spans.</p></div>')
    hist = report.trajectory_metric
    if hist is not None and hist.count:
        nonzero = [i for i, c in enumerate(hist.counts) if c]
        first, last = max(0, nonzero[0]), min(len(hist.counts) - 1, nonzero[-1])
        edges = [0.0, *hist.bounds, math.inf]
        mean = hist.total / hist.count
        out.append(
            '<div class="panel"><h3>From the <code>'
            + semconv.M_ROLLOUT_TRAJECTORY_DURATION
            + "</code> histogram</h3>"
            + f'<p class="stats metric" data-count="{hist.count}" data-sum="{hist.total!r}">{hist.count} training '
            f"trajectories counted (every one, sampled or not); mean {_dur(mean)}</p>"
            + _histogram_svg(
                edges[first : last + 2], hist.counts[first : last + 1], "s (bucket bounds)", {}, "metric-hist"
            )
            + "</div>"
        )
    else:
        out.append(
            '<div class="panel"><h3>From the histogram metric</h3><p class="empty">No '
            + semconv.M_ROLLOUT_TRAJECTORY_DURATION
            + " points.</p></div>"
        )
    out.append("</div></section>")
    return "".join(out)


LINE_COLORS = ("#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1")


def _line_svg(title: str, unit: str, lines: list[tuple[str, dict[int, float]]]) -> str:
    width, height, left, bottom, top = 540, 220, 64, 36, 12
    plot_w, plot_h = width - left - 14, height - top - bottom
    steps = sorted({s for _, v in lines for s in v})
    values = [x for _, v in lines for x in v.values()]
    lo, hi = min(values), max(values)
    if hi == lo:
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    ticks = nice_ticks(lo, hi, 4)
    lo, hi = min(lo, ticks[0]), max(hi, ticks[-1])
    s0, s1 = steps[0], steps[-1]

    def sx(step: int) -> float:
        return left + (0.5 if s1 == s0 else (step - s0) / (s1 - s0)) * plot_w

    def sy(v: float) -> float:
        return top + plot_h - (v - lo) / (hi - lo) * plot_h

    out = [
        f'<svg class="chart curve" data-title="{_e(title)}" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img">'
    ]
    for t in ticks:
        out.append(f'<line class="grid" x1="{left}" x2="{width - 14}" y1="{sy(t):.1f}" y2="{sy(t):.1f}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{_num(t)}</text>')
    every = max(1, math.ceil(len(steps) / 10))
    for i, st in enumerate(steps):
        if i % every == 0 or i == len(steps) - 1:
            out.append(f'<text class="tick" x="{sx(st):.1f}" y="{top + plot_h + 14}" text-anchor="middle">{st}</text>')
    out.append(f'<text class="axis" x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle">step</text>')
    if unit:
        out.append(
            f'<text class="axis" x="12" y="{top + plot_h / 2}" transform="rotate(-90 12 {top + plot_h / 2})" '
            f'text-anchor="middle">{_e(unit)}</text>'
        )
    for k, (label, data) in enumerate(lines):
        color = LINE_COLORS[k % len(LINE_COLORS)]
        pts = " ".join(f"{sx(s):.1f},{sy(v):.1f}" for s, v in data.items())
        out.append(f'<g class="series" data-label="{_e(label)}">')
        out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        for s, v in data.items():
            out.append(
                f'<circle data-step="{s}" data-value="{v!r}" cx="{sx(s):.1f}" cy="{sy(v):.1f}" r="3" fill="{color}">'
                f"<title>{_e(label)} step {s}: {_num(v)}</title></circle>"
            )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _curves_section(report: Report) -> str:
    out = ['<section id="curves"><h2>Training curves</h2>']
    if not report.curves:
        out.append('<p class="empty">No per-step metric points (or no <code>verl.training.step</code> gauge).</p>')
        return "".join(out) + "</section>"
    out.append('<div class="grid">')
    for title, unit, lines in report.curves:
        legend = "".join(
            f'<span class="key"><i style="background:{LINE_COLORS[k % len(LINE_COLORS)]}"></i>{_e(label)}</span>'
            for k, (label, _) in enumerate(lines)
        )
        out.append(
            f'<div class="panel"><h3>{_e(title)}</h3><div class="legend">{legend}</div>'
            f"{_line_svg(title, unit, lines)}</div>"
        )
    out.append("</div>")
    columns = [(label, data) for _, _, lines in report.curves for label, data in lines]
    steps = sorted({s for _, d in columns for s in d})
    head = "".join(f'<th data-key="{_e(label)}">{_e(label)}</th>' for label, _ in columns)
    table = [f'<table id="curve-table" class="num"><thead><tr><th>step</th>{head}</tr></thead><tbody>']
    for s in steps:
        cells = "".join(
            f'<td data-key="{_e(label)}" data-value="{d[s]!r}">{_num(d[s])}</td>' if s in d else "<td></td>"
            for label, d in columns
        )
        table.append(f'<tr data-step="{s}"><th>{s}</th>{cells}</tr>')
    table.append("</tbody></table>")
    out.append(_folded("".join(table), len(steps), "values per step"))
    out.append("</section>")
    return "".join(out)


def _folded(table: str, rows: int, what: str) -> str:
    """A table inside <details>, open unless it is long (it stays in the DOM either way)."""
    state = " open" if rows <= FOLD_ROWS else ""
    return f"<details{state}><summary>{what} ({rows} rows)</summary>{table}</details>"


CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 24px 40px;color:#222;background:#fff}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:10px 0 4px}small{color:#666;font-weight:normal}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:8px 0}dl.meta dt{color:#666}
dl.meta dd{margin:0}nav a{margin-right:14px}code{font-size:12px;background:#f3f3f3;padding:0 3px}
.legend{margin:4px 0}.key{display:inline-block;margin-right:12px;font-size:12px}
.key i,.swatch{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;border-radius:2px}
svg.chart{display:block;max-width:100%;height:auto}.grid svg.chart,.row svg.chart{width:100%}
svg text{font-size:11px;fill:#333}
svg .grid{stroke:#eee}svg .tick{fill:#777}svg .axis{fill:#555}svg .band{fill:#f7f7f7}
svg .bar{stroke:#0002}svg .llm{fill:#1f3d7a;opacity:.75}svg .dur{fill:#555;font-size:10px}
svg .slowest .bar{stroke:#7a0000;stroke-width:2}svg .slowest text{fill:#b00000;font-weight:bold}
svg .error .bar{stroke:#d00;stroke-width:2}svg .bin{fill:#4e79a7}svg .metric-hist .bin{fill:#76b7b2}
svg line.mark{stroke:#d62728;stroke-dasharray:4 3}svg text.mark{fill:#d62728}
table.num{border-collapse:collapse;margin:10px 0;font-variant-numeric:tabular-nums}
table.num th,table.num td{border:1px solid #e3e3e3;padding:2px 7px;text-align:right}
table.num thead th{background:#fafafa;position:sticky;top:0}
summary{cursor:pointer;color:#555}
#stage-table tbody tr{cursor:pointer}#stage-table tr.selected{background:#fff5d6}tr.error th{color:#d00}
.timeline{display:none}.timeline.shown{display:block}.slowest-note{margin:4px 0}
.row{display:flex;flex-wrap:wrap;gap:20px}.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:12px}
.panel{flex:0 1 560px;border:1px solid #eee;border-radius:6px;padding:6px 10px}.empty,.notes{color:#8a5a00}
"""

JS = """
(function(){
  var pick=document.getElementById('step-pick');
  function show(step){
    document.querySelectorAll('section.timeline').forEach(function(s){
      s.classList.toggle('shown', s.getAttribute('data-step')===String(step));});
    document.querySelectorAll('#stage-table tbody tr').forEach(function(r){
      r.classList.toggle('selected', r.getAttribute('data-step')===String(step));});
    if(pick) pick.value=String(step);
  }
  if(pick){pick.addEventListener('change',function(){show(pick.value);});}
  document.querySelectorAll('#stage-table tbody tr').forEach(function(r){
    r.addEventListener('click',function(){
      var s=r.getAttribute('data-step');
      if(document.querySelector('section.timeline[data-step="'+s+'"]')){show(s);
        document.getElementById('timeline').scrollIntoView();}
    });
  });
  if(pick) show(pick.value);
  var data=JSON.parse(document.getElementById('gauge-data').textContent);
  var sel=document.getElementById('metric-pick'), box=document.getElementById('metric-chart');
  if(!sel) return;
  var NS='http://www.w3.org/2000/svg';
  function el(n,a,t){var e=document.createElementNS(NS,n);for(var k in a)e.setAttribute(k,a[k]);
    if(t!==undefined)e.textContent=t;return e;}
  function draw(name){
    var d=data[name]||{}, steps=Object.keys(d).map(Number).sort(function(a,b){return a-b;});
    box.innerHTML='';if(!steps.length)return;
    var W=1100,H=260,L=70,T=12,B=34,pw=W-L-14,ph=H-T-B;
    var vals=steps.map(function(s){return d[s];}),lo=Math.min.apply(null,vals),hi=Math.max.apply(null,vals);
    if(hi===lo){var p=Math.abs(hi)*0.1||1;lo-=p;hi+=p;}
    var s0=steps[0],s1=steps[steps.length-1];
    function x(s){return L+(s1===s0?0.5:(s-s0)/(s1-s0))*pw;} function y(v){return T+ph-(v-lo)/(hi-lo)*ph;}
    var svg=el('svg',{viewBox:'0 0 '+W+' '+H,width:W,height:H,'class':'chart picked','data-metric':name});
    [lo,(lo+hi)/2,hi].forEach(function(v){svg.appendChild(el('line',{'class':'grid',x1:L,x2:W-14,y1:y(v),y2:y(v)}));
      svg.appendChild(el('text',{'class':'tick',x:L-6,y:y(v)+4,'text-anchor':'end'},Number(v.toPrecision(4))));});
    svg.appendChild(el('polyline',{points:steps.map(function(s){return x(s)+','+y(d[s]);}).join(' '),
      fill:'none',stroke:'#4e79a7','stroke-width':2}));
    steps.forEach(function(s){var c=el('circle',{cx:x(s),cy:y(d[s]),r:3,fill:'#4e79a7','data-step':s,
      'data-value':d[s]});c.appendChild(el('title',{},'step '+s+': '+d[s]));svg.appendChild(c);
      svg.appendChild(el('text',{'class':'tick',x:x(s),y:T+ph+14,'text-anchor':'middle'},s));});
    box.appendChild(svg);
  }
  sel.addEventListener('change',function(){draw(sel.value);});
  draw(sel.value);
})();
"""


def render(report: Report) -> str:
    colors = _stage_colors(report.stage_order)
    title = f"verl run {report.meta.get('run id', report.folder.name)}"
    meta = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in report.meta.items())
    meta += (
        f"<dt>read</dt><dd>{_e(report.folder)}: {report.files['traces']} trace, {report.files['metrics']} metric, "
        f"{report.files['logs']} log files; {report.spans} spans, {report.points} metric points, "
        f"{len(report.steps)} steps</dd>"
    )
    if report.processes:
        meta += "<dt>processes</dt><dd>" + "; ".join(f"{_e(p)}: {n} spans" for p, n in report.processes) + "</dd>"
    notes = "".join(f"<li>{_e(n)}</li>" for n in report.notes)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f'<h1>{_e(title)}</h1><dl class="meta">{meta}</dl>',
        f'<ul class="notes">{notes}</ul>' if notes else "",
        '<nav><a href="#stages">Stages</a><a href="#timeline">Step timeline</a><a href="#rollout">Rollout latency</a>'
        '<a href="#curves">Training curves</a><a href="#explore">Any metric</a></nav>',
        '<section id="stages"><h2>Stage breakdown per step</h2>',
    ]
    if report.steps:
        parts += [
            "<p>Top-level stage spans (<code>verl.&lt;stage&gt;</code> children of <code>verl.step</code>), "
            "seconds; <i>other</i> is step time outside any stage. Click a row to see its timeline.</p>",
            _legend(colors),
            _stacked_svg(report, colors),
            _folded(_stage_table(report), len(report.steps), "stage seconds per step"),
        ]
    else:
        parts.append('<p class="empty">No <code>verl.step</code> spans.</p>')
    parts.append("</section>")
    parts.append('<section id="timeline"><h2>Step timeline</h2>')
    if report.timelines:
        steps = {r.step: r for r in report.steps}
        options = "".join(
            f'<option value="{n}"{" selected" if n == report.default_step else ""}>step {n} '
            f"({_dur(steps[n].span.seconds)}){' slowest' if n == report.default_step else ''}</option>"
            for n in sorted(report.timelines)
        )
        default = report.default_step if report.default_step in report.timelines else max(report.timelines)
        parts.append(
            '<p>Step <select id="step-pick">' + options + "</select> <small>opens on the slowest step. Bars: stages, "
            "<code>verl.wg.*</code> driver calls, <code>verl.worker.*</code> in each rank, trajectories (dark "
            "inner bars: LLM calls; dashed outline: a trace of its own joined by "
            f"<code>{semconv.ATTR_ROLLOUT_SUBMIT_STEP}</code>). Slowest trajectory in red.</small></p>"
        )
        for n in sorted(report.timelines):
            parts.append(_timeline_section(report.timelines[n], colors, n == default, steps[n].span.seconds))
    else:
        parts.append('<p class="empty">No step traces.</p>')
    parts.append("</section>")
    parts.append(_rollout_section(report))
    parts.append(_curves_section(report))
    first = _series_label(semconv.M_REWARD, {semconv.ATTR_REWARD_SOURCE: "score"})
    options = "".join(
        f'<option value="{_e(n)}"{" selected" if n == first else ""}>{_e(n)}</option>' for n in report.gauges
    )
    gauge_json = json.dumps({k: {str(s): v for s, v in d.items()} for k, d in report.gauges.items()})
    gauge_json = gauge_json.replace("</", "<\\/")  # never ends the script element
    parts.append(
        '<section id="explore"><h2>Any metric</h2>'
        + (
            f'<p><select id="metric-pick">{options}</select> <small>every gauge exported at step boundaries '
            f"({len(report.gauges)} series)</small></p>"
            if report.gauges
            else '<p class="empty">No per-step gauges.</p>'
        )
        + '<div id="metric-chart"></div></section>'
    )
    parts.append(f'<script type="application/json" id="gauge-data">{gauge_json}</script>')
    parts.append(f"<script>{JS}</script>")
    parts.append(f"<footer><small>otel-verl {__version__} report</small></footer></body></html>")
    return "\n".join(parts)


class NoTelemetry(Exception):
    pass


def write_report(folder: str | Path, out: str | Path | None = None) -> tuple[Path, Report]:
    """Build and write the page; raises NoTelemetry when ``folder`` holds nothing to show."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NoTelemetry(f"{folder} is not a folder")
    if not any(signal_files(folder, sig) for sig in ("traces", "metrics")):
        raise NoTelemetry(f"no telemetry files (traces-*.jsonl, metrics-*.jsonl) in {folder}")
    report = build(folder)
    if not report.spans and not report.points:
        raise NoTelemetry(f"the telemetry files in {folder} hold no spans and no metric points")
    path = Path(out) if out is not None else folder / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(report), encoding="utf-8")
    return path, report
