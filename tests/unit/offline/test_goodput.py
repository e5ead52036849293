"""``otel_verl.offline.facts.goodput``: each role's time over a run as productive / overhead / idle /
wasted, from the TaskRunner's ``verl.goodput.time`` counter placed at the steps its exports name,
the run's time outside its steps as overhead; summary's health line and the report's first screen."""

from __future__ import annotations

import io
import re
from pathlib import Path

from support.otlp_json import T0, _attrs, gauge, span, traj_hist, write_metrics, write_spans

from otel_verl import semconv
from otel_verl.offline.exports import GroupPoint
from otel_verl.offline.facts.goodput import GoodputFold
from otel_verl.offline.report import build, render
from otel_verl.offline.summary import summary

ROLE, BUCKET = semconv.ATTR_GOODPUT_ROLE, semconv.ATTR_GOODPUT_BUCKET
# per step: (role, bucket) -> seconds; each role's four add up to the step's 10 s
STEPS = {
    1: {
        ("trainer", "productive"): 2.0,
        ("trainer", "overhead"): 1.0,
        ("trainer", "idle"): 7.0,
        ("rollout", "productive"): 4.0,
        ("rollout", "wasted"): 2.0,
        ("rollout", "overhead"): 1.0,
        ("rollout", "idle"): 3.0,
    },
    2: {
        ("trainer", "productive"): 4.0,
        ("trainer", "overhead"): 2.0,
        ("trainer", "idle"): 4.0,
        ("rollout", "productive"): 6.0,
        ("rollout", "overhead"): 2.0,
        ("rollout", "idle"): 2.0,
    },
}
DROPPED = {1: 4, 2: 0}


def _sum(name: str, value: float, time_s: float, temporality: int = 2, **attrs) -> dict:
    point = {"asDouble": value, "timeUnixNano": str(T0 + int(time_s * 1e9)), "attributes": _attrs(attrs)}
    return {"name": name, "sum": {"aggregationTemporality": temporality, "isMonotonic": True, "dataPoints": [point]}}


def _run(folder: Path, failed: int = 3) -> None:
    """A run whose spans cover 50 s: start-up from 0 s, steps 1 and 2 at 10-20 s and 20-30 s, the
    TaskRunner's export of each step's values just after it (the goodput counter cumulative), a
    last span ending at 50 s; an agent-loop worker's trajectories, ``failed`` of them failed."""
    spans = [span(semconv.SPAN_INIT, "0" * 16, 0.0, 1.0)[1], span("verl.validation", "f" * 16, 40.0, 50.0)[1]]
    spans += [span(semconv.SPAN_STEP, f"{n:016x}", 10.0 * n, 10.0 * n + 10, verl__step=n)[1] for n in STEPS]
    write_spans(folder, "taskrunner", 10, spans)
    totals: dict[tuple[str, str], float] = {}
    dropped = 0.0
    for n, account in STEPS.items():
        dropped += DROPPED[n]
        metrics = [gauge(semconv.M_TRAINING_STEP, float(n))]
        for role in ("trainer", "rollout"):
            for bucket in ("productive", "overhead", "idle", "wasted"):
                totals[(role, bucket)] = totals.get((role, bucket), 0.0) + account.get((role, bucket), 0.0)
                attrs = {ROLE: role, BUCKET: bucket}
                metrics.append(_sum(semconv.M_GOODPUT_TIME, totals[(role, bucket)], 10.0 * n + 10.5, **attrs))
        metrics.append(_sum(semconv.M_GOODPUT_DROPPED_GROUPS, dropped, 10.0 * n + 10.5))
        for m in metrics[:1]:
            m["gauge"]["dataPoints"][0]["timeUnixNano"] = str(T0 + int((10.0 * n + 10.5) * 1e9))
        write_metrics(folder, "taskrunner", 10, 10.0 * n + 10.5, metrics)
    ok, bad = traj_hist([0, 8, 0, 0], 4.0), traj_hist([0, failed, 0, 0], 1.5)
    ok["histogram"]["dataPoints"][0]["attributes"] += _attrs({semconv.ATTR_ROLLOUT_STATUS: "ok"})
    bad["histogram"]["dataPoints"][0]["attributes"] += _attrs({semconv.ATTR_ROLLOUT_STATUS: "error"})
    write_metrics(folder, "agent_loop_worker", 20, 31.0, [ok] + ([bad] if failed else []))


def _summary(folder: Path) -> list[str]:
    out = io.StringIO()
    assert summary(folder, out=out, err=io.StringIO()) == 0
    return out.getvalue().splitlines()


