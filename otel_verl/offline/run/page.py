"""The report page: its sections (tables, the charts of ``charts``, notes) in one self-contained
HTML document, with the stylesheet and script of ``assets/`` inline and a Content-Security-Policy
that runs nothing else. Every value from the files enters it through ``markup.esc`` (the data of
the "any metric" chart through ``markup.script_json``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from functools import cache
from importlib import resources

from otel_verl import semconv
from otel_verl.offline.bounded import THINNED, thin, thinned
from otel_verl.offline.facts import generation as gen
from otel_verl.offline.facts import goodput as gp
from otel_verl.offline.facts.engine import SPLIT
from otel_verl.offline.facts.pools import REPLICA_IDLE, STATES
from otel_verl.offline.facts.step_trace import ERROR
from otel_verl.offline.facts.time_went import ATTRIBUTED, POLL_LAG, TIME_BY, category_words
from otel_verl.offline.folds import StepFact
from otel_verl.offline.otlp_files import SpanRecord
from otel_verl.offline.run.charts import (
    OTHER,
    SLOWEST_COLOR,
    duration,
    histogram_svg,
    legend,
    line_style,
    line_svg,
    nice_ticks,
    number,
    stacked_svg,
    stage_colors,
    swatch,
    timeline_svg,
)
from otel_verl.offline.run.markup import csp_meta, esc, script_json
from otel_verl.offline.run.model import MAX_TRAJECTORY_ROWS, Report, StepRow, Timeline, series_label, slowest_row
from otel_verl.printable import printable
from otel_verl.version import __version__

FOLD_ROWS = 50  # longer tables start folded
NOTE_CHARS = 4000  # of a note (one names the skipped places: up to six file names and their reasons)
STACK_CHARS = 200_000  # of one process's stall stacks (every thread's frames)


@cache
def asset(name: str) -> str:
    """A file of ``assets/`` (``report.css``, ``report.js``), as text."""
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def render(report: Report) -> str:
    """The whole page, one HTML document that loads nothing."""
    return "".join(render_parts(report))


def render_parts(report: Report) -> Iterator[str]:
    """``render``'s page in parts, each section made when it is reached: a writer that encodes and
    writes them one at a time holds one section, not the page."""
    for i, part in enumerate(_parts(report)):
        yield part if i == 0 else "\n" + part


def _parts(report: Report) -> Iterator[str]:
    colors = stage_colors(report.stage_order)
    title = f"verl run {report.meta.get('run id', report.folder.name)}"
    notes = "".join(f"<li>{esc(n, NOTE_CHARS)}</li>" for n in report.notes)
    style, script = asset("report.css"), asset("report.js")
    yield "<!DOCTYPE html>"
    yield '<html lang="en"><head><meta charset="utf-8">'
    yield csp_meta(script, style)
    yield f"<title>{esc(title)}</title><style>{style}</style></head><body>"
    yield f"<h1>{esc(title)}</h1>"
    yield _health_section(report)
    yield _goodput_section(report)
    yield f'<dl class="meta">{_meta(report)}</dl>'
    yield f'<ul class="notes">{notes}</ul>' if notes else ""
    yield (
        '<nav><a href="#health">Health</a>'
        + ('<a href="#goodput">Goodput</a>' if _goodput(report) is not None else "")
        + '<a href="#stages">Stages</a>'
        + ('<a href="#time-went">Where the time went</a>' if any(TIME_BY.of(r) for r in report.steps) else "")
        + '<a href="#timeline">Step timeline</a><a href="#rollout">Rollout latency</a>'
        + ('<a href="#generation">Generation health</a>' if _has_generation(report) else "")
        + '<a href="#curves">Training curves</a><a href="#guard">Guard and alerts</a>'
        '<a href="#explore">Any metric</a></nav>'
    )
    yield _stages_section(report, colors)
    yield _time_section(report)
    yield _timelines_section(report, colors)
    yield _stall_section(report)
    yield _rollout_section(report)
    yield _generation_section(report)
    yield _curves_section(report)
    yield _guard_section(report)
    yield from _explore_section(report)
    yield _overhead(report)
    yield f"<script>{script}</script>"
    yield f"<footer><small>otel-verl {__version__} report</small></footer></body></html>"


def _meta(report: Report) -> str:
    meta = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in report.meta.items())
    meta += (
        f"<dt>read</dt><dd>{esc(report.source or report.folder)}: {report.files['traces']} trace, "
        f"{report.files['metrics']} metric, "
        f"{report.files['logs']} log files; {report.spans} spans, {report.points} metric points, "
        f"{report.totals.count} steps</dd>"
    )
    if report.processes:
        meta += (
            f"<dt>processes</dt><dd>{report.senders} sent telemetry, {len(report.processes)} of them spans: "
            + "; ".join(f"{esc(p)}: {n} spans" for p, n in report.processes)
            + "</dd>"
        )
    return meta


HEALTH_MARK = {"ok": "ok", "warn": "check", "info": "info"}


def _health_section(report: Report) -> str:
    """The health box: one line per finding (``facts.health``), each linking to its section."""
    h = report.health
    if h is None:
        return ""
    present = {"guard", "stall", "time-went", "stages", "rollout", "generation", "goodput", "curves"} & _sections(
        report
    )
    items = "".join(
        f'<li class="finding {esc(f.level)}" data-topic="{esc(f.topic)}"><span class="mark">'
        f"{HEALTH_MARK.get(f.level, f.level)}</span> <b>{esc(f.topic)}</b>: {esc(f.text)}"
        + (f' <a href="#{esc(f.anchor)}">details</a>' if f.anchor in present else "")
        + "</li>"
        for f in h.findings
    )
    verdict = "nothing to check" if h.healthy else "something to check (marked)"
    return (
        f'<section id="health" class="{"healthy" if h.healthy else "unhealthy"}"><h2>Run health: {verdict}</h2>'
        f"<ul>{items}</ul></section>"
    )


def _sections(report: Report) -> set[str]:
    """The ids of the sections this page has."""
    out = {"stages", "timeline", "rollout", "curves", "guard", "explore"}
    if any(TIME_BY.of(r) for r in report.steps):
        out.add("time-went")
    if report.stall_reports or report.stalled:
        out.add("stall")
    if _has_generation(report):
        out.add("generation")
    if _goodput(report) is not None:
        out.add("goodput")
    return out


def _goodput(report: Report) -> gp.Goodput | None:
    return report.health.goodput if report.health is not None else None


def _goodput_cells(account: gp.Account, role: str) -> str:
    total = sum(account.get((role, b), 0.0) for b in gp.BUCKETS)
    return "".join(
        f'<td data-bucket="{b}" data-seconds="{account.get((role, b), 0.0)!r}">{account.get((role, b), 0.0):.2f} '
        f"<small>{gp.percent(account.get((role, b), 0.0) / total) if total > 0 else '-'}</small></td>"
        for b in gp.BUCKETS
    )


def _goodput_section(report: Report) -> str:
    """Where each role's time went over the run (``facts.goodput``): the run's seconds and shares
    per bucket (the time outside the steps as overhead), the steps' alone, and each shown step's."""
    g = _goodput(report)
    if g is None:
        return ""
    head = "<tr><th>role</th><th>time</th>" + "".join(f"<th>{b}</th>" for b in gp.BUCKETS) + "</tr>"
    rows = "".join(
        f'<tr data-role="{role}" data-over="{over}"><th>{role}</th><td>{label}</td>{_goodput_cells(account, role)}</tr>'
        for role in gp.ROLES
        for over, label, account in (("run", "the run", g.run_s()), ("steps", "in the steps", g.steps_s))
    )
    steps = "".join(
        f'<tr data-step="{esc(n)}" data-role="{role}"><th>{esc(n)}</th><td>{role}</td>'
        + _goodput_cells(account, role)
        + "</tr>"
        for n, account in g.per_step.items()
        for role in gp.ROLES
    )
    per_step = (
        f'<details id="goodput-steps"{" open" if len(g.per_step) <= 4 else ""}><summary>each step</summary>'
        f'<table class="num" id="goodput-step-table"><thead><tr><th>step</th><th>role</th>'
        + "".join(f"<th>{b}</th>" for b in gp.BUCKETS)
        + f"</tr></thead><tbody>{steps}</tbody></table></details>"
        if steps
        else ""
    )
    return (
        '<section id="goodput"><h2>Goodput: where each role\'s time went</h2>'
        f"<p>{esc(g.line())}.</p><p><small>Seconds and share of each role's time (<code>{semconv.M_GOODPUT_TIME}"
        "</code>): trainer = the actor, critic and ref pools, productive when training, idle while waiting for "
        "rollouts; rollout = the replicas, productive when generating rollouts that were trained on, wasted on "
        "those verl dropped (by count), idle while waiting for the trainer; overhead: weight sync, checkpoints, "
        "validation, the trainer's own work, and the run's time outside its steps (start-up included).</small></p>"
        f'<table class="num" id="goodput-table"><thead>{head}</thead><tbody>{rows}</tbody></table>{per_step}</section>'
    )


def _has_generation(report: Report) -> bool:
    return report.health is not None and report.health.generation is not None


def _generation_section(report: Report) -> str:
    """Each degenerate kind's share of the training responses and of the validation ones over the
    run, and its worst step (``facts.generation``); a training share above the alert's threshold
    marked."""
    g = report.health.generation if report.health is not None else None
    if g is None:
        return ""
    rows = []
    for kind in gen.KINDS:
        for what, shares in (("training", g.training), ("validation", g.validation)):
            k = shares.get(kind)
            if k is None:
                continue
            over = ' class="over"' if what == "training" and kind in gen.ALERT_KINDS and k.alerting else ""
            rows.append(
                f'<tr{over} data-kind="{esc(kind)}" data-responses="{what}">'
                f"<th>{esc(kind)}</th><td>{what}</td><td>{esc(gen.percent(k.share))}</td>"
                + (
                    f"<td>{esc(k.worst_step)}</td><td>{esc(gen.percent(k.worst))}</td>"
                    if k.worst
                    else "<td>-</td><td>-</td>"
                )
                + f"<td>{k.steps}</td></tr>"
            )
    return (
        '<section id="generation"><h2>Generation health</h2><p><small>Each degenerate kind\'s share of the '
        f"responses (<code>{semconv.M_ROLLOUT_DEGENERATE_RATIO}</code> of the agent-loop workers: a step's share is "
        "the mean over its workers, the run's the mean over its steps; a worker's share counts in each step until it "
        "measures again: a validation's, until the next validation). A repetitive or empty "
        f"share of training responses above {gen.percent(gen.ALERT_THRESHOLD)} is marked, as "
        f"<code>{gen.ALERT}</code> would fire on it; the length-limit share depends on the task and the limit."
        "</small></p>"
        '<table class="num" id="generation-table"><thead><tr><th>kind</th><th>responses</th><th>run share</th>'
        "<th>worst step</th><th>its share</th><th>steps with a share</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></section>"
    )


def _guard_section(report: Report) -> str:
    """The guard's firings, the non-finite values verl logged, and the alerts the run's values
    would have fired (``facts.health``)."""
    h = report.health
    if h is None:
        return ""
    if h.firings:
        rows = "".join(
            f"<tr><td>{esc(f.step)}</td><td>{esc(f.rule)}</td><td>{esc(f.key)}</td>"
            f"<td>{esc('' if f.value is None else number(f.value))}</td><td>{esc(f.action)}</td></tr>"
            for f in h.firings
        )
        guard = (
            '<table id="guard-table"><thead><tr><th>step</th><th>rule</th><th>key</th><th>value</th>'
            f"<th>action</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    else:
        guard = '<p id="guard-none">No guard rule fired (<code>verl.guard.triggered</code>).</p>'
    if h.nonfinite:
        rows = "".join(
            f"<tr><td>{esc(key)}</td><td>{sum(steps.values())}</td>"
            f"<td>{esc(', '.join(str(s) for s in sorted(x for x in steps if x is not None)))}</td></tr>"
            for key, steps in sorted(h.nonfinite.items())
        )
        bad = (
            '<table id="nonfinite-table"><thead><tr><th>key</th><th>NaN/inf values</th><th>steps</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>"
        )
    else:
        bad = "<p>Every value verl logged was finite.</p>"
    if h.alerts:
        items = "".join(
            f'<li data-alert="{esc(a.alert)}"><b>{esc(a.alert)}</b>'
            + (f" (guard rule {esc(a.rule)})" if a.rule else "")
            + f": {esc(a.text)}</li>"
            for a in h.alerts
        )
        alerts = f'<ul id="alert-hits">{items}</ul>'
    else:
        alerts = '<p id="alert-hits">None would have fired.</p>'
    return (
        '<section id="guard"><h2>Guard and alerts</h2><h3>Guard rules that fired</h3>'
        + guard
        + "<h3>Non-finite values verl logged</h3>"
        + bad
        + "<h3>What the ops kit's alert rules would have fired on</h3><p><small>The guard's built-in rules "
        "(the alerts' thresholds, counted in steps instead of minutes) over this run's values, and the stall "
        "alert.</small></p>" + alerts + "</section>"
    )


def _stages_section(report: Report, colors: dict[str, str]) -> str:
    parts = ['<section id="stages"><h2>Stage breakdown per step</h2>']
    if report.steps:
        parts += [
            "<p>Top-level stage spans (<code>verl.&lt;stage&gt;</code> children of <code>verl.step</code>), "
            "seconds; <i>other</i> is step time outside any stage. Click a row to see its timeline.</p>",
            legend(colors),
            stacked_svg(report, colors),
            _picked(report),
            _folded(_stage_table(report), len(report.steps), "stage seconds per step"),
            _engine_split(report),
            _spool(report),
        ]
    else:
        parts.append('<p class="empty">No <code>verl.step</code> spans.</p>')
    parts.append("</section>")
    return "\n".join(parts)


SLOWEST_CLASS = ' class="slowest"'


def _time_section(report: Report) -> str:
    """Each step's seconds by category (``verl.time.*`` of the step span), the slowest step first
    in words; empty for runs recorded before otel-verl accounted step time."""
    rows = [r for r in report.steps if TIME_BY.of(r)]
    if not rows:
        return ""
    order: list[str] = []
    for r in rows:
        order += [c for c in TIME_BY.of(r) or {} if c not in order]
    slow = slowest_row(rows)

    def share(r: StepRow, c: str) -> str:
        v = (TIME_BY.of(r) or {}).get(c, 0.0)
        pct = 100 * v / r.span.seconds if r.span.seconds > 0 else 0.0
        return f'<td data-category="{esc(c)}" data-seconds="{v!r}">{v:.3f} <small>{pct:.0f}%</small></td>'

    head = "".join(f'<th data-category="{esc(c)}" title="{esc(c)}">{esc(category_words(c))}</th>' for c in order)
    body = "".join(
        f'<tr data-step="{esc(r.step)}"{SLOWEST_CLASS if r is slow else ""}><th>{esc(r.step)}</th>'
        f'<td data-seconds="{r.span.seconds!r}">{r.span.seconds:.3f}</td>'
        + "".join(share(r, c) for c in order)
        + f"<td>{100 * (ATTRIBUTED.of(r) or 0.0) / r.span.seconds if r.span.seconds > 0 else 0:.0f}%</td></tr>"
        for r in rows
    )
    table = (
        f'<table id="time-table" class="num"><thead><tr><th>step</th><th>step span, s</th>{head}'
        f"<th>{COVERED}</th></tr></thead><tbody>{body}</tbody></table>"
    )
    parts = sorted((TIME_BY.of(slow) or {}).items(), key=lambda kv: -kv[1])
    words = ", ".join(
        f"{esc(category_words(c))} {v:.2f} s ({100 * v / slow.span.seconds:.0f}%)"
        for c, v in parts
        if v > 0 and slow.span.seconds > 0
    )
    slow_lag = POLL_LAG.of(slow)
    lag = f' <span class="poll-lag">{esc(slow_lag.line())}.</span>' if slow_lag else ""
    lists = "".join(_step_list(report, *listed) for listed in STEP_LISTS)
    pools = _pools_of(rows, slow)
    return (
        '<section id="time-went"><h2>Where the time went</h2>'
        "<p>Each step's seconds by what the trainer was doing; the columns add up to the step "
        "(<code>verl.time.*</code> on the step span, <code>verl.step.time</code> in Prometheus). On the v1 "
        "driver the trainer waits for rollouts in the replay buffer, which checks every 2 s whether enough "
        "are done: the wait after they were all done is its own column. The last column is the share of "
        "the step with a worker call, rollout or wait under its stage; the rest is the trainer's own work.</p>"
        f'<p id="time-slowest"><b>Slowest step {esc(slow.step)} ({slow.span.seconds:.2f} s):</b> {words}.{lag}</p>'
        + lists
        + _folded(table, len(rows), "seconds by category per step")
        + pools
        + "</section>"
    )


COVERED = "with a worker call, rollout or wait under it"

# The per-step facts listed one line per step (their value's ``line()``) in "Where the time went":
# (the fact, the list's id, its title).
STEP_LISTS: tuple[tuple[StepFact, str, str], ...] = ((POLL_LAG, "poll-lag", "v1 poll lag per step"),)


def _step_list(report: Report, fact: StepFact, id_: str, title: str) -> str:
    """``fact`` of each step that has it, one line per step, folded (empty when none has it)."""
    said = [(r.step, v) for r in report.steps if (v := fact.of(r)) is not None]
    if not said:
        return ""
    items = "".join(f'<li data-step="{esc(n)}">step {esc(n)}: {esc(v.line())}</li>' for n, v in said)
    return f'<details id="{esc(id_)}"><summary>{esc(title)}</summary><ul>{items}</ul></details>'


def _pools_of(rows: list[StepRow], slow: StepRow) -> str:
    """Busy / waiting / idle seconds per pool role (``verl.pool.*`` of the step span), and each
    rollout replica's own idle share from its LLM-call spans (``offline/facts/pools.py``)."""
    roles: list[str] = []
    for r in rows:
        roles += [role for role in STATES.of(r) or {} if role not in roles]
    if not roles:
        return ""

    def cell(r: StepRow, role: str) -> str:
        st = (STATES.of(r) or {}).get(role)
        if not st:
            return f'<td data-role="{esc(role)}"></td>'
        text = " / ".join(f"{st.get(k, 0.0):.2f}" for k in POOL_STATES)
        return f'<td data-role="{esc(role)}">{text}</td>'

    head = "".join(f'<th data-role="{esc(role)}">{esc(role)}</th>' for role in roles)
    body = "".join(
        f'<tr data-step="{esc(r.step)}"{SLOWEST_CLASS if r is slow else ""}><th>{esc(r.step)}</th>'
        + "".join(cell(r, role) for role in roles)
        + f"<td>{esc(_replica_text(r))}</td></tr>"
        for r in rows
    )
    table = (
        f'<table id="pool-table" class="num"><thead><tr><th>step</th>{head}'
        f"<th>rollout replicas idle (own LLM calls)</th></tr></thead><tbody>{body}</tbody></table>"
    )
    slow_pools = STATES.of(slow) or {}
    words = "; ".join(
        f"{esc(role)} " + ", ".join(f"{k} {v:.2f} s" for k, v in slow_pools[role].items()) for role in slow_pools
    )
    replicas = _replica_text(slow)
    return (
        f'<p id="pool-slowest">Per pool in step {esc(slow.step)} (<code>verl.pool.time</code>; busy = the stages '
        f"that hold the role, waiting = <code>verl.wait</code>, idle = the rest): {words}."
        + (f" Rollout replicas idle, by their own LLM calls: {esc(replicas)}." if replicas else "")
        + "</p>"
        + _folded(table, len(rows), "busy / waiting / idle seconds per pool and step")
    )


