"""The Ray workers' ``sitecustomize`` (``process.worker_bootstrap``): OpenTelemetry's bootstrap with
every instrumentation and no configurator, so that the SDK pipeline there is otel-verl's.

Each case is a fresh interpreter started as Ray starts a job's worker (that folder on
``PYTHONPATH``), with ``opentelemetry-distro`` installed (its configurator would otherwise build
and install providers at start-up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import opentelemetry.distro  # noqa: F401 - the test extra installs it: an ImportError is a regression
import opentelemetry.instrumentation.auto_instrumentation as auto

from otel_verl.process.worker_bootstrap import SITE_DIR

PROBE = """
import json, os, sys
from opentelemetry import metrics, trace
print(json.dumps({
    "tracer_provider": type(trace.get_tracer_provider()).__name__,
    "meter_provider": type(metrics.get_meter_provider()).__name__,
    "run_id": os.environ.get("OTEL_VERL_RUN_ID"),  # set by otel-verl's instrumentor: instrumentors loaded
    "exporter": os.environ.get("OTEL_TRACES_EXPORTER"),
    "sdk_imported": "opentelemetry.sdk" in sys.modules,
    "configurator_var": os.environ.get("OTEL_PYTHON_CONFIGURATOR"),
    "distro_var": os.environ.get("OTEL_PYTHON_DISTRO"),
    "pythonpath": os.environ.get("PYTHONPATH", "").split(os.pathsep),
}))
"""


def _start(site: str, **env: str) -> tuple[dict, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    path = os.pathsep.join(p for p in [site, clean.pop("PYTHONPATH", "")] if p)  # this test's own path after it
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**clean, "PYTHONPATH": path, "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_opentelemetry_instruments_own_site_runs_the_distros_configurator():
    """The control: under ``opentelemetry-instrument``'s own folder the distro builds the providers."""
    seen, _ = _start(os.path.dirname(os.path.abspath(auto.__file__)))
    assert seen["tracer_provider"] == "TracerProvider"
    assert seen["meter_provider"] == "MeterProvider"


def test_the_workers_site_loads_the_instrumentations_but_no_distro_or_configurator():
    seen, stderr = _start(SITE_DIR)
    # no provider built at start-up: otel-verl's pipeline becomes the global one later
    assert seen["tracer_provider"] == "ProxyTracerProvider"
    assert seen["meter_provider"] == "_ProxyMeterProvider"
    assert seen["run_id"]  # the instrumentors ran (otel-verl's among them)
    assert not seen["sdk_imported"]  # nor the distro, which imports it (it ran in the launcher)
    assert seen["exporter"] is None  # its defaults reach workers from the launcher's environment
    assert seen["configurator_var"] is None and seen["distro_var"] is None  # switches for the bootstrap only
    assert seen["pythonpath"][0] == SITE_DIR  # children (a Ray worker's subprocesses) do the same
    assert "not loaded" not in stderr  # the skipped configurator is not announced in every worker


def test_a_distro_and_configurator_the_user_named_still_run():
    seen, _ = _start(SITE_DIR, OTEL_PYTHON_CONFIGURATOR="configurator", OTEL_PYTHON_DISTRO="distro")
    assert seen["tracer_provider"] == "TracerProvider"
    assert seen["configurator_var"] == "configurator"
    assert seen["exporter"] == "otlp"  # the named distro's default
