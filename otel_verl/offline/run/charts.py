"""The SVG charts of the report page (no dependency, no script): stacked stage columns, the step
waterfall, histograms and line charts, and the text formats they share.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from otel_verl import semconv
from otel_verl.offline.bounded import thin
from otel_verl.offline.run.markup import esc
from otel_verl.offline.run.model import Report, Row, Timeline

# verl's usual stages keep their colour from run to run; other stages take EXTRA_COLORS in order.
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
OTHER = "other"  # the part of a step outside every top-level stage
OTHER_COLOR = "#d9d9d9"
SLOWEST_COLOR = "#d62728"
# Timeline rows that are not stages, by Row.kind; the lines of one curve chart, in order.
_KIND_COLORS = {"wg": "#8e9aaf", "worker": "#6b8f71", "traj": "#a0c4e8", "tail": "#555", "other": "#b8a9c9"}
LINE_COLORS = ("#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1")
MAX_INDENT = 16  # timeline rows deeper than this are drawn at this depth (the labels stay in their column)


def duration(seconds: float) -> str:
    """``12.3 ms``, ``2.500 s``, ``15.0 min``."""
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 600:
        return f"{seconds:.3f} s"
    return f"{seconds / 60:.1f} min"


def number(value: float) -> str:
    """A value as the page shows it: six significant digits."""
    return f"{value:.6g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]: the first at or below ``lo``, the last at
    or above ``hi``. Any finite range has ticks, up to the largest doubles and down to the
    smallest: where no round step is a double, just ``[lo, hi]``."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    n = max(n, 1)
    raw = hi / n - lo / n  # (hi - lo) / n, which would overflow for -1e308 to 1e308
    mag = 10.0 ** math.floor(math.log10(raw)) if 0 < raw < math.inf else 0.0
    if not 0 < mag < math.inf:  # a range of subnormals: no power of ten is its step
        return [lo, hi]
    step = next((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), math.inf)
    if step == math.inf:  # beyond the largest double, or subnormal powers of ten too imprecise
        return [lo, hi]
    digits = 3 - math.floor(math.log10(step))  # ticks rounded to the step's precision, not to 1e-12
    first = math.floor(lo / step + 1e-9) * step
    if first > lo + step * 1e-9:  # the product rounded up past lo
        first -= step
    out: list[float] = []
    for k in range(2 * n + 3):  # the ticks fit in n + 2 steps; never more, whatever rounding does
        tick = round(first + k * step, digits)
        if not math.isfinite(tick):
            return [lo, hi]
        if not out or tick > out[-1]:  # a step below the doubles' spacing there rounds to the same tick
            out.append(tick)
        if tick >= hi - step * 1e-9:
            return out
    return [lo, hi]


def fraction(value: float, lo: float, hi: float) -> float:
    """Where ``value`` is between ``lo`` (0) and ``hi`` (1), also where ``hi - lo`` overflows."""
    width = hi / 2 - lo / 2
    return (value / 2 - lo / 2) / width if width > 0 else 0.5


def swatch(color: str, dashed: bool = False) -> str:
    """A colour key as a small SVG (the page allows no ``style`` attribute): a square, or a dashed line."""
    mark = (
        f'<line x1="0" y1="6" x2="16" y2="6" stroke="{esc(color)}" stroke-width="2" stroke-dasharray="4 2"/>'
        if dashed
        else f'<rect x="0" y="0.5" width="11" height="11" rx="2" fill="{esc(color)}"/>'
    )
    width = 16 if dashed else 11
    return f'<svg class="swatch" width="{width}" height="12" viewBox="0 0 {width} 12" aria-hidden="true">{mark}</svg>'


def stage_colors(stages: list[str]) -> dict[str, str]:
    """A colour per stage, and one for ``OTHER``, in legend order."""
    colors = {}
    extra = iter(EXTRA_COLORS * 10)
    for s in stages:
        colors[s] = STAGE_COLORS.get(s) or next(extra)
    colors[OTHER] = OTHER_COLOR
    return colors


def legend(colors: dict[str, str]) -> str:
    """The colour keys of ``stage_colors``."""
    items = "".join(f'<span class="key">{swatch(c)}{esc(name)}</span>' for name, c in colors.items())
    return f'<div class="legend">{items}</div>'


def stacked_svg(report: Report, colors: dict[str, str]) -> str:
    """One column per step (a long run: per run of steps, its slowest), its top-level stages stacked
    in start order, then ``OTHER``."""
    rows = report.totals.columns.items()
    width, height, left, bottom, top = 1100, 300, 60, 40, 10
    plot_w, plot_h = width - left - 10, height - top - bottom
    top_value = max((r.seconds for r in rows), default=1.0) or 1.0
    ticks = nice_ticks(0, top_value)
    ymax = ticks[-1] or 1.0
    slot = plot_w / max(len(rows), 1)
    bar_w = max(1.0, min(48.0, slot * 0.8))
    out = [f'<svg class="chart stacked" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">']
    for t in ticks:
        y = top + plot_h - fraction(t, 0, ymax) * plot_h
        out.append(f'<line class="grid" x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{number(t)} s</text>')
    label_every = max(1, math.ceil(len(rows) / 25))
    for i, r in enumerate(rows):
        x = left + i * slot + (slot - bar_w) / 2
        y = top + plot_h
        for stage, seconds in [*r.stages.items(), (OTHER, r.other)]:
            h = fraction(seconds, 0, ymax) * plot_h
            if h <= 0:
                continue
            y -= h
            out.append(
                f'<rect class="seg" data-step="{esc(r.step)}" data-stage="{esc(stage)}" data-seconds="{seconds!r}" '
                f'x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.2f}" fill="{esc(colors[stage])}">'
                f"<title>step {esc(r.step)} {esc(stage)}: {duration(seconds)}</title></rect>"
            )
        last = len(rows) - 1
        if (i % label_every == 0 and last - i >= label_every / 2) or i == last:  # labels that do not overlap
            out.append(
                f'<text class="tick" x="{x + bar_w / 2:.1f}" y="{top + plot_h + 16}" '
                f'text-anchor="middle">{esc(r.step)}</text>'
            )
    out.append(f'<text class="axis" x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle">step</text>')
    out.append("</svg>")
    return "".join(out)


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


def timeline_svg(tl: Timeline, colors: dict[str, str]) -> str:
    """The waterfall of one step: a row per span, indented by depth, LLM calls inside their trajectory."""
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
        out.append(f'<text class="tick" x="{x:.1f}" y="{top - 8}" text-anchor="middle">{number(t)} s</text>')
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
        indent = min(row.depth, MAX_INDENT)
        title = f"{s.name} {duration(s.seconds)} span {s.span_id} trace {s.trace_id}"
        if row.linked:
            title += f" (own trace, joined by {semconv.ATTR_ROLLOUT_SUBMIT_STEP})"
        out.append(
            f'<g class="{" ".join(classes)}" data-span-id="{esc(s.span_id)}" data-name="{esc(s.name)}" '
            f'data-seconds="{s.seconds!r}"><title>{esc(title)}</title>'
        )
        if i % 2:
            out.append(f'<rect class="band" x="0" y="{y}" width="{width}" height="{row_h}"/>')
        out.append(f'<text class="label" x="{4 + indent * 12}" y="{y + 13}">{esc(label[: 52 - indent * 2])}</text>')
        dash = ' stroke-dasharray="3 2"' if row.linked else ""
        out.append(
            f'<rect class="bar" x="{x:.2f}" y="{y + 3}" width="{w:.2f}" height="{row_h - 6}" fill="{esc(fill)}"{dash}/>'
        )
        for seg in row.segments:
            sx = label_w + (seg.start_ns - tl.t0) / span_ns * plot_w
            sw = max(1.0, (seg.end_ns - seg.start_ns) / span_ns * plot_w)
            out.append(
                f'<rect class="llm" x="{sx:.2f}" y="{y + 6}" width="{sw:.2f}" height="{row_h - 12}">'
                f"<title>{esc(seg.name)} {duration(seg.seconds)}</title></rect>"
            )
        text = duration(s.seconds) + ("  slowest" if row.slowest else "")
        out.append(f'<text class="dur" x="{x + w + 4:.1f}" y="{y + 13}">{esc(text)}</text></g>')
    out.append("</svg>")
    return "".join(out)


def histogram_svg(edges: list[float], counts: list[int], unit: str, marks: dict[str, float], css: str) -> str:
    """Bars of ``counts`` between consecutive ``edges``, with a dashed line at each of ``marks`` (p50...)."""
    width, height, left, bottom, top = 540, 240, 50, 42, 14
    plot_w, plot_h = width - left - 12, height - top - bottom
    count_ticks = nice_ticks(0, max(counts, default=1) or 1, 4)
    top_count = count_ticks[-1] or 1
    out = [f'<svg class="chart {css}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">']
    for t in count_ticks:
        y = top + plot_h - fraction(t, 0, top_count) * plot_h
        out.append(f'<line class="grid" x1="{left}" x2="{width - 12}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{number(t)}</text>')
    n = len(counts)
    slot = plot_w / max(n, 1)
    for i, c in enumerate(counts):
        h = fraction(c, 0, top_count) * plot_h
        x = left + i * slot
        lo, hi = edges[i], edges[i + 1]
        out.append(
            f'<rect class="bin" data-lo="{lo!r}" data-hi="{hi!r}" data-count="{c}" x="{x + 1:.1f}" '
            f'y="{top + plot_h - h:.1f}" width="{max(slot - 2, 1):.1f}" height="{h:.1f}">'
            f"<title>{number(lo)}–{number(hi)} {esc(unit)}: {c}</title></rect>"
        )
    label_every = max(1, math.ceil((n + 1) / 8))
    for i, edge in enumerate(edges):
        if i % label_every == 0 or i == n:
            x = left + i * slot
            shown = "+inf" if math.isinf(edge) else number(edge)
            out.append(f'<text class="tick" x="{x:.1f}" y="{top + plot_h + 14}" text-anchor="middle">{shown}</text>')
    lo_edge, hi_edge = edges[0], edges[-1]
    for name, value in marks.items():
        if math.isfinite(hi_edge) and hi_edge > lo_edge:
            x = left + fraction(value, lo_edge, hi_edge) * plot_w
            out.append(f'<line class="mark" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}"/>')
            out.append(f'<text class="mark" x="{x + 3:.1f}" y="{top + 10}">{esc(name)}</text>')
    out.append(f'<text class="axis" x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle">{esc(unit)}</text>')
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class LineStyle:
    color: str
    width: float
    dash: str
    radius: float
    fill: str


def line_style(k: int, n: int) -> LineStyle:
    """How line ``k`` of ``n`` in one chart is drawn. Lines can coincide (``critic/score/mean`` equals
    ``critic/rewards/mean`` without a KL penalty): earlier lines are wider with larger markers and later
    ones dashed with hollow markers, so a line drawn over another leaves it visible."""
    color = LINE_COLORS[k % len(LINE_COLORS)]
    wider = n - 1 - k
    return LineStyle(color, 2 + 2.5 * wider, "" if k == 0 else "6 4", 3 + 2 * wider, color if k == 0 else "#fff")


def line_svg(title: str, unit: str, lines: list[tuple[str, dict[int, float]]]) -> str:
    """One line per (label, step -> value) series, steps on the x axis (non-finite values left out;
    a long series thinned: ``bounded.thin``)."""
    lines = [(label, thin({s: v for s, v in data.items() if math.isfinite(v)})) for label, data in lines]
    width, height, left, bottom, top = 540, 220, 64, 36, 12
    plot_w, plot_h = width - left - 14, height - top - bottom
    steps = sorted({s for _, v in lines for s in v})
    values = [x for _, v in lines for x in v.values()]
    if not values:
        return '<p class="empty">No finite values (every point is NaN or infinite).</p>'
    lo, hi = min(values), max(values)
    if hi == lo:
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = max(lo - pad, -sys.float_info.max), min(hi + pad, sys.float_info.max)  # not padded to inf
    ticks = nice_ticks(lo, hi, 4)
    lo, hi = min(lo, ticks[0]), max(hi, ticks[-1])
    s0, s1 = steps[0], steps[-1]

    def sx(step: int) -> float:
        return left + (0.5 if s1 == s0 else fraction(step, s0, s1)) * plot_w

    def sy(v: float) -> float:
        return top + plot_h - fraction(v, lo, hi) * plot_h

    out = [
        f'<svg class="chart curve" data-title="{esc(title)}" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img">'
    ]
    for t in ticks:
        out.append(f'<line class="grid" x1="{left}" x2="{width - 14}" y1="{sy(t):.1f}" y2="{sy(t):.1f}"/>')
        out.append(f'<text class="tick" x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{number(t)}</text>')
    every = max(1, math.ceil(len(steps) / 10))
    for i, st in enumerate(steps):
        if i % every == 0 or i == len(steps) - 1:
            out.append(
                f'<text class="tick" x="{sx(st):.1f}" y="{top + plot_h + 14}" text-anchor="middle">{esc(st)}</text>'
            )
    out.append(f'<text class="axis" x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle">step</text>')
    if unit:
        out.append(
            f'<text class="axis" x="12" y="{top + plot_h / 2}" transform="rotate(-90 12 {top + plot_h / 2})" '
            f'text-anchor="middle">{esc(unit)}</text>'
        )
    for k, (label, data) in enumerate(lines):
        style = line_style(k, len(lines))
        pts = " ".join(f"{sx(s):.1f},{sy(v):.1f}" for s, v in data.items())
        out.append(f'<g class="series" data-label="{esc(label)}">')
        out.append(
            f'<polyline points="{pts}" fill="none" stroke="{esc(style.color)}" stroke-width="{style.width}"'
            f"{f' stroke-dasharray={chr(34)}{style.dash}{chr(34)}' if style.dash else ''}/>"
        )
        for s, v in data.items():
            out.append(
                f'<circle data-step="{esc(s)}" data-value="{v!r}" cx="{sx(s):.1f}" cy="{sy(v):.1f}" '
                f'r="{style.radius}" fill="{esc(style.fill)}" stroke="{esc(style.color)}" stroke-width="1.5">'
                f"<title>{esc(label)} step {esc(s)}: {number(v)}</title></circle>"
            )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)
