"""``otel_verl.offline.summary`` on small synthetic OTLP JSON files (the real run: tests/e2e/test_cli_summary.py)."""

from __future__ import annotations

import io

from otel_verl import cli, semconv
from otel_verl.offline.otlp_files import MetricPoint
from otel_verl.offline.summary import MAIN_METRICS, dedupe, metric_series, summary


def test_summary_of_a_v1_run(v1_run):
    out = io.StringIO()
    assert summary(v1_run, out=out) == 0
    text = out.getvalue()
    assert "run run-1: 27 spans from 3 processes" in text
    assert "  taskrunner (pid 10): 10 spans\n  worker0 (pid 11): 3 spans" in text
    step1 = next(line for line in text.splitlines() if line.startswith("  step 1 ("))
    assert step1.endswith("gen=1.00s old_log_prob=0.25s update_actor=0.50s; 2 worker spans from ranks [0]")
    # the validation trajectory counts here (the report leaves it out of the slowest)
    assert "rollout: 8 trajectory spans; slowest 5.00s (submitted at step 1" in text
    assert "  verl.training.step: 1, 2" in text
    assert "  verl.training.reward{verl.reward.source=score}: 0.25, 0.75" in text
    assert "  verl.actor.entropy: 4, 3" in text


def test_metric_series_uses_the_semconv_names_and_drops_repeats():
    names = [name for name, _ in MAIN_METRICS]
    for key in ("actor/entropy", "actor/grad_norm", "perf/time_per_step"):
        assert semconv.metric_name(key) in names
    grad = semconv.metric_name("actor/grad_norm")

    def point(name, value, t, **attrs):
        return MetricPoint(name, "gauge", value, None, attrs, {}, t)

    points = [
        point(grad, 2.0, 30),
        point(grad, 1.0, 10),
        point(grad, 1.0, 20),  # exported again before it changed
        point(semconv.M_KL, 0.1, 10, **{semconv.ATTR_KL_SOURCE: "ppo_kl"}),
        point(semconv.M_KL, 0.9, 10, **{semconv.ATTR_KL_SOURCE: "other"}),  # not a main series
        point("verl.unrelated", 5.0, 10),
    ]
    assert metric_series(points) == [
        (f"{semconv.M_KL}{{{semconv.ATTR_KL_SOURCE}=ppo_kl}}", [0.1]),
        (grad, [1.0, 2.0]),
    ]
    assert dedupe([1.0, 1.0, 2.0, 1.0]) == [1.0, 2.0, 1.0]


def test_summary_of_an_empty_folder_and_the_cli(tmp_path, v1_run, capsys):
    out = io.StringIO()
    assert summary(tmp_path, out=out) == 1
    assert out.getvalue() == f"no telemetry files in {tmp_path}\n"
    assert cli.main(["summary", str(v1_run)]) == 0
    assert "step traces:" in capsys.readouterr().out
