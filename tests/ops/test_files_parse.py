"""Every YAML and JSON file of the ops kit parses."""

from __future__ import annotations

import json

import pytest
import yaml
from support.opskit import COLLECTOR

FILES = sorted(p for p in COLLECTOR.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json"))


def test_kit_files_found():
    names = {p.relative_to(COLLECTOR).as_posix() for p in FILES}
    expected = {
        "otelcol-config.yaml",
        "compose.yaml",
        "prometheus/prometheus.yml",
        "prometheus/rules/verl-alerts.yaml",
        "prometheus/tests/verl-alerts.test.yaml",
        "alertmanager/alertmanager.yml",
        "grafana/provisioning/datasources/datasources.yaml",
        "grafana/provisioning/dashboards/dashboards.yaml",
        "grafana/dashboards/verl-rl-training.json",
        "tempo/tempo.yaml",
        "loki/loki.yaml",
    }
    assert expected <= names, expected - names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(COLLECTOR).as_posix())
def test_parses(path):
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
    else:
        docs = list(yaml.safe_load_all(text))
        assert len(docs) == 1, "one YAML document per file"
        data = docs[0]
    assert isinstance(data, dict) and data
