"""``promreplay``: a real run's OTLP metric files as Prometheus 3's series, replayed through promtool.
The real runs' replays are in tests/e2e (test_guard, faults/test_stall, test_rollout_tail_e2e,
test_alerts_replayed); here, the translation on a small export and the place of every alert."""

from __future__ import annotations

import json

import yaml
from support.opskit import require_tool
from support.promreplay import AS_IT_HAPPENED, NOT_ON_CPU, WHAT_IF, Replay, alert_names, run_series


def _line(t_ns: int, stalled: float, nan: int | None) -> str:
    res = {
        "attributes": [
            {"key": k, "value": {"stringValue": v}}
            for k, v in (
                ("service.name", "verl"),
                ("service.instance.id", "run1-taskrunner-1"),
                ("verl.run.id", "run1"),
                ("verl.project", "p"),
                ("verl.experiment", "e"),
                ("verl.process.role", "taskrunner"),
                ("telemetry.sdk.name", "opentelemetry"),  # not promoted: no label
            )
        ]
    }
    metrics = [
        {
            "name": "verl.training.stalled",
            "unit": "",
            "gauge": {"dataPoints": [{"timeUnixNano": str(t_ns), "asDouble": stalled}]},
        },
        {
            "name": "verl.training.last_step.timestamp",
            "unit": "s",
            "gauge": {"dataPoints": [{"timeUnixNano": str(t_ns), "asDouble": 1000.0}]},
        },
    ]
    if nan is not None:
        point = {
            "timeUnixNano": str(t_ns),
            "asInt": str(nan),
            "attributes": [{"key": "verl.metric.key", "value": {"stringValue": "actor/pg_loss"}}],
        }
        metrics.append(
            {
                "name": "verl.training.nonfinite",
                "unit": "{value}",
                "sum": {"dataPoints": [point], "aggregationTemporality": 2, "isMonotonic": True},
            }
        )
    return json.dumps({"resourceMetrics": [{"resource": res, "scopeMetrics": [{"metrics": metrics}]}]})


def test_series_are_named_and_labelled_as_prometheus_3_stores_them(tmp_path):
    (tmp_path / "metrics-taskrunner-1.jsonl").write_text(
        _line(1000 * 10**9, 0, None) + "\n" + _line(1001 * 10**9, 1, 1) + "\n"
    )
    series = {s.name: s for s in run_series(tmp_path)}
    assert set(series) == {
        "verl_training_stalled",
        "verl_training_last_step_timestamp_seconds",
        "verl_training_nonfinite_total",
    }
    nan = series["verl_training_nonfinite_total"]
    assert nan.labels == {
        "__name__": "verl_training_nonfinite_total",
        "job": "verl",
        "instance": "run1-taskrunner-1",
        "verl_run_id": "run1",
        "verl_project": "p",
        "verl_experiment": "e",
        "verl_process_role": "taskrunner",
        "verl_metric_key": "actor/pg_loss",
    }
    assert nan.samples == [(1001.0, 1.0)]
    assert series["verl_training_stalled"].samples == [(1000.0, 0.0), (1001.0, 1.0)]


def test_the_replay_fires_the_shipped_rules_on_those_series_and_ends_them_with_their_process(tmp_path):
    require_tool("promtool")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics-taskrunner-1.jsonl").write_text(
        _line(1000 * 10**9, 0, None) + "\n" + _line(1001 * 10**9, 1, 1) + "\n"
    )
    replay = Replay(run_series(tmp_path / "run"), slower=60)  # the second export 60 s later
    cases = [
        (a, t)
        for a in ("VerlStallDoctorStalled", "VerlNonFiniteLossOrGradNorm", "VerlTrainingTelemetryLost")
        for t in (30, 70, 420)
    ]
    got = replay.alerts(tmp_path / "promtool", cases)
    # the NaN counter starts late (its first export is the second): promtool's '_' (a missing
    # sample) until then, and the alert still fires on it (by the rule's `unless ... offset` branch:
    # a series' first sample is no increase)
    (nan,) = [
        s["values"]
        for s in yaml.safe_load((tmp_path / "promtool" / "replay.test.yaml").read_text())["tests"][0]["input_series"]
        if s["series"].startswith("verl_training_nonfinite_total")
    ]
    assert nan.split()[:7] == ["_"] * 6 + ["1.0"], nan
    assert not got[("VerlStallDoctorStalled", 30)] and not got[("VerlNonFiniteLossOrGradNorm", 30)]
    assert [a["verl_run_id"] for a in got[("VerlStallDoctorStalled", 70)]] == ["run1"]
    assert [a["verl_metric_key"] for a in got[("VerlNonFiniteLossOrGradNorm", 70)]] == ["actor/pg_loss"]
    assert not got[("VerlTrainingTelemetryLost", 70)]
    # its process exported last at 60 s: the series end there, and 5 min later the heartbeat is lost
    assert not got[("VerlStallDoctorStalled", 420)]
    assert [a["severity"] for a in got[("VerlTrainingTelemetryLost", 420)]] == ["warning"]


def test_every_shipped_alert_is_fired_on_a_real_runs_series_or_said_why_not():
    places = [set(AS_IT_HAPPENED), set(WHAT_IF), set(NOT_ON_CPU)]
    assert sum(len(p) for p in places) == len(set().union(*places)), "an alert in two places"
    assert set().union(*places) == alert_names()
