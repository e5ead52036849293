"""``otel-verl report`` on small synthetic OTLP JSON files (hermetic, fast)."""

from __future__ import annotations

import io
import itertools
import json
import re
from pathlib import Path

import pytest

from otel_verl import cli, semconv
from otel_verl.files import MetricPoint, read_metric_points
from otel_verl.report import (
    MAX_TRAJECTORY_ROWS,
    NoTelemetry,
    build,
    nice_ticks,
    render,
    step_gauges,
    trajectory_histogram,
    write_report,
)

T0 = 1_800_000_000 * 10**9
_ids = itertools.count(1)


def _value(v):
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": str(v)}


def _attrs(d):
    return [{"key": k, "value": _value(v)} for k, v in d.items()]


def span(name, trace, start, end, parent=None, status=None, **attrs):
    """One OTLP JSON span; start/end in seconds after T0; returns (span id, dict)."""
    sid = f"{next(_ids):016x}"
    out = {
        "traceId": trace * 2,
        "spanId": sid,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(T0 + int(start * 1e9)),
        "endTimeUnixNano": str(T0 + int(end * 1e9)),
        "attributes": _attrs({k.replace("__", "."): v for k, v in attrs.items()}),
        "status": {"code": status} if status else {},
    }
    if parent:
        out["parentSpanId"] = parent
    return sid, out


