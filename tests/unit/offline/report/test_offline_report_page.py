"""``otel_verl.offline.report.page``: the rendered page is self-contained, escaped and shows the values."""

from __future__ import annotations

import json
import math
import re
import subprocess
from html.parser import HTMLParser

import pytest
from support.components import require_chromium
from support.otlp_json import gauge, llm_call, log_record, span, write_logs, write_metrics, write_spans

from otel_verl import semconv
from otel_verl.offline import otlp_files
from otel_verl.offline.facts.pools import REPLICA_IDLE, STATES
from otel_verl.offline.facts.time_went import TIME_BY
from otel_verl.offline.report import build, render
from otel_verl.offline.run.markup import esc
from otel_verl.offline.run.page import asset
from otel_verl.printable import MAX_CHARS


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


def test_stylesheet_and_script_come_from_the_package_assets(v1_run):
    page = render(build(v1_run))
    css, js = asset("report.css"), asset("report.js")
    assert "table.num" in css and "getElementById('step-pick')" in js
    assert f"<style>{css}</style>" in page and f"<script>{js}</script>" in page


def test_the_slowest_trajectory_rule_is_stated_and_shared_with_the_summary(v1_run):
    from otel_verl.offline.run.text import lines

    rep = build(v1_run)
    page = render(rep)
    assert page.count("training trajectories only; --include-validation counts validation ones too") == 1 + 2 + 1
    m = re.search(r'<p class="run-slowest" data-span-id="(\w+)" data-seconds="([\d.]+)">', page)
    assert m and float(m.group(2)) == pytest.approx(1.4)  # training only: not the 5 s validation one
    summary_text = "\n".join(lines(rep))
    assert "  1.40 s, sample 1 rollout 0, submitted at step 2" in summary_text and m.group(1) == rep.slowest.span_id
    with_validation = build(v1_run, include_validation=True)
    assert with_validation.slowest.seconds == pytest.approx(5.0)
    assert "chosen among training and validation trajectories" in render(with_validation)


def test_identical_curves_stay_visible(tmp_path):
    for step, value in ((1, 0.2), (2, 0.4)):
        rewards = [
            gauge(semconv.M_REWARD, value, **{semconv.ATTR_REWARD_SOURCE: source}) for source in ("score", "rewards")
        ]
        write_metrics(tmp_path, "taskrunner", 1, step, [gauge(semconv.M_TRAINING_STEP, step), *rewards])
    page = render(build(tmp_path))
    svg = re.search(r'<svg class="chart curve" data-title="Reward".*?</svg>', page, re.S).group(0)
    score, rewards = re.findall(r'<g class="series" data-label="([^"]+)"><polyline ([^>]*)/>', svg)
    assert (score[0], rewards[0]) == ("critic/score/mean", "critic/rewards/mean")  # drawn in this order
    width = {label: float(re.search(r'stroke-width="([\d.]+)"', attrs).group(1)) for label, attrs in (score, rewards)}
    assert width["critic/score/mean"] > width["critic/rewards/mean"]  # the one below is wider: it shows around
    assert "stroke-dasharray" in rewards[1] and "stroke-dasharray" not in score[1]
    assert '<small class="same">(same values as critic/score/mean)</small>' in page


def test_the_any_metric_chart_labels_its_axes(v1_run, tmp_path):
    chromium = require_chromium()
    page = tmp_path / "page.html"
    page.write_text(render(build(v1_run)))
    dom = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    chart = re.search(r'<svg [^>]*class="chart picked"[^>]*>.*?</svg>', dom, re.S).group(0)
    assert re.search(r'<text class="axis x-label"[^>]*>step</text>', chart)
    label = semconv.M_REWARD + "{" + semconv.ATTR_REWARD_SOURCE + "=score}"
    assert re.search(r'<text class="axis y-label"[^>]*>' + re.escape(label) + "</text>", chart)


def test_where_the_time_went_per_step_and_the_slowest_step_in_words(tmp_path):
    """``verl.time.*`` of each step span: a row per step with seconds and share, and the slowest
    step's categories in words, largest first (what a user reads without opening a trace)."""
    times = {
        1: {"rollout": 1.5, "waiting": 0.25, "training": 0.2},
        2: {"rollout": 0.5, "waiting": 0.0, "training": 1.4},
    }
    spans = []
    for step, by in times.items():
        total = sum(by.values())
        kw = {f"verl__time__{c}": v for c, v in by.items()}
        spans.append(span(semconv.SPAN_STEP, f"{step:016x}", 10 * step, 10 * step + total, verl__step=step, **kw)[1])
    write_spans(tmp_path, "taskrunner", 1, spans)
    rep = build(tmp_path)
    assert [TIME_BY.of(r) for r in rep.steps] == [times[1], times[2]]
    page = render(rep)
    section = page[page.index('<section id="time-went">') :]
    section = section[: section.index("</section>")]
    assert '<tr data-step="1" class="slowest">' in section and '<tr data-step="2">' in section
    assert 'data-category="waiting" data-seconds="0.25">0.250 <small>13%</small>' in section
    assert (
        "Slowest step 1 (1.95 s):</b> generating rollouts 1.50 s (77%), waiting for rollouts still being generated "
        "0.25 s (13%), training (log-probs, values, updates on the workers) 0.20 s (10%)." in section
    )
    # the categories are named in words a reader understands without a glossary; no jargon
    assert '<th data-category="waiting" title="waiting">waiting for rollouts still being generated</th>' in section
    assert (
        "explained by a child span" not in page and "<th>with a worker call, rollout or wait under it</th>" in section
    )


