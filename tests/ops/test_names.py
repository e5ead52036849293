"""collector/metric_names.txt and label_names.txt against what the rules,
dashboard and data-source links use, and against the OTel instruments that
otel-verl emits (translated the way Prometheus 3's OTLP receiver does)."""

from __future__ import annotations

import re

import pytest
from support.opskit import (
    DASHBOARD_FILES,
    LABEL_NAMES_FILE,
    METRIC_NAMES_FILE,
    RULE_FILES,
    all_used_names,
    dashboard_panels,
    load_json,
    load_yaml,
    otlp_to_prometheus_name,
    promql_names,
    read_name_list,
    verl_key_to_otel_name,
)

from otel_verl.instruments import catalog

# (OTel name, unit, kind) of what otel-verl emits: its one definition of the instruments.
OTEL_INSTRUMENTS = [(spec.name, spec.unit, spec.kind) for spec in catalog.ALL + catalog.ENGINE]
# verl metric keys (Tracking.log) that the kit reads through otel-verl's
# generic gauges ("verl." + key, unit-less).
VERL_KEYS = [
    "actor/entropy",
    "actor/grad_norm",
    "actor/pg_loss",
    "actor/kl_loss",
    "critic/vf_loss",
    "critic/grad_norm",
    "perf/time_per_step",
    "perf/mfu/actor",
    "response_length/mean",
]
PROMETHEUS_INTERNAL = {"ALERTS", "ALERTS_FOR_STATE", "up"}
DERIVED_LABELS = {"metric", "severity"}


def translated_names() -> set[str]:
    out = set()
    for name, unit, kind in OTEL_INSTRUMENTS:
        base = otlp_to_prometheus_name(name, unit, kind)
        if kind == "histogram":
            out |= {base + "_bucket", base + "_sum", base + "_count"}
        else:
            out.add(base)
    for key in VERL_KEYS:
        out.add(otlp_to_prometheus_name(verl_key_to_otel_name(key), "", "gauge"))
    return out


def test_metric_names_file_matches_usage():
    listed = read_name_list(METRIC_NAMES_FILE)
    assert len(listed) == len(set(listed)), "duplicate names"
    used = all_used_names().metrics
    assert used - set(listed) == set(), "used but not listed in collector/metric_names.txt"
    assert set(listed) - used == set(), "listed in collector/metric_names.txt but not used"


def test_metric_names_come_from_otel_verl_instruments():
    listed = set(read_name_list(METRIC_NAMES_FILE)) - PROMETHEUS_INTERNAL
    unknown = listed - translated_names()
    assert unknown == set(), f"not produced by any otel-verl instrument: {unknown}"


def _template_labels(text: str) -> set[str]:
    return set(re.findall(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)", text)) | set(
        re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", text)
    )


def test_label_names_file_matches_usage():
    listed = read_name_list(LABEL_NAMES_FILE)
    assert len(listed) == len(set(listed))
    used = set(all_used_names().labels)
    for path in RULE_FILES:
        for group in load_yaml(path)["groups"]:
            for rule in group["rules"]:
                used |= set((rule.get("labels") or {}).keys())
                for text in (rule.get("annotations") or {}).values():
                    used |= _template_labels(text)
    for path in DASHBOARD_FILES:
        dash = load_json(path)
        for panel in dashboard_panels(dash):
            for t in panel.get("targets", []):
                used |= _template_labels(t.get("legendFormat", ""))
        for ann in dash["annotations"]["list"]:
            for key in ("titleFormat", "textFormat"):
                used |= _template_labels(ann.get(key, ""))
            used |= {k.strip() for k in ann.get("tagKeys", "").split(",") if k.strip()}
    assert used - set(listed) == set(), "used but not listed in collector/label_names.txt"
    assert set(listed) - used == set(), "listed in collector/label_names.txt but not used"


def test_promoted_labels_match_prometheus_config():
    from support.opskit import PROM_CONFIG

    promoted = {re.sub(r"[^A-Za-z0-9_]", "_", a) for a in load_yaml(PROM_CONFIG)["otlp"]["promote_resource_attributes"]}
    listed = set(read_name_list(LABEL_NAMES_FILE))
    run_labels = {"verl_run_id", "verl_experiment", "verl_project"}
    assert run_labels <= promoted and run_labels <= listed


def test_the_kit_promotes_the_identity_the_points_carry():
    """The kit's promoted resource attributes are the series identity otel-verl puts on every metric
    point (semconv.RES_SERIES_IDENTITY): the labels are the same whichever makes them."""
    from support.opskit import PROM_CONFIG

    from otel_verl import semconv

    promoted = load_yaml(PROM_CONFIG)["otlp"]["promote_resource_attributes"]
    assert sorted(promoted) == sorted(semconv.RES_SERIES_IDENTITY)
    # every resource-identity label a query uses is one of them
    identity_labels = {re.sub(r"[^A-Za-z0-9_]", "_", a) for a in semconv.RES_SERIES_IDENTITY}
    used = set(all_used_names().labels)
    assert {"verl_run_id", "verl_experiment", "verl_project", "verl_rank", "host_name"} <= used & identity_labels


def test_extractor_on_known_expressions():
    n = promql_names(
        'sum by (le, verl_stage) (rate(verl_stage_duration_seconds_bucket{verl_run_id=~"$run"}[$__rate_interval]))'
        ' / on () group_left () sum(increase(foo_total[5m] offset 10m)) > bool 2 and bar unless baz{a="}"}'
    )
    assert n.metrics == {"verl_stage_duration_seconds_bucket", "foo_total", "bar", "baz"}
    assert n.labels == {"le", "verl_stage", "verl_run_id", "a"}
    n = promql_names('label_replace({__name__=~"a_b|c_d"}, "m", "$1", "__name__", "(.+)") * 0 != 0')
    assert n.metrics == {"a_b", "c_d"}
    with pytest.raises(ValueError):
        promql_names('{__name__=~"verl_.*"}')