POOL_STATES = ("busy", "waiting", "idle")


def _replica_text(r: StepRow) -> str:
    return ", ".join(f"{name} {100 * ratio:.0f}%" for name, ratio in sorted((REPLICA_IDLE.of(r) or {}).items()))


def _overhead(report: Report) -> str:
    """Telemetry cost per step (``otel_verl.overhead.cpu_time`` of every process), one plain line at the end."""
    line = report.overhead_line()
    if line is None:
        return ""
    return (
        f"<p id=\"overhead\"><small>{esc(line)} (otel-verl's own threads and its hooks' work on verl's threads, "
        "by their CPU clocks; not counted: native gRPC threads, garbage collection, the SDK import).</small></p>"
    )


def _spool(report: Report) -> str:
    """Whether the run had an export outage and whether anything was lost (the on-disk spools)."""
    line = report.spool_line()
    if line is None:
        return ""
    return (
        f'<p id="spool"><b>{esc(line)}</b>. <small>From otel_verl.spool.batches of every process: batches the '
        "OTLP endpoint did not take wait on local disk and are re-sent once it answers again.</small></p>"
    )


def _timelines_section(report: Report, colors: dict[str, str]) -> str:
    """Every step timeline in the page, the slowest step's shown; the others behind the picker."""
    parts = ['<section id="timeline"><h2>Step timeline</h2>']
    if report.timelines:
        steps = {r.step: r for r in report.steps}
        options = "".join(
            f'<option value="{esc(n)}"{" selected" if n == report.default_step else ""}>step {esc(n)} '
            f"({duration(steps[n].span.seconds)}){' slowest' if n == report.default_step else ''}</option>"
            for n in sorted(report.timelines)
        )
        default = report.default_step if report.default_step in report.timelines else max(report.timelines)
        parts.append(
            '<p>Step <select id="step-pick">' + options + "</select> <small>opens on the slowest step. Bars: stages, "
            "<code>verl.wg.*</code> driver calls, <code>verl.worker.*</code> in each rank, trajectories (dark "
            "inner bars: LLM calls; dashed outline: a trace of its own joined by "
            f"<code>{semconv.ATTR_ROLLOUT_SUBMIT_STEP}</code>). Slowest trajectory in red, chosen among "
            f"{esc(report.slowest_rule)}.</small></p>"
        )
        for n in sorted(report.timelines):
            parts.append(
                _timeline_section(report.timelines[n], colors, n == default, steps[n].span.seconds, report.slowest_rule)
            )
    else:
        parts.append('<p class="empty">No step traces.</p>')
    parts.append("</section>")
    return "\n".join(parts)