LINE = (
    "  [info]  goodput: of the run's 50.0 s (20.0 s in 2 steps, the 30.0 s outside them counted overhead): "
    "trainer productive 12%, overhead 66%, idle 22%, wasted 0%; rollout productive 20%, overhead 66%, idle 10%, "
    "wasted 4%; in the steps alone: trainer productive 30%, overhead 15%, idle 55%, wasted 0%; rollout productive "
    "50%, overhead 15%, idle 25%, wasted 10%; 4 prompt groups dropped by verl; 3 trajectories failed in the agent "
    "loop (1.50 s), not trained on "
    "and not in wasted (report: #goodput)"
)


def test_summary_says_each_role_s_shares_of_the_run(tmp_path):
    _run(tmp_path)
    lines = _summary(tmp_path)
    assert LINE in lines
    # in the health box, before the slowest step
    box = lines[: next(i for i, x in enumerate(lines) if not x.startswith(("  [", "health:", "verl run")))]
    assert LINE in box and box.index(LINE) < next(i for i, x in enumerate(box) if "slowest step" in x)


def test_each_step_s_figures_are_the_counter_s_growth_in_its_export(tmp_path):
    _run(tmp_path, failed=0)
    account = build(tmp_path).health.goodput
    assert account.per_step == {n: {k: v for k, v in a.items() if v} for n, a in STEPS.items()}
    run = account.run_s()
    for role in ("trainer", "rollout"):
        assert sum(run[(role, b)] for b in ("productive", "overhead", "idle", "wasted")) == 50.0
    assert account.steps == 2 and account.dropped_groups == 4 and account.failed == 0
    assert "failed" not in account.line()


def test_the_report_s_first_screen_has_the_shares_and_each_step(tmp_path):
    _run(tmp_path)
    page = render(build(tmp_path))
    assert page.index('<section id="goodput">') < page.index('<dl class="meta">')  # right after the health box
    assert '<a href="#goodput">Goodput</a>' in page and 'href="#goodput">details</a>' in page
    table = page[page.index('id="goodput-table"') : page.index("</table>", page.index('id="goodput-table"'))]
    row = re.search(r'<tr data-role="rollout" data-over="run">.*?</tr>', table).group(0)
    assert '<td data-bucket="wasted" data-seconds="2.0">2.00 <small>4%</small></td>' in row
    assert '<td data-bucket="overhead" data-seconds="33.0">33.00 <small>66%</small></td>' in row
    steps = re.search(r'<tr data-role="trainer" data-over="steps">.*?</tr>', table).group(0)
    assert '<td data-bucket="idle" data-seconds="11.0">11.00 <small>55%</small></td>' in steps
    assert '<tr data-step="2" data-role="rollout"><th>2</th><td>rollout</td><td data-bucket="productive"' in page


def test_a_run_without_the_counter_says_so(tmp_path):
    write_spans(tmp_path, "taskrunner", 10, [span(semconv.SPAN_STEP, "1" * 16, 0.0, 5.0, verl__step=1)[1]])
    write_metrics(tmp_path, "taskrunner", 10, 5.5, [gauge(semconv.M_TRAINING_STEP, 1.0)])
    (line,) = [x for x in _summary(tmp_path) if "goodput:" in x]
    assert line == "  [info]  goodput: not measured by this run (no verl.goodput.time)"
    assert '<section id="goodput">' not in render(build(tmp_path))


def _point(value: float, temporality: int = 2, role: str = "trainer", bucket: str = "idle") -> GroupPoint:
    attrs = tuple(sorted(((ROLE, role), (BUCKET, bucket))))
    return (semconv.M_GOODPUT_TIME, attrs, value, "sum", temporality)


def test_delta_points_a_restarted_process_and_hostile_values():
    fold = GoodputFold(keep={1, 2, 3})
    fold.export("a", 1, 1, [_point(2.0)])
    fold.export("a", 2, 2, [_point(5.0)])
    fold.export("a", 3, 3, [_point(1.0)])  # lower: the TaskRunner restarted (resumed run), counting from 0
    fold.export("b", 4, 3, [_point(0.5, temporality=1), _point(0.5, temporality=1)])  # deltas add up
    fold.export("b", 5, 3, [_point(float("nan")), _point(-1.0), _point(1.0, role="nobody"), _point(1.0, bucket="x")])
    account = fold.close(3)
    idle = ("trainer", "idle")
    assert account.per_step == {1: {idle: 2.0}, 2: {idle: 3.0}, 3: {idle: 2.0}}
    assert account.steps_s == {("trainer", "idle"): 7.0}
    assert GoodputFold().close(0) is None
