"""``otel_verl.offline.facts.generation``: each degenerate kind's share of a run's training responses and
its worst step, in ``summary``'s health box and the report's table; a finding above the alert's
threshold (the rule's own text holds the same number), never for validation alone."""

from __future__ import annotations

import importlib.util
import io
import re
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import yaml
from support.otlp_json import T0, gauge, span, write_metrics, write_spans

from otel_verl import semconv
from otel_verl.offline.facts import generation as gen
from otel_verl.offline.otlp_files import read_metric_points, read_spans
from otel_verl.offline.report import build, render
from otel_verl.offline.summary import summary

REPO = Path(__file__).resolve().parents[3]
ALERTS = REPO / "collector" / "prometheus" / "rules" / "verl-alerts.yaml"
REP, EMPTY, LIMIT = semconv.DEGENERATE_REPETITIVE, semconv.DEGENERATE_EMPTY, semconv.DEGENERATE_LENGTH_LIMIT


def _shares(validate: bool, shares: dict[str, float]) -> list[dict]:
    return [
        gauge(
            semconv.M_ROLLOUT_DEGENERATE_RATIO,
            share,
            **{semconv.ATTR_ROLLOUT_VALIDATE: validate, semconv.ATTR_ROLLOUT_DEGENERATE_KIND: kind},
        )
        for kind, share in shares.items()
    ]


def _run(folder: Path, training: dict[int, list[dict[str, float]]], validation: dict[str, float] | None = None) -> None:
    """Steps 1..n (``training``: per step, each agent-loop worker's shares), each a 10 s ``verl.step``
    span, the workers' exports as a real run makes them: a cumulative gauge repeats its last value
    in every export (the validation before training's at 5 s in each later one), an export in each
    step before its responses are scored repeats the step before's, and one after the last step
    (the worker's shutdown) repeats the last."""
    spans = []
    for n in training:
        _, root = span(semconv.SPAN_STEP, f"{n:016x}", 10.0 * n, 10.0 * n + 8, verl__step=n)
        spans.append(root)
    write_spans(folder, "taskrunner", 10, spans)
    workers = max(len(w) for w in training.values())
    for w in range(workers):
        pid = 20 + w
        last: list[dict] = []
        val = _shares(True, validation) if validation else []
        if val:
            write_metrics(folder, "agent_loop_worker", pid, 5.0, val)
        for n, per_worker in training.items():
            if last:
                write_metrics(folder, "agent_loop_worker", pid, 10.0 * n + 0.5, _shares(False, last) + val)
            last = per_worker[w]
            write_metrics(folder, "agent_loop_worker", pid, 10.0 * n + 2.0 + w, _shares(False, last) + val)
        write_metrics(folder, "agent_loop_worker", pid, 10.0 * len(training) + 9, _shares(False, last) + val)


def _summary(folder: Path) -> list[str]:
    out = io.StringIO()
    assert summary(folder, out=out, err=io.StringIO()) == 0
    return out.getvalue().splitlines()


def _finding(lines: list[str]) -> str:
    (line,) = [x for x in lines if re.match(r"  \[\w+\]\s+generation health: ", x)]
    return line


HEALTHY = {REP: 0.0, EMPTY: 0.0, LIMIT: 0.1}


def test_a_healthy_run_has_no_finding_and_says_each_share(tmp_path):
    _run(tmp_path, {n: [HEALTHY] for n in (1, 2, 3)})
    lines = _summary(tmp_path)
    assert lines[1] == "health: nothing to check"
    assert _finding(lines) == (
        "  [ok]    generation health: training responses over 3 steps: repetitive 0%, empty 0%, "
        "length_limit 10% (worst: step 1, 10%) (report: #generation)"
    )


def test_a_run_with_30_percent_repetitive_responses_is_a_finding_naming_the_kind_and_its_worst_step(tmp_path):
    # two workers; step 3's share is their mean (50% and 30%); the run's is the steps' mean (20, 30, 40)
    training = {
        1: [{REP: 0.2, EMPTY: 0.0, LIMIT: 0.2}, {REP: 0.2, EMPTY: 0.0, LIMIT: 0.2}],
        2: [{REP: 0.3, EMPTY: 0.0, LIMIT: 0.3}, {REP: 0.3, EMPTY: 0.0, LIMIT: 0.3}],
        3: [{REP: 0.5, EMPTY: 0.0, LIMIT: 0.5}, {REP: 0.3, EMPTY: 0.0, LIMIT: 0.3}],
    }
    _run(tmp_path, training)
    lines = _summary(tmp_path)
    assert lines[1] == "health: something to check"
    assert _finding(lines) == (
        "  [check] generation health: repetitive above 20%, the threshold of VerlRolloutDegenerateResponses; "
        "training responses over 3 steps: repetitive 30% (worst: step 3, 40%), empty 0%, "
        "length_limit 30% (worst: step 3, 40%) (report: #generation)"
    )
    page = render(build(tmp_path))
    (item,) = re.findall(r'<li class="finding (\w+)" data-topic="generation health">.*?</li>', page)
    assert item == "warn" and 'href="#generation">details</a>' in page and '<section id="generation">' in page
    table = page[page.index('<table class="num" id="generation-table">') :]
    assert (
        '<tr class="over" data-kind="repetitive" data-responses="training"><th>repetitive</th><td>training</td>'
        "<td>30%</td><td>3</td><td>40%</td><td>3</td></tr>"
    ) in table
    # the length limit is reported, not marked: how often a healthy run truncates depends on the task
    assert '<tr data-kind="length_limit" data-responses="training">' in table