def test_no_time_section_for_runs_without_accounting(v1_run):
    page = render(build(v1_run))
    assert "time-went" not in page  # no section, no link to it


def test_pool_seconds_and_replica_idle_of_the_slowest_step(tmp_path):
    """``verl.pool.<role>.<state>`` of the step span per role, and each rollout replica's own idle
    share from the LLM-call spans in the step (busy while a call is in flight)."""
    pools = {"verl__pool__actor__busy": 0.5, "verl__pool__actor__waiting": 0.25, "verl__pool__actor__idle": 0.25}
    sid, root = span(semconv.SPAN_STEP, "c" * 16, 0, 1.0, verl__step=1, verl__time__rollout=1.0, **pools)
    calls = [
        llm_call("c" * 16, a, b, sid, verl__rollout__server__id="r0")[1]
        for a, b in ((0.0, 0.25), (0.125, 0.5))  # overlapping: busy 0.5 s of the step, not 0.625
    ]
    write_spans(tmp_path, "taskrunner", 1, [root, *calls])
    rep = build(tmp_path)
    assert STATES.of(rep.steps[0]) == {"actor": {"busy": 0.5, "waiting": 0.25, "idle": 0.25}}
    assert REPLICA_IDLE.of(rep.steps[0]) == {"r0": pytest.approx(0.5)}
    page = render(rep)
    assert "actor busy 0.50 s, waiting 0.25 s, idle 0.25 s." in page
    assert "Rollout replicas idle, by their own LLM calls: r0 50%." in page
    assert '<td data-role="actor">0.50 / 0.25 / 0.25</td>' in page


XSS = "<img src=x onerror=\"document.title='XSS'\">"