def write_spans(folder: Path, role: str, pid: int, spans: list[dict]) -> None:
    resource = {"service.name": "verl", semconv.RES_ROLE: role, "process.pid": pid, semconv.RES_RUN_ID: "run-1"}
    line = {"resourceSpans": [{"resource": {"attributes": _attrs(resource)}, "scopeSpans": [{"spans": spans}]}]}
    with open(folder / f"traces-{role}-{pid}.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def write_metrics(folder: Path, role: str, pid: int, time_s: float, metrics: list[dict]) -> None:
    resource = {"service.name": "verl", semconv.RES_ROLE: role, "process.pid": pid, "service.instance.id": f"i-{pid}"}
    for m in metrics:
        for kind in ("gauge", "histogram"):
            for p in m.get(kind, {}).get("dataPoints", []):
                p.setdefault("timeUnixNano", str(T0 + int(time_s * 1e9)))
    line = {"resourceMetrics": [{"resource": {"attributes": _attrs(resource)}, "scopeMetrics": [{"metrics": metrics}]}]}
    with open(folder / f"metrics-{role}-{pid}.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def gauge(name, value, **attrs):
    return {"name": name, "gauge": {"dataPoints": [{"asDouble": value, "attributes": _attrs(attrs)}]}}


def traj_hist(counts, total, start_s=0.0, validate=False, temporality=2):
    bounds = [0.1, 0.5, 1.0]
    return {
        "name": semconv.M_ROLLOUT_TRAJECTORY_DURATION,
        "histogram": {
            "aggregationTemporality": temporality,
            "dataPoints": [
                {
                    "startTimeUnixNano": str(T0 + int(start_s * 1e9)),
                    "count": str(sum(counts)),
                    "sum": total,
                    "bucketCounts": [str(c) for c in counts],
                    "explicitBounds": bounds,
                    "attributes": _attrs({semconv.ATTR_ROLLOUT_VALIDATE: validate}),
                }
            ],
        },
    }


@pytest.fixture
def v1_run(tmp_path: Path) -> Path:
    """Two v1-style steps: stage spans in the step trace, trajectories in traces of their own."""
    folder = tmp_path / "telemetry"
    folder.mkdir()
    tr, workers, rollouts = [], [], []
    layout = {1: (0.0, {"gen": 1.0, "old_log_prob": 0.25, "update_actor": 0.5}), 2: (10.0, {"gen": 2.0, "adv": 0.1})}
    slowest = {}
    for step, (t, stages) in layout.items():
        trace = f"{step:016x}"
        sid, root = span(
            semconv.SPAN_STEP, trace, t, t + sum(stages.values()) + 0.2, verl__step=step, verl__driver="v1"
        )
        tr.append(root)
        cursor = t + 0.1
        for stage, seconds in stages.items():
            stage_id, s = span(
                f"verl.{stage}", trace, cursor, cursor + seconds, sid, verl__stage=stage, verl__step=step
            )
            tr.append(s)
            if stage != "gen":
                wg_id, wg = span(f"verl.wg.actor_rollout_{stage}", trace, cursor, cursor + seconds * 0.9, stage_id)
                tr.append(wg)
                _, w = span(f"verl.worker.{stage}", trace, cursor + 0.01, cursor + seconds * 0.8, wg_id, verl__rank=0)
                workers.append(w)
            cursor += seconds
        for i, dur in enumerate((0.2, 0.7 * step, 0.4)):
            rtrace = f"{step:08x}{i:08x}"
            attrs = {"verl__rollout__submit_step": step, "verl__rollout__sample_index": i, "verl__rollout__index": 0}
            tid, traj = span(semconv.SPAN_ROLLOUT_TRAJECTORY, rtrace, t + 0.1, t + 0.1 + dur, **attrs)
            _, llm = span(semconv.SPAN_ROLLOUT_LLM_CALL, rtrace, t + 0.12, t + 0.05 + dur, tid)
            rollouts += [traj, llm]
            if i == 1:
                slowest[step] = (tid, dur)
        # a longer validation trajectory of the same step is not the step's slowest training one
        _, val = span(
            semconv.SPAN_ROLLOUT_TRAJECTORY,
            f"{step:08x}{99:08x}",
            t,
            t + 5,
            verl__rollout__submit_step=step,
            verl__rollout__validate=True,
        )
        rollouts.append(val)
    write_spans(folder, "taskrunner", 10, tr)
    write_spans(folder, "worker0", 11, workers)
    write_spans(folder, "agent_loop_worker", 12, rollouts)
    for step, reward in ((1, 0.25), (2, 0.75)):
        write_metrics(
            folder,
            "taskrunner",
            10,
            step * 10.0 + 5,
            [
                gauge(semconv.M_TRAINING_STEP, step),
                gauge(semconv.M_REWARD, reward, **{semconv.ATTR_REWARD_SOURCE: "score"}),
                gauge(semconv.M_KL, reward / 10, **{semconv.ATTR_KL_SOURCE: "kl_loss"}),
                gauge(semconv.M_THROUGHPUT, 100.0 * step),
                gauge("verl.actor.entropy", 5.0 - step),
            ],
        )
    write_metrics(folder, "agent_loop_worker", 12, 5.0, [traj_hist([1, 1, 0, 0], 0.7)])
    write_metrics(folder, "agent_loop_worker", 12, 15.0, [traj_hist([2, 3, 1, 0], 2.9)])  # cumulative: latest wins
    (folder / "expected.json").write_text(json.dumps({str(k): v for k, v in slowest.items()}))
    return folder


def test_build_reads_steps_stages_timelines_and_curves(v1_run):
    rep = build(v1_run)
    slowest = {int(k): v for k, v in json.loads((v1_run / "expected.json").read_text()).items()}
    assert [r.step for r in rep.steps] == [1, 2]
    one, two = rep.steps
    assert one.stages == pytest.approx({"gen": 1.0, "old_log_prob": 0.25, "update_actor": 0.5})
    assert two.stages == pytest.approx({"gen": 2.0, "adv": 0.1})
    assert one.other == pytest.approx(0.2) and two.span.seconds == pytest.approx(2.3)
    assert rep.stage_order == ["gen", "old_log_prob", "update_actor", "adv"]
    assert rep.default_step == 2  # the slowest
    for n in (1, 2):
        assert rep.steps[n - 1].slowest.span_id == slowest[n][0]
        tl = rep.timelines[n]
        names = [r.span.name for r in tl.rows]
        assert names[0] == semconv.SPAN_STEP and semconv.SPAN_ROLLOUT_LLM_CALL not in names  # drawn inside
        trajs = [r for r in tl.rows if r.kind == "traj"]
        assert len(trajs) == 4 and all(r.linked for r in trajs) and sum(len(r.segments) for r in trajs) == 3
        gen = next(i for i, r in enumerate(tl.rows) if r.span.name == "verl.gen")
        assert all(r.depth == tl.rows[gen].depth + 1 for r in trajs)  # hung under the gen stage
        assert [r.span.span_id for r in tl.rows if r.slowest] == [slowest[n][0]]
        worker = next(r for r in tl.rows if r.kind == "worker") if n == 1 else None
        if worker:
            assert worker.depth == 3  # step > stage > wg > worker
    assert sorted(rep.trajectory_seconds) == pytest.approx(sorted([0.2, 0.7, 0.4, 0.2, 1.4, 0.4]))
    assert rep.validation_trajectories == 2
    assert rep.trajectory_metric.count == 6 and rep.trajectory_metric.counts == [2, 3, 1, 0]
    curves = {title: dict(lines) for title, _, lines in rep.curves}
    assert curves["Reward"]["critic/score/mean"] == {1: 0.25, 2: 0.75}
    assert curves["KL"]["actor/kl_loss"] == pytest.approx({1: 0.025, 2: 0.075})
    assert curves["Throughput"][semconv.THROUGHPUT_KEY] == {1: 100.0, 2: 200.0}
    assert curves["Entropy"]["actor/entropy"] == {1: 4.0, 2: 3.0}
    assert rep.meta["run id"] == "run-1" and rep.meta["driver"] == "v1"


def test_rendered_page_is_self_contained_and_shows_the_values(v1_run):
    rep = build(v1_run)
    page = render(rep)
    # nothing fetched from anywhere: no src/href to other documents, no CSS imports or urls
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", page)
    assert "@import" not in page and "url(" not in page and "<link" not in page
    assert re.findall(r"https?://[^\s\"'<]+", page) == ["http://www.w3.org/2000/svg"]  # the SVG namespace in JS
    assert page.count('<tr data-step="') == 2 + 2  # stage table + curve table
    assert 'data-stage="gen" data-seconds="1.0"' in page and ">1.000<" in page
    assert '<section class="timeline shown" data-step="2">' in page
    assert '<section class="timeline" data-step="1">' in page
    sid = rep.steps[1].slowest.span_id
    assert f'class="row kind-traj slowest linked" data-span-id="{sid}"' in page
    assert f'<code class="span-id">{sid}</code> <b class="seconds">1.400 s</b>' in page
    assert 'data-step="2" data-value="0.75"' in page
    json_blob = re.search(r'<script type="application/json" id="gauge-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(json_blob)["verl.training.reward{verl.reward.source=score}"] == {"1": 0.25, "2": 0.75}


def test_names_from_the_files_are_escaped(tmp_path):
    _, root = span(semconv.SPAN_STEP, "a" * 16, 0, 1, verl__step=1)
    _, stage = span("verl.<img>", "a" * 16, 0, 0.5, root["spanId"], verl__stage="<script>alert(1)</script>")
    write_spans(tmp_path, "taskrunner", 1, [root, stage])
    write_metrics(tmp_path, "taskrunner", 1, 2, [gauge(semconv.M_TRAINING_STEP, 1), gauge("verl.x</script>", 1.0)])
    page = render(build(tmp_path))
    assert "<script>alert" not in page and "<img>" not in page and '</script>"' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("</script>") == 2  # the JSON blob and the code, nothing from the data


def test_trajectory_rows_are_capped_to_the_slowest(tmp_path):
    sid, root = span(semconv.SPAN_STEP, "b" * 16, 0, 10, verl__step=1)
    gen_id, gen = span("verl.gen", "b" * 16, 0, 9, sid, verl__stage="gen")
    trajs = [
        span(semconv.SPAN_ROLLOUT_TRAJECTORY, "b" * 16, 0.1, 0.1 + 0.01 * i, gen_id)[1]
        for i in range(MAX_TRAJECTORY_ROWS + 12)
    ]
    write_spans(tmp_path, "taskrunner", 1, [root, gen, *trajs])
    rep = build(tmp_path)
    tl = rep.timelines[1]
    rows = [r for r in tl.rows if r.kind == "traj"]
    assert len(rows) == MAX_TRAJECTORY_ROWS and tl.trajectories == MAX_TRAJECTORY_ROWS + 12
    assert min(r.span.seconds for r in rows) == pytest.approx(0.01 * 12, abs=1e-6)  # the 12 fastest dropped
    assert [r.span.span_id for r in rows if r.slowest] == [trajs[-1]["spanId"]]
    assert not any(r.linked for r in rows)  # v0: inside the step's trace
    assert f"Showing the {MAX_TRAJECTORY_ROWS} slowest of {MAX_TRAJECTORY_ROWS + 12} trajectories" in render(rep)


def test_step_gauges_and_histograms_from_points():
    def point(name, value, t, pid=1, kind="gauge", **attrs):
        return MetricPoint(name, kind, value, None, attrs, {"service.instance.id": f"i{pid}"}, t)

    points = [
        point(semconv.M_TRAINING_STEP, 1.0, 100),
        point("verl.a", 0.5, 100),
        point("verl.a", 9.0, 50),  # an export without verl.training.step (validation before training)
        point(semconv.M_TRAINING_STEP, 2.0, 200),
        point("verl.a", 0.7, 200),
        point("verl.a", 3.0, 200, pid=2),  # another process's export at the same time: no step there
    ]
    assert step_gauges(points) == {("verl.a", ()): {1: 0.5, 2: 0.7}}

    def hist(counts, t, pid, start=0, temporality=2, validate=False):
        return MetricPoint(
            semconv.M_ROLLOUT_TRAJECTORY_DURATION,
            "histogram",
            float(sum(counts)),
            sum(counts),
            {semconv.ATTR_ROLLOUT_VALIDATE: validate},
            {"service.instance.id": f"i{pid}"},
            t,
            [1.0, 2.0],
            counts,
            start,
            temporality,
        )

    cumulative = [
        hist([1, 0, 0], 1, 1),
        hist([2, 1, 0], 2, 1),
        hist([0, 0, 4], 2, 2),
        hist([9, 9, 9], 2, 3, validate=True),
    ]
    h = trajectory_histogram(cumulative)
    assert h.counts == [2, 1, 4] and h.count == 7
    delta = [hist([1, 0, 0], 1, 1, temporality=1), hist([0, 2, 0], 2, 1, temporality=1)]
    assert trajectory_histogram(delta).counts == [1, 2, 0]
    assert trajectory_histogram([]) is None


def test_empty_partial_and_broken_folders(tmp_path):
    with pytest.raises(NoTelemetry, match="no telemetry files"):
        write_report(tmp_path)
    with pytest.raises(NoTelemetry, match="not a folder"):
        write_report(tmp_path / "missing")
    (tmp_path / "metrics-worker0-1.jsonl").write_text("")
    with pytest.raises(NoTelemetry, match="no spans and no metric points"):
        write_report(tmp_path)
    # metrics only, plus the half-written last line of a killed process
    reward = gauge(semconv.M_REWARD, 0.5, **{semconv.ATTR_REWARD_SOURCE: "score"})
    write_metrics(tmp_path, "taskrunner", 1, 1, [gauge(semconv.M_TRAINING_STEP, 1), reward])
    with open(tmp_path / "metrics-taskrunner-1.jsonl", "a") as f:
        f.write('{"resourceMetrics": [{"reso')
    path, rep = write_report(tmp_path, tmp_path / "out" / "r.html")
    assert path.exists() and rep.steps == [] and len(read_metric_points(tmp_path)) == 2
    assert any("no spans" in n for n in rep.notes) and any("1 line(s)" in n for n in rep.notes)
    page = path.read_text()
    assert "No <code>verl.step</code> spans." in page and 'data-value="0.5"' in page


def test_cli_report(v1_run, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert cli.main(["report", str(v1_run), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out}: 2 steps" in text and "step 2, the slowest" in text
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert cli.main(["report", str(v1_run)]) == 0 and (v1_run / "report.html").exists()  # default place
    buf = io.StringIO()
    assert cli.report(tmp_path / "nothing", out=buf) == 1 and "not a folder" in buf.getvalue()
    buf = io.StringIO()
    assert cli.report(v1_run, v1_run / "missing-dir-file" / "x.html", out=buf) == 0  # parents are made
    (tmp_path / "blocker").write_text("")
    assert cli.report(v1_run, tmp_path / "blocker" / "x.html", out=buf) == 1
    assert "cannot write the report" in buf.getvalue()


def test_nice_ticks():
    assert nice_ticks(0, 2.865) == [0, 1, 2, 3]
    assert nice_ticks(0, 10, 5) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(-0.3, 0.3, 4) == pytest.approx([-0.4, -0.2, 0, 0.2, 0.4])
    assert nice_ticks(1, 1) == [1]