def test_degenerate_validation_alone_is_not_a_training_finding(tmp_path):
    _run(tmp_path, {n: [HEALTHY] for n in (1, 2)}, validation={REP: 1.0, EMPTY: 0.5, LIMIT: 1.0})
    lines = _summary(tmp_path)
    assert lines[1] == "health: nothing to check"
    line = _finding(lines)
    assert line.startswith("  [ok]    generation health: training responses over 2 steps: repetitive 0%, empty 0%")
    # the validation before training is step 0
    assert "; validation, apart: repetitive 100% (worst: step 0, 100%), empty 50% (worst: step 0, 50%)" in line
    page = render(build(tmp_path))
    assert '<tr data-kind="repetitive" data-responses="validation"><th>repetitive</th>' in page
    assert 'class="over"' not in page


def test_a_run_without_the_gauge_says_it_was_not_measured(v1_run):
    line = _finding(_summary(v1_run))
    assert line == "  [info]  generation health: not measured by this run (no verl.rollout.degenerate_ratio)"
    assert '<section id="generation">' not in render(build(v1_run))


def test_shares_from_the_files_are_escaped_or_left_out(tmp_path):
    _run(tmp_path, {1: [HEALTHY]})
    hostile = [
        gauge(
            semconv.M_ROLLOUT_DEGENERATE_RATIO,
            0.9,
            **{semconv.ATTR_ROLLOUT_VALIDATE: False, semconv.ATTR_ROLLOUT_DEGENERATE_KIND: "<script>x</script>"},
        ),
        *_shares(False, {EMPTY: 7.0}),  # not a share
    ]
    write_metrics(tmp_path, "agent_loop_worker", 30, 12.0, hostile)
    assert "<script>x" not in render(build(tmp_path))
    assert "empty 0%," in _finding(_summary(tmp_path))


def test_the_threshold_is_the_alerts():
    (rule,) = [
        r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"] if r.get("alert") == gen.ALERT
    ]
    expr = " ".join(rule["expr"].split())
    assert re.search(r"\)\s*>\s*(\d+(?:\.\d+)?)$", expr).group(1) == str(gen.ALERT_THRESHOLD)
    assert f'verl_rollout_degenerate_kind=~"{"|".join(gen.ALERT_KINDS)}"' in expr
    assert 'verl_rollout_validate="false"' in expr


def test_the_fold_holds_a_few_numbers_per_step_not_the_points():
    steps, exports = 2_000, 3  # per step and worker: repeats of the last step's share, then its own
    fold = gen.GenerationFold([(n, T0 + n * 10**9, T0 + n * 10**9 + 5) for n in range(1, steps + 1)])
    groups = {
        share: [
            (
                semconv.M_ROLLOUT_DEGENERATE_RATIO,
                ((semconv.ATTR_ROLLOUT_DEGENERATE_KIND, kind), (semconv.ATTR_ROLLOUT_VALIDATE, "False")),
                share,
                "gauge",
                2,
            )
            for kind in gen.KINDS
        ]
        for share in (0.0, 0.25, 0.5)
    }
    tracemalloc.start()
    for n in range(1, steps + 1):
        for w in ("w0", "w1"):
            for t in range(exports):
                share = 0.0 if t < exports - 1 else 0.5 if n == 777 and w == "w0" else 0.25
                fold.export(w, T0 + n * 10**9 + t, None, groups[share])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    g = fold.close()
    # 3 kinds x (a sum and a count) per step, 36 bytes; holding the 36,000 points would take megabytes
    assert peak < 50 * steps
    rep = g.training[REP]
    assert rep.steps == steps and rep.worst_step == 777 and rep.worst == 0.375
    assert abs(rep.share - (0.25 * (steps - 1) + 0.375) / steps) < 1e-12


def _e2e_helper():
    """The real-run test's rule (tests/e2e/test_rollout_tail_e2e.py), to check it on known files."""
    path = REPO / "tests" / "e2e" / "test_rollout_tail_e2e.py"
    spec = importlib.util.spec_from_file_location("rollout_tail_e2e_rule", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.degenerate_shares


def test_the_real_run_tests_reading_of_the_points_is_summarys(tmp_path):
    training = {
        1: [{REP: 0.125, EMPTY: 0.25, LIMIT: 0.125}],
        2: [{REP: 0.25, EMPTY: 0.125, LIMIT: 0.25}],
        3: [{REP: 0.125, EMPTY: 0.125, LIMIT: 0.125}],
    }
    _run(tmp_path, training, validation={REP: 1.0, EMPTY: 0.0, LIMIT: 1.0})
    run = SimpleNamespace(spans=read_spans(tmp_path), points=read_metric_points(tmp_path), telemetry_dir=tmp_path)
    expected = _e2e_helper()(run)
    assert expected == ["empty 16.7%", "length_limit 16.7%", "repetitive 16.7%"]
    line = _finding(_summary(tmp_path)).split("; validation")[0]
    assert all(f" {kind}" in line for kind in expected) and "repetitive 0%" not in line, line