def _explore_section(report: Report) -> list[str]:
    """The "any metric" picker and the data it charts (drawn by report.js)."""
    first = series_label(semconv.M_REWARD, {semconv.ATTR_REWARD_SOURCE: "score"})
    options = "".join(
        f'<option value="{esc(n)}"{" selected" if n == first else ""}>{esc(n)}</option>' for n in report.gauges
    )
    # keys as the options show them: esc(n) is printable(n), HTML-escaped, and the browser unescapes it
    gauge_json = script_json({printable(k): {str(s): v for s, v in thin(d).items()} for k, d in report.gauges.items()})
    thin_note = f"; {THINNED}" if any(thinned(d) for d in report.gauges.values()) else ""
    picker = (
        f'<p><select id="metric-pick">{options}</select> <small>every gauge exported at step boundaries '
        f"({len(report.gauges)} series{thin_note})</small></p>"
        if report.gauges
        else '<p class="empty">No per-step gauges.</p>'
    )
    return [
        f'<section id="explore"><h2>Any metric</h2>{picker}<div id="metric-chart"></div></section>',
        f'<script type="application/json" id="gauge-data">{gauge_json}</script>',
    ]


def _picked(report: Report) -> str:
    """Which steps the tables show, when a long run's are not all there (``bounded.pick_steps``)."""
    picked = report.totals.picked(len(report.steps))
    if picked is None:
        return ""
    return (
        f'<p class="picked">The tables show {esc(picked)}; the chart draws the slowest step of each run of '
        f"{report.totals.columns.width} steps. The health box, the step count, the curves and the telemetry "
        "cost count every step.</p>"
    )