class _Elements(HTMLParser):
    """Every element of a page, as (tag, attributes), and the text of its script elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))


def _elements(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Elements()
    parser.feed(page)
    return parser.elements


def _hostile_run(folder, payload: str, **extra_resource) -> None:
    """A run whose every name, attribute, resource value and stall record holds ``payload``."""
    attrs = {"verl__driver": payload, "verl__time__" + payload: 0.5, f"verl__pool__{payload}__busy": 0.5}
    sid, root = span(semconv.SPAN_STEP, "a" * 16, 0, 2, verl__step=1, **attrs)
    _, stage = span(f"verl.{payload}", "a" * 16, 0, 1, sid, verl__stage=payload)
    tid, traj = span(
        semconv.SPAN_ROLLOUT_TRAJECTORY,
        "a" * 16,
        0.1,
        0.9,
        sid,
        verl__rollout__sample_index=payload,
        verl__rollout__index=payload,
        verl__rollout__response_tokens=payload,
    )
    _, call = llm_call("a" * 16, 0.2, 0.3, tid, verl__rollout__server__id=payload)
    _, other = span(payload, "a" * 16, 1, 1.5, sid)
    resource = {semconv.RES_RUN_ID: payload, "service.name": payload, semconv.RES_EXPERIMENT: payload, **extra_resource}
    write_spans(folder, payload, payload, [root, stage, traj, call, other], **resource)
    for step in (1, 2):
        metrics = [
            gauge(semconv.M_TRAINING_STEP, step),
            gauge(semconv.M_REWARD, 0.5 * step, **{semconv.ATTR_REWARD_SOURCE: "score"}),
            gauge(f"verl.{payload}", 1.0 * step, **{payload: payload}),
        ]
        write_metrics(folder, "taskrunner", 1, 2 + step, metrics)
    stall = log_record(semconv.EVENT_STALL_STACKS, f'Thread "{payload}" (ident 1):\n  File "{payload}", line 1', 2)
    write_logs(folder, payload, payload, [stall], **{semconv.RES_ROLE: payload})


def test_no_markup_from_a_file_reaches_the_page(tmp_path, monkeypatch):
    """Every value from the files is escaped, ids included: the ids here are given past the
    reader (which refuses them) to show that the page escapes them too."""
    _hostile_run(tmp_path, XSS)
    real = otlp_files._DECODERS["traces"]

    def ids_past_the_reader(batch):
        spans = real(batch)
        for s in spans:
            s.trace_id, s.span_id = XSS + s.trace_id, XSS + s.span_id
            s.parent_id = XSS + s.parent_id if s.parent_id else ""
        return spans

    monkeypatch.setitem(otlp_files._DECODERS, "traces", ids_past_the_reader)
    rep = build(tmp_path)
    assert rep.steps and rep.stall_reports and rep.slowest is not None and XSS in rep.slowest.span_id
    page = render(rep)
    elements = _elements(page)
    assert "img" not in {tag for tag, _ in elements}
    assert not [(tag, a) for tag, attrs in elements for a in attrs if a.startswith("on")]  # no event handler
    assert [attrs for tag, attrs in elements if tag == "script"] == [
        {"type": "application/json", "id": "gauge-data"},
        {},
    ]
    assert "&lt;img src=x onerror=&quot;document.title=&#x27;XSS&#x27;&quot;&gt;" in page  # shown as text
    assert f'data-span-id="{esc(rep.slowest.span_id)}"' in page


def test_the_data_block_is_json_without_markup_or_non_finite_numbers(tmp_path):
    """The "any metric" data is read by JSON.parse: no ``<`` (``<!--`` or ``</script>`` would end or
    hide the rest of the page), and NaN or an infinity, which JSON has no words for, as null."""
    names = ["verl.x<!--<script>", "verl.y</script><b>&amp;"]
    for step in (1, 2):
        write_metrics(
            tmp_path, "taskrunner", 1, step, [gauge(semconv.M_TRAINING_STEP, step)] + [gauge(n, 1.0) for n in names]
        )
    rep = build(tmp_path)
    rep.gauges["verl.not_finite"] = {1: math.nan, 2: math.inf}  # past the reader, which refuses them
    page = render(rep)
    blob = re.search(r'<script type="application/json" id="gauge-data">(.*?)</script>', page, re.S).group(1)
    assert not set("<>&") & set(blob)

    def no_constants(word):
        raise ValueError(f"{word} is not JSON")

    data = json.loads(blob, parse_constant=no_constants)
    assert data["verl.x<!--<script>"] == {"1": 1.0, "2": 1.0} and "verl.y</script><b>&amp;" in data
    assert data["verl.not_finite"] == {"1": None, "2": None}
    assert '<option value="verl.x&lt;!--&lt;script&gt;">' in page  # the picker's value is the key


def test_a_long_value_is_shown_cut_to_a_bound(tmp_path):
    """A megabyte attribute value is shown as its first characters and a count of the rest,
    wherever it appears (a stage name is in every step's cells, columns and titles)."""
    huge = "x" * 1_000_000
    sid, root = span(semconv.SPAN_STEP, "a" * 16, 0, 2, verl__step=1)
    spans = [root] + [span(huge, "a" * 16, 0, 1, sid, verl__stage=huge + str(i))[1] for i in range(3)]
    write_spans(tmp_path, "taskrunner", 1, spans, **{"service.name": huge})
    write_metrics(tmp_path, "taskrunner", 1, 3, [gauge(semconv.M_TRAINING_STEP, 1), gauge("verl.g", 1.0, k=huge)])
    write_metrics(tmp_path, "taskrunner", 1, 4, [gauge(semconv.M_TRAINING_STEP, 2), gauge("verl.g", 2.0, k=huge)])
    page = render(build(tmp_path))
    assert len(page) < 300_000, len(page)
    assert "x" * MAX_CHARS + "… (999500 more characters)" in page


def _chromium(page) -> subprocess.CompletedProcess:
    """Chromium's DOM of ``page`` after its script ran; its console messages are in stderr."""
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]
    return subprocess.run(
        ["chromium", *args, "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_page_runs_its_own_script_and_nothing_else(v1_run, tmp_path):
    """The Content-Security-Policy allows the page's own script and stylesheet (by hash): they run
    without a violation, while markup an escaping bug would let in runs nothing."""
    require_chromium()
    page = render(build(v1_run))
    assert page.count('http-equiv="Content-Security-Policy"') == 1 and "unsafe-inline" not in page
    clean = tmp_path / "clean.html"
    clean.write_text(page)
    result = _chromium(clean)
    assert "Content Security Policy" not in result.stderr, result.stderr[-3000:]
    assert 'class="chart picked"' in result.stdout  # the "any metric" chart was drawn
    assert re.search(r'<tr data-step="2" class="selected">', result.stdout)  # the step picker's script ran
    injected = tmp_path / "injected.html"
    script = "<script>document.body.setAttribute('data-ran','1')</script>"
    injected.write_text(page.replace("<footer>", f"{XSS}{script}<footer>"))
    result = _chromium(injected)
    assert "<title>XSS</title>" not in result.stdout and 'data-ran="1"' not in result.stdout
    assert result.stdout.count("<title>verl run run-1</title>") == 1
    assert "Executing inline event handler violates the following Content Security Policy" in result.stderr
    assert "Executing inline script violates the following Content Security Policy" in result.stderr
