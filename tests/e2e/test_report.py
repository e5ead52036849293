"""``otel-verl report`` and ``otel-verl replay`` on real runs (the cached v0 and v1 GRPO runs).

The report is opened in headless Chromium: the checks read the DOM Chromium rendered (after its
JavaScript ran), and a screenshot of each report is kept under ``OTEL_VERL_TEST_ARTIFACTS``
(default ``.work/artifacts/`` in the repository).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.components import require_chromium
from verl_cpu_harness.otlp_receiver import OtlpReceiver

from otel_verl import semconv
from otel_verl.offline.otlp_files import count_items, iter_lines, signal_files

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
STEPS = 2
CLI = [sys.executable, "-m", "otel_verl.cli"]


def artifacts() -> Path:
    folder = Path(os.environ.get("OTEL_VERL_TEST_ARTIFACTS") or REPO / ".work" / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# ------------------------------------------------------------------ a small DOM of Chromium's dump

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node] = []
        self.text = ""

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        out = []
        for c in self.children:
            if (
                (tag is None or c.tag == tag)
                and (cls is None or cls in c.classes)
                and all(c.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
            ):
                out.append(c)
            out.extend(c.find_all(tag, cls, **attrs))
        return out

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}> in the rendered page"
        return found[0]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.cur))

    def handle_endtag(self, tag):
        node = self.cur
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.cur = node.parent

    def handle_data(self, data):
        self.cur.text += data


def parse(text: str) -> Node:
    b = _Builder()
    b.feed(text)
    return b.root


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [require_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


# ------------------------------------------------------------------ what the run says, from its spans


def expected(run):
    steps = {s.attributes[semconv.ATTR_STEP]: s for s in run.spans if s.name == semconv.SPAN_STEP}
    stages: dict[int, dict[str, float]] = defaultdict(dict)
    for s in run.spans:
        for n, st in steps.items():
            if s.parent_id == st.span_id and s.trace_id == st.trace_id and semconv.ATTR_STAGE in s.attributes:
                stage = s.attributes[semconv.ATTR_STAGE]
                stages[n][stage] = stages[n].get(stage, 0.0) + s.seconds
    trajectories: dict[int, list] = defaultdict(list)
    for s in run.spans:
        if s.name != semconv.SPAN_ROLLOUT_TRAJECTORY or s.attributes.get(semconv.ATTR_ROLLOUT_VALIDATE):
            continue
        for n, st in steps.items():
            # v0: inside the step's trace; v1: a trace of its own, submitted at step n
            if s.trace_id == st.trace_id or (
                run.driver == "v1" and s.attributes.get(semconv.ATTR_ROLLOUT_SUBMIT_STEP) == n
            ):
                trajectories[n].append(s)
    return steps, stages, trajectories


@pytest.fixture(scope="module", params=["v0", "v1"])
def rendered(request, verl_runs):
    require_chromium()
    run = verl_runs.get(request.param, "grpo", steps=STEPS)
    assert run.returncode == 0, run.output[-4000:]
    out = artifacts()
    page = out / f"report-{run.driver}-{run.algo}.html"
    cli = subprocess.run([*CLI, "report", str(run.telemetry_dir), "-o", str(page)], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert f"wrote {page}: {STEPS} steps" in cli.stdout
    dom = chromium("--virtual-time-budget=5000", "--dump-dom", page.as_uri())
    assert dom.returncode == 0 and "</html>" in dom.stdout, dom.stderr[-2000:]
    (out / f"report-{run.driver}-{run.algo}.dom.html").write_text(dom.stdout)
    png = out / f"report-{run.driver}-{run.algo}.png"
    png.unlink(missing_ok=True)
    shot = chromium("--virtual-time-budget=5000", f"--screenshot={png}", "--window-size=1400,2000", page.as_uri())
    assert shot.returncode == 0, shot.stderr[-2000:]
    return run, parse(dom.stdout), png


def test_stage_table_has_one_row_per_step_with_the_span_durations(rendered):
    run, dom, _ = rendered
    steps, stages, _ = expected(run)
    assert sorted(steps) == list(range(1, STEPS + 1))
    rows = dom.find("table", id="stage-table").find("tbody").find_all("tr")
    assert [int(r.attrs["data-step"]) for r in rows] == sorted(steps)
    for row in rows:
        n = int(row.attrs["data-step"])
        total = row.find("td", cls="step-total")
        assert float(total.attrs["data-seconds"]) == pytest.approx(steps[n].seconds, abs=1e-9)
        shown = {
            td.attrs["data-stage"]: td
            for td in row.find_all("td")
            if "data-stage" in td.attrs and "data-seconds" in td.attrs and td.attrs["data-stage"] != "other"
        }
        assert set(shown) == set(stages[n]) and {"gen", "old_log_prob", "adv", "update_actor"} <= set(shown)
        for stage, td in shown.items():
            seconds = float(td.attrs["data-seconds"])
            assert seconds == pytest.approx(stages[n][stage], abs=1e-9)
            assert td.all_text().strip() == f"{stages[n][stage]:.3f}"  # what the reader sees
            # and what verl itself measured for that stage
            assert seconds == pytest.approx(run.console[n][f"timing_s/{stage}"], abs=0.02, rel=0.02)
        # the stacked column of the step: one segment per stage (plus "other")
        segs = dom.find("svg", cls="stacked").find_all("rect", cls="seg", data_step=str(n))
        assert {s.attrs["data-stage"] for s in segs} - {"other"} == set(stages[n])


def test_timeline_shows_the_slowest_step_with_its_slowest_trajectory(rendered):
    run, dom, _ = rendered
    steps, _, trajectories = expected(run)
    slowest_step = max(steps, key=lambda n: steps[n].seconds)
    shown = [s for s in dom.find_all("section", cls="timeline") if "shown" in s.classes]
    assert [int(s.attrs["data-step"]) for s in shown] == [slowest_step]
    assert dom.find("select", id="step-pick").find("option", selected="").attrs["value"] == str(slowest_step)
    assert len(dom.find_all("section", cls="timeline")) == len(steps)

    for n in steps:
        section = dom.find("section", cls="timeline", data_step=str(n))
        rows = section.find_all("g", cls="row")
        names = [r.attrs["data-name"] for r in rows]
        assert names[0] == semconv.SPAN_STEP
        assert any(x.startswith(semconv.SPAN_WG_PREFIX) for x in names)
        assert any(x.startswith(semconv.SPAN_WORKER_PREFIX) for x in names)
        assert names.count(semconv.SPAN_ROLLOUT_TRAJECTORY) >= len(trajectories[n]) > 0
        slowest = max(trajectories[n], key=lambda s: s.seconds)
        marked = [r for r in rows if "slowest" in r.classes]
        assert len(marked) == 1
        assert marked[0].attrs["data-span-id"] == slowest.span_id
        assert float(marked[0].attrs["data-seconds"]) == pytest.approx(slowest.seconds, abs=1e-9)
        note = section.find("p", cls="slowest-note")
        assert note.find("code", cls="span-id").all_text() == slowest.span_id
        assert f"{slowest.seconds * 1000:.1f} ms" in note.all_text() or f"{slowest.seconds:.3f} s" in note.all_text()
        # the instrumentation's own long-tail event names the same trajectory
        events = [e for s in run.spans for e in s.event_attributes(semconv.EVENT_SLOWEST_TRAJECTORY)]
        ours = [
            e
            for e in events
            if int(e.get(semconv.ATTR_ROLLOUT_SUBMIT_STEP, -1)) == n and not e.get(semconv.ATTR_ROLLOUT_VALIDATE)
        ]
        if ours:
            top = max(ours, key=lambda e: float(e[semconv.ATTR_ROLLOUT_DURATION]))
            assert top[semconv.ATTR_ROLLOUT_SLOWEST_SPAN_ID] == slowest.span_id


def test_rollout_latency_distribution(rendered):
    run, dom, _ = rendered
    _, _, trajectories = expected(run)
    training = [s for ts in trajectories.values() for s in ts]
    section = dom.find("section", id="rollout")
    # the run's slowest trajectory, by the rule summary states too: training trajectories only
    slowest = max(
        (
            s
            for s in run.spans
            if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY and not s.attributes.get(semconv.ATTR_ROLLOUT_VALIDATE)
        ),
        key=lambda s: s.seconds,
    )
    named = section.find("p", cls="run-slowest")
    assert named.attrs["data-span-id"] == slowest.span_id and "training trajectories only" in named.all_text()
    summary = subprocess.run([*CLI, "summary", str(run.telemetry_dir)], capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0 and summary.stderr == ""
    assert f"\n  {slowest.seconds:.2f} s, " in summary.stdout
    stats = section.find("p", cls="stats")
    assert int(stats.attrs["data-count"]) == len(training)
    assert float(stats.attrs["data-max"]) == pytest.approx(max(s.seconds for s in training), abs=1e-9)
    bins = section.find("svg", cls="spans-hist").find_all("rect", cls="bin")
    assert sum(int(b.attrs["data-count"]) for b in bins) == len(training)
    metric = section.find("p", cls="metric")  # every trajectory, sampled with a span or not
    assert int(metric.attrs["data-count"]) >= len(training)
    assert sum(int(b.attrs["data-count"]) for b in section.find("svg", cls="metric-hist").find_all("rect")) == int(
        metric.attrs["data-count"]
    )


def _curve(dom: Node, title: str, label: str) -> dict[int, float]:
    svg = dom.find("svg", cls="curve", data_title=title)
    series = svg.find("g", cls="series", data_label=label)
    return {int(c.attrs["data-step"]): float(c.attrs["data-value"]) for c in series.find_all("circle")}


def test_curves_show_what_verl_logged(rendered):
    run, dom, _ = rendered
    steps = range(1, STEPS + 1)
    for title, key in (("Reward", "critic/score/mean"), ("Throughput", "perf/throughput")):
        got = _curve(dom, title, key)
        assert got == pytest.approx({n: run.console[n][key] for n in steps}, rel=1e-9, abs=1e-12), title
    kl_keys = [k for k in semconv.KL_KEYS if k in run.console[1]]
    assert kl_keys
    for key in kl_keys:
        assert _curve(dom, "KL", key) == pytest.approx({n: run.console[n][key] for n in steps}, rel=1e-9, abs=1e-12)
    table = dom.find("table", id="curve-table")
    for n in steps:
        cell = table.find("tr", data_step=str(n)).find("td", data_key="critic/score/mean")
        assert float(cell.attrs["data-value"]) == pytest.approx(run.console[n]["critic/score/mean"], rel=1e-9)
    # the JavaScript chart of any gauge ran in Chromium and drew the reward
    picked = dom.find("svg", cls="picked")
    assert picked.attrs["data-metric"] == f"{semconv.M_REWARD}{{{semconv.ATTR_REWARD_SOURCE}=score}}"
    drawn = {int(c.attrs["data-step"]): float(c.attrs["data-value"]) for c in picked.find_all("circle")}
    assert drawn == pytest.approx({n: run.console[n]["critic/score/mean"] for n in steps}, rel=1e-9, abs=1e-12)


def test_screenshot_is_kept(rendered):
    _, _, png = rendered
    assert png.exists() and png.stat().st_size > 30_000, png
    assert png_size(png) == (1400, 2000)


def test_report_cli_on_an_empty_folder(tmp_path):
    cli = subprocess.run([*CLI, "report", str(tmp_path)], capture_output=True, text=True)
    assert cli.returncode == 1 and cli.stdout == ""
    assert cli.stderr.startswith("otel-verl report: no telemetry files") and cli.stderr.count("\n") == 1
    assert not (tmp_path / "report.html").exists()


def test_replay_of_a_real_run_delivers_every_span(verl_runs):
    """Every line of the run folder, the launcher's distro files (its system metrics) with the run's."""
    run = verl_runs.get("v1", "grpo", steps=STEPS)
    assert run.returncode == 0, run.output[-4000:]

    def stored(sig: str, theirs: bool = True) -> list[dict]:
        return [b for p in signal_files(run.telemetry_dir, sig, theirs=theirs) for _, _, b in iter_lines(p)]

    points = sum(count_items("metrics", b) for b in stored("metrics"))
    assert points > sum(count_items("metrics", b) for b in stored("metrics", theirs=False)) == len(run.points)
    spans = sum(count_items("traces", b) for b in stored("traces"))
    with OtlpReceiver() as rx:
        cli = subprocess.run(
            [*CLI, "replay", str(run.telemetry_dir), "--endpoint", rx.url, "--headers", "x-tenant=verl"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert len(rx.span_ids()) == spans and {s.span_id for s in run.spans} <= set(rx.span_ids())
    assert len(rx.bodies("/v1/traces")) == len(stored("traces"))
    assert rx.metric_points() == points
    assert rx.log_records() == sum(count_items("logs", b) for b in stored("logs"))
    assert all(h.get("x-tenant") == "verl" and h.get("content-type") == "application/json" for _, h, _ in rx.requests)
    assert f"{spans} spans sent" in cli.stdout and f"{points} data points sent" in cli.stdout
