"""The documentation (README, the ops kit's README, every page of docs/) says the same about what a
user sets, and holds no path of the machine it was written on."""

from __future__ import annotations

import re

import pytest
from support.opskit import COLLECTOR

from otel_verl.process.exporters import PROMETHEUS_DEFAULT_HOST

REPO = COLLECTOR.parent
DOCS = [
    REPO / "README.md",
    COLLECTOR / "README.md",
    REPO / "bench" / "README.md",
    *sorted((REPO / "docs").rglob("*.md")),
]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_machine_specific_absolute_path(doc):
    found = re.findall(r"(?<![\w.:/])/(?:work|home|root|tmp|Users)/[^\s`)]*", doc.read_text())
    assert found == [], found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_prometheus_pull_default_is_the_code_default(doc):
    text = " ".join(doc.read_text().split())
    assert "localhost:9464" not in text


def test_the_pull_default_is_stated_as_the_code_has_it():
    from otel_verl import config

    standard = {d.name: d.default for d in config.STANDARD_VARIABLES}
    assert standard["OTEL_EXPORTER_PROMETHEUS_HOST"] == PROMETHEUS_DEFAULT_HOST
    text = " ".join((REPO / "docs" / "prometheus.md").read_text().split())
    assert f"`{PROMETHEUS_DEFAULT_HOST}:9464`" in text


def test_every_exporter_variable_is_in_the_list_of_standard_variables():
    from otel_verl import config

    standard = {d.name for d in config.STANDARD_VARIABLES}
    for var in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        assert var in standard, var
    text = " ".join((REPO / "docs" / "configuration.md").read_text().split())
    standard_text = text[text.index("The standard variables work as with any OpenTelemetry SDK") :][:900]
    for var in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        assert f"`{var}`" in standard_text, var


@pytest.mark.parametrize("doc", [REPO / "README.md", REPO / "docs" / "multi-node.md", REPO / "docs" / "ops-kit.md"])
def test_multi_node_localhost_is_explained(doc):
    text = " ".join(doc.read_text().split())
    assert "own" in text and re.search(
        r"localhost\W.{0,80}(own node|node's \*own\*|own localhost|each node's own)", text
    ), doc
