"""Prometheus config, alert rules and their promtool unit tests."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from support.opskit import (
    COMPOSE_FILE,
    PROM_CONFIG,
    PROM_DIR,
    PROM_TEST_FILE,
    RULE_FILES,
    load_yaml,
    promql_names,
    promtool_major_version,
    require_tool,
    run_tool,
)

PROMOTED = ["verl.run.id", "verl.project", "verl.experiment", "verl.process.role", "verl.rank", "host.name"]
# Keys of the `otlp:` block in Prometheus 3.14 (docs/configuration/configuration.md).
OTLP_KEYS = {
    "promote_resource_attributes",
    "promote_all_resource_attributes",
    "ignore_resource_attributes",
    "translation_strategy",
    "keep_identifying_resource_attributes",
    "convert_histograms_to_nhcb",
    "promote_scope_metadata",
    "label_name_underscore_sanitization",
    "label_name_preserve_multiple_underscores",
}
RUN_LABELS = ("verl_experiment", "verl_run_id")


def alert_rules() -> list[dict]:
    rules = []
    for path in RULE_FILES:
        for group in load_yaml(path)["groups"]:
            rules += [r for r in group["rules"] if "alert" in r]
    return rules


def prom2_compatible_config(tmp_path: Path) -> Path:
    """prometheus.yml without the Prometheus-3-only `otlp:` block, with rule
    paths made absolute, for promtool 2.x."""
    cfg = load_yaml(PROM_CONFIG)
    cfg.pop("otlp", None)
    cfg["rule_files"] = [str((PROM_DIR / p).resolve()) for p in cfg["rule_files"]]
    out = tmp_path / "prometheus.yml"
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


# ------------------------------------------------------------- config


def test_otlp_block_promotes_run_identity():
    otlp = load_yaml(PROM_CONFIG)["otlp"]
    assert set(otlp) <= OTLP_KEYS, f"unknown otlp keys: {set(otlp) - OTLP_KEYS}"
    assert otlp.get("translation_strategy", "UnderscoreEscapingWithSuffixes") == "UnderscoreEscapingWithSuffixes"
    assert not otlp.get("promote_all_resource_attributes", False)
    assert set(PROMOTED) <= set(otlp["promote_resource_attributes"])
    assert len(otlp["promote_resource_attributes"]) == len(set(otlp["promote_resource_attributes"]))


def test_config_wiring():
    cfg = load_yaml(PROM_CONFIG)
    rule_paths = [p for pattern in cfg["rule_files"] for p in PROM_DIR.glob(pattern)]
    assert sorted(rule_paths) == RULE_FILES and RULE_FILES
    targets = [t for am in cfg["alerting"]["alertmanagers"] for sc in am["static_configs"] for t in sc["targets"]]
    assert targets == ["alertmanager:9093"]
    assert cfg["storage"]["tsdb"]["out_of_order_time_window"]
    services = load_yaml(COMPOSE_FILE)["services"]
    for job in cfg["scrape_configs"]:
        for sc in job.get("static_configs", []):
            for t in sc["targets"]:
                host = t.split(":")[0]
                assert host == "localhost" or host in services, f"scrape target {t} is not a compose service"


def test_compose_runs_prometheus_3_with_otlp_receiver():
    svc = load_yaml(COMPOSE_FILE)["services"]["prometheus"]
    m = re.search(r":v(\d+)\.", svc["image"])
    assert m and int(m.group(1)) >= 3, svc["image"]
    assert "--web.enable-otlp-receiver" in svc["command"]
    assert "./prometheus:/etc/prometheus:ro" in svc["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in svc["command"]


def test_promtool_check_config(tmp_path):
    promtool = require_tool("promtool")
    if promtool_major_version(promtool) >= 3:
        res = run_tool([promtool, "check", "config", str(PROM_CONFIG)])
    else:
        # promtool 2.x rejects the `otlp:` block; check everything else.
        res = run_tool([promtool, "check", "config", str(prom2_compatible_config(tmp_path))])
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    for rf in RULE_FILES:
        assert re.search(re.escape(rf.name) + r"\s*\n\s*SUCCESS: \d+ rules found", out), out


def test_promtool_2_rejects_unstripped_config():
    """Documents why the 2.x check strips `otlp:`, and shows the check can fail."""
    promtool = require_tool("promtool")
    if promtool_major_version(promtool) >= 3:
        pytest.skip("promtool >= 3 understands the otlp block")
    res = run_tool([promtool, "check", "config", str(PROM_CONFIG)])
    assert res.returncode != 0
    assert "otlp" in res.stdout + res.stderr


# -------------------------------------------------------------- rules


def test_promtool_check_rules():
    promtool = require_tool("promtool")
    res = run_tool([promtool, "check", "rules", *map(str, RULE_FILES)])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_promtool_test_rules():
    promtool = require_tool("promtool")
    res = run_tool([promtool, "test", "rules", str(PROM_TEST_FILE)], cwd=PROM_TEST_FILE.parent)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.parametrize(
    "old,new",
    [
        (") > 0.2\n", ") > 0.9\n"),  # KL warning threshold raised: the bad run no longer fires
        (
            "increase(verl_training_nonfinite_total{verl_metric_key=~",
            "-increase(verl_training_nonfinite_total{verl_metric_key=~",
        ),  # a second NaN no longer fires
        ("(verl_training_stalled) > 0", "(verl_training_stalled) > 1"),  # the stall doctor's verdict ignored
        ("> 1800", "> 99999"),  # stall threshold: the stalled run no longer fires
    ],
)
def test_unit_tests_catch_broken_rules(tmp_path, old, new):
    promtool = require_tool("promtool")
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    src = (PROM_DIR / "rules" / "verl-alerts.yaml").read_text()
    assert old in src
    (tmp_path / "rules" / "verl-alerts.yaml").write_text(src.replace(old, new))
    shutil.copy(PROM_TEST_FILE, tmp_path / "tests" / PROM_TEST_FILE.name)
    res = run_tool([promtool, "test", "rules", PROM_TEST_FILE.name], cwd=tmp_path / "tests")
    assert res.returncode != 0, "promtool tests still pass with a broken rule"


def test_every_alert_has_severity_and_annotations():
    rules = alert_rules()
    assert len(rules) >= 10
    for r in rules:
        name = r["alert"]
        assert r["labels"]["severity"] in ("warning", "critical"), name
        ann = r["annotations"]
        assert ann["summary"] and ann["description"], name
        text = ann["summary"] + ann["description"]
        assert "$value" in ann["description"], f"{name}: description must show $value"
        for label in RUN_LABELS:
            assert f"$labels.{label}" in text, f"{name}: annotations must name {label}"


def test_alert_grouping_keeps_run_identity():
    """Every aggregation in an alert keeps the run labels, so that
    $labels.verl_run_id / verl_experiment are set on the alert."""
    clause = re.compile(r"\b(by|on)\s*\(([^()]*)\)")
    for r in alert_rules():
        clauses = clause.findall(r["expr"])
        assert clauses, f"{r['alert']}: expected an aggregation by run"
        for kind, labels in clauses:
            names = {x.strip() for x in labels.split(",")}
            assert set(RUN_LABELS) <= names, f"{r['alert']}: `{kind} ({labels})` drops run labels"


REQUIRED_ALERTS = {
    "VerlKLDivergenceHigh": {"warning", "critical"},
    "VerlRewardCollapse": {"critical"},
    "VerlEntropyCollapse": {"warning"},
    "VerlNonFiniteLossOrGradNorm": {"critical"},
    "VerlGuardTriggered": {"critical"},
    "VerlStallDoctorStalled": {"warning"},
    "VerlGradNormSpike": {"warning"},
    "VerlThroughputDrop": {"warning"},
    "VerlTrainingStalled": {"warning", "critical"},
    "VerlRolloutLongTail": {"warning"},
    "VerlRolloutDegenerateResponses": {"warning"},
    "VerlWeightSyncGrowing": {"warning"},
    "VerlGPUMemoryNearLimit": {"warning"},
}


def test_failure_modes_covered():
    have: dict[str, set] = {}
    for r in alert_rules():
        have.setdefault(r["alert"], set()).add(r["labels"]["severity"])
    for name, severities in REQUIRED_ALERTS.items():
        assert name in have, f"missing alert {name}"
        assert severities <= have[name], f"{name}: severities {have[name]}, want {severities}"


def test_required_signals_used():
    def metrics_of(name):
        out = set()
        for r in alert_rules():
            if r["alert"] == name:
                out |= promql_names(r["expr"]).metrics
        return out

    assert "verl_training_kl" in metrics_of("VerlKLDivergenceHigh")
    assert "verl_training_nonfinite_total" in metrics_of("VerlNonFiniteLossOrGradNorm")
    assert "verl_guard_triggered_total" in metrics_of("VerlGuardTriggered")
    assert "verl_training_stalled" in metrics_of("VerlStallDoctorStalled")
    assert "verl_training_last_step_timestamp_seconds" in metrics_of("VerlTrainingStalled")
    assert "verl_rollout_tail_ratio" in metrics_of("VerlRolloutLongTail")
    assert "verl_rollout_degenerate_ratio" in metrics_of("VerlRolloutDegenerateResponses")
    assert "verl_stage_duration_seconds_sum" in metrics_of("VerlWeightSyncGrowing")
    assert {"hw_gpu_memory_usage_bytes", "hw_gpu_memory_limit_bytes"} <= metrics_of("VerlGPUMemoryNearLimit")


def test_unit_tests_cover_every_alert_firing_and_silent():
    """Each alert (and each of its severities) fires in some promtool case,
    and has a case where it must stay silent."""
    tests = load_yaml(PROM_TEST_FILE)
    assert tests["rule_files"] == ["../rules/" + p.name for p in RULE_FILES]
    fired: dict[str, set] = {}
    silent: set[str] = set()
    for group in tests["tests"]:
        for case in group.get("alert_rule_test", []):
            exp = case.get("exp_alerts") or []
            if exp:
                for a in exp:
                    fired.setdefault(case["alertname"], set()).add(a["exp_labels"]["severity"])
                    assert a.get("exp_annotations"), f"{case['alertname']}: annotations not checked"
            else:
                silent.add(case["alertname"])
    for r in alert_rules():
        assert r["labels"]["severity"] in fired.get(r["alert"], set()), (
            f"{r['alert']} ({r['labels']['severity']}) never fires in tests"
        )
        assert r["alert"] in silent, f"{r['alert']} has no silent case"


def test_readme_threshold_table_lists_every_alert():
    page = (PROM_DIR.parents[1] / "docs" / "alerts.md").read_text()
    for r in alert_rules():
        assert f"`{r['alert']}`" in page, f"{r['alert']} missing from the threshold table of docs/alerts.md"