def _engine_split(report: Report) -> str:
    """Each step's slowest trajectory split by the engine's own request spans (vLLM's ``llm_request``)."""
    split = [(r.step, e) for r in report.steps if (e := SPLIT.of(r)) is not None]
    if not split:
        return ""
    items = "".join(f'<li data-step="{esc(n)}">step {esc(n)}: {esc(e.line())}</li>' for n, e in split)
    return (
        '<div id="engine-split"><p>The slowest trajectory of each step, in the rollout engine (queue / prefill / '
        f"decode from its <code>llm_request</code> spans under the trajectory's LLM calls):</p><ul>{items}</ul></div>"
    )


def _stage_table(report: Report) -> str:
    head = "".join(f'<th data-stage="{esc(s)}">{esc(s)}</th>' for s in report.stage_order)
    out = [
        '<table id="stage-table" class="num"><thead><tr><th>step</th>'
        f"<th>step span</th>{head}<th>{OTHER}</th><th>trajectories</th><th>slowest trajectory</th></tr></thead><tbody>"
    ]
    for r in report.steps:
        cells = "".join(
            f'<td data-stage="{esc(s)}" data-seconds="{r.stages[s]!r}">{r.stages[s]:.3f}</td>'
            if s in r.stages
            else f'<td data-stage="{esc(s)}"></td>'
            for s in report.stage_order
        )
        slow = (
            f'<td class="slowest-cell" data-span-id="{esc(r.slowest.span_id)}" data-seconds="{r.slowest.seconds!r}">'
            f"{r.slowest.seconds:.3f}</td>"
            if r.slowest
            else "<td></td>"
        )
        cls = ' class="error"' if ERROR.of(r) else ""
        out.append(
            f'<tr data-step="{esc(r.step)}"{cls}><th>{esc(r.step)}</th>'
            f'<td class="step-total" data-seconds="{r.span.seconds!r}">{r.span.seconds:.3f}</td>{cells}'
            f'<td data-stage="{OTHER}" data-seconds="{r.other!r}">{r.other:.3f}</td>'
            f"<td>{r.trajectories}</td>{slow}</tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _kept_tree(s: SpanRecord, tree: list[SpanRecord]) -> str:
    """What the slowest trajectory's kept tree holds (drawn below it in the timeline)."""
    because = s.attributes.get(semconv.ATTR_ROLLOUT_KEPT_BECAUSE)
    names: dict[str, int] = {}
    for t in tree:
        names[t.name] = names.get(t.name, 0) + 1
    held = ", ".join(f"{n} <code>{esc(name)}</code>" for name, n in sorted(names.items())) or "no child spans"
    why = f", kept because <code>{esc(because)}</code>" if isinstance(because, str) else ""
    return f' <small class="kept-tree">Its tree: {held}{why}.</small>'


def _timeline_section(tl: Timeline, colors: dict[str, str], shown: bool, step_seconds: float, rule: str) -> str:
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
            f'<p class="slowest-note" data-span-id="{esc(s.span_id)}" data-seconds="{s.seconds!r}">'
            f"{swatch(SLOWEST_COLOR)} Slowest trajectory "
            f'<small class="rule">({esc(rule)})</small>: '
            f'<code class="span-id">{esc(s.span_id)}</code> <b class="seconds">{duration(s.seconds)}</b> '
            f"({esc(', '.join(b for b in bits if b))}; trace <code>{esc(s.trace_id)}</code>)"
            f"{_kept_tree(s, tl.tree)}</p>"
        )
    else:
        slow = '<p class="slowest-note none">No trajectory spans in this step.</p>'
    capped = ""
    if tl.trajectories > MAX_TRAJECTORY_ROWS:
        capped = f" Showing the {MAX_TRAJECTORY_ROWS} slowest of {tl.trajectories} trajectories."
    return (
        f'<section class="timeline{" shown" if shown else ""}" data-step="{esc(tl.step)}">'
        f"<h3>Step {esc(tl.step)} <small>{duration(step_seconds)}, {len(tl.rows)} rows.{capped}</small></h3>"
        f"{slow}{timeline_svg(tl, colors)}</section>"
    )


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _stall_section(report: Report) -> str:
    """The stall doctor's stacks, one folded block per process (nothing when the run never stalled)."""
    if not report.stall_reports and not report.stalled:
        return ""
    first = report.stalled[0].attributes.get(semconv.ATTR_STEP) if report.stalled else None
    step = report.stall_reports[0].step if report.stall_reports else first
    blocks = "".join(
        f"<details><summary>{esc(r.process)}: {esc(r.where()[0] if r.where() else '')}</summary>"
        f"<pre class='stacks'>{esc(r.stacks, STACK_CHARS, newlines=True)}</pre></details>"
        for r in report.stall_reports
    )
    return (
        f'<section id="stall"><h2>Stalled at step {esc(step)}</h2><p>No training step finished within '
        "OTEL_VERL_STALL_AFTER; every verl process reported where each of its threads was "
        f"(the latest report of each of {len(report.stall_reports)} processes):</p>{blocks}</section>"
    )


