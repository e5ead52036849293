"""The ops kit's README and the main README say the same about what a user sets, and hold no path
of the machine they were written on."""

from __future__ import annotations

import re

import pytest
from opskit import COLLECTOR

from otel_verl.process.exporters import PROMETHEUS_DEFAULT_HOST

REPO = COLLECTOR.parent
DOCS = [REPO / "README.md", COLLECTOR / "README.md"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_machine_specific_absolute_path(doc):
    found = re.findall(r"(?<![\w.:/])/(?:work|home|root|tmp|Users)/[^\s`)]*", doc.read_text())
    assert found == [], found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_prometheus_pull_default_is_the_code_default(doc):
    text = " ".join(doc.read_text().split())
    assert f"`{PROMETHEUS_DEFAULT_HOST}:9464`" in text
    assert "localhost:9464" not in text


def test_every_exporter_variable_is_in_the_list_of_standard_variables():
    text = (REPO / "README.md").read_text()
    standard = text[text.index("The standard variables work as with any OpenTelemetry SDK") :][:900]
    for var in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        assert f"`{var}`" in standard, var


def test_multi_node_localhost_is_explained():
    for doc in DOCS:
        text = " ".join(doc.read_text().split())
        assert "own" in text and re.search(r"localhost\W.{0,80}(own node|node's \*own\*|own localhost)", text), doc