def _rollout_section(report: Report) -> str:
    out = ['<section id="rollout"><h2>Rollout latency</h2>']
    s = report.slowest
    if s is not None:
        submit = s.attributes.get(semconv.ATTR_ROLLOUT_SUBMIT_STEP)
        out.append(
            f'<p class="run-slowest" data-span-id="{esc(s.span_id)}" data-seconds="{s.seconds!r}">Slowest '
            f"trajectory of the run: <b>{duration(s.seconds)}</b> <code>{esc(s.span_id)}</code>"
            + (f", submitted at step {esc(submit)}" if submit is not None else "")
            + f' <small class="rule">(chosen among {esc(report.slowest_rule)}; <code>otel-verl summary</code> names '
            "the same one)</small></p>"
        )
    out.append('<div class="row">')
    values = report.trajectory_seconds
    every = report.trajectories
    if values:
        hi = max(values) if every.largest is None else every.largest
        ticks = nice_ticks(0.0, hi, max(5, min(30, math.ceil(math.sqrt(len(values))))))
        width = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
        n_bins = max(1, math.floor(hi / width) + 1)
        edges = [round(i * width, 12) for i in range(n_bins + 1)]
        counts = [0] * n_bins
        for v in values:
            counts[min(int(v / width), n_bins - 1)] += 1
        p50, p90, p99 = (_quantile(values, q) for q in (0.5, 0.9, 0.99))
        count = max(every.count, len(values))
        mean = every.total / every.count if every.count else statistics.fmean(values)
        sampled = f" (percentiles and bars: a uniform sample of {len(values):,})" if every.sampled else ""
        stats = (
            f'<p class="stats" data-count="{count}" data-max="{hi!r}">{count} training trajectory spans{sampled}; '
            f"p50 {duration(p50)}, p90 {duration(p90)}, p99 {duration(p99)}, max <b>{duration(hi)}</b>, mean "
            f"{duration(mean)}"
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
            + histogram_svg(edges, counts, "s", {"p50": p50, "p90": p90}, "spans-hist")
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
            f"trajectories counted (every one, sampled or not); mean {duration(mean)}</p>"
            + histogram_svg(
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


def _curves_section(report: Report) -> str:
    out = ['<section id="curves"><h2>Training curves</h2>']
    if not any(data for _, _, lines in report.curves for _, data in lines):
        out.append('<p class="empty">No per-step metric points (or no <code>verl.training.step</code> gauge).</p>')
        return "".join(out) + "</section>"
    out.append('<div class="grid">')
    for title, unit, all_lines in report.curves:
        lines = [(label, data) for label, data in all_lines if data]
        missing = [label for label, data in all_lines if not data]
        absent = f'<p class="not-logged">{esc(", ".join(missing))}: not logged by this run</p>' if missing else ""
        if not lines:
            out.append(f'<div class="panel not-logged" data-title="{esc(title)}"><h3>{esc(title)}</h3>{absent}</div>')
            continue
        keys = "".join(_curve_key(k, lines) for k in range(len(lines)))
        out.append(
            f'<div class="panel"><h3>{esc(title)}</h3><div class="legend">{keys}</div>'
            f"{line_svg(title, unit, lines)}{absent}</div>"
        )
    out.append("</div>")
    columns = [(label, data) for _, _, lines in report.curves for label, data in lines if data]
    if any(thinned(data) for _, data in columns):
        out.append(
            f'<p class="thinned">{THINNED[0].upper()}{THINNED[1:]}; the table has the values held: those of the '
            "steps in the tables above, the first and last steps, and each run's lowest and highest.</p>"
        )
    steps = sorted({s for _, d in columns for s in d})
    head = "".join(f'<th data-key="{esc(label)}">{esc(label)}</th>' for label, _ in columns)
    table = [f'<table id="curve-table" class="num"><thead><tr><th>step</th>{head}</tr></thead><tbody>']
    for s in steps:
        cells = "".join(
            f'<td data-key="{esc(label)}" data-value="{d[s]!r}">{number(d[s])}</td>' if s in d else "<td></td>"
            for label, d in columns
        )
        table.append(f'<tr data-step="{esc(s)}"><th>{esc(s)}</th>{cells}</tr>')
    table.append("</tbody></table>")
    out.append(_folded("".join(table), len(steps), "values per step"))
    out.append("</section>")
    return "".join(out)


def _curve_key(k: int, lines: list[tuple[str, dict[int, float]]]) -> str:
    """The legend entry of line ``k``, drawn as ``line_style`` draws it, saying when it repeats an earlier line."""
    label, data = lines[k]
    style = line_style(k, len(lines))
    same = next((other for other, values in lines[:k] if values == data), None)
    note = f' <small class="same">(same values as {esc(same)})</small>' if same else ""
    if not note and data and all(v == 0 for v in data.values()):
        note = ' <small class="flat">(0 at every step)</small>'  # a flat line that is the value, not a gap
    key = swatch(style.color, dashed=bool(style.dash))
    return f'<span class="key" data-label="{esc(label)}">{key}{esc(label)}{note}</span>'


def _folded(table: str, rows: int, what: str) -> str:
    """A table inside <details>, open unless it is long (it stays in the DOM either way)."""
    state = " open" if rows <= FOLD_ROWS else ""
    return f"<details{state}><summary>{what} ({rows} rows)</summary>{table}</details>"
