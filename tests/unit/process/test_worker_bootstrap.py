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


# An instrumentation that starts a Python process while the bootstrap runs (as one that probes a
# tool might), found through its entry point like any other.
SPAWNER = """
import os, subprocess, sys
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

class Spawner(BaseInstrumentor):
    def instrumentation_dependencies(self):
        return []

    def _instrument(self, **kwargs):
        with open(os.environ["PROBE_LOG"], "a") as log:
            log.write(f"bootstrap {os.getpid()}\\n")
        if not os.environ.get("PROBE_CHILD"):  # bounded here; without the guard it would not be
            subprocess.run([sys.executable, "-c", "pass"], env={**os.environ, "PROBE_CHILD": "1"}, check=True)

    def _uninstrument(self, **kwargs):
        pass
"""
USER_SITE = """
import os, sys
with open(os.environ["PROBE_LOG"], "a") as log:
    log.write(f"user {os.getpid()} {sys.modules['sitecustomize'].__file__}\\n")
"""


def _site_run(tmp_path, *python_path: str) -> list[list[str]]:
    plugin, user = tmp_path / "plugin", tmp_path / "user"
    (plugin / "spawner-1.0.dist-info").mkdir(parents=True)
    (plugin / "spawner-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: spawner\nVersion: 1.0\n")
    (plugin / "spawner-1.0.dist-info" / "entry_points.txt").write_text(
        "[opentelemetry_instrumentor]\nspawner = probe_spawner:Spawner\n"
    )
    (plugin / "probe_spawner.py").write_text(SPAWNER)
    user.mkdir()
    (user / "sitecustomize.py").write_text(USER_SITE)
    log = tmp_path / "log"
    log.touch()
    _start(
        os.pathsep.join([*python_path, str(user), str(plugin)]),
        PROBE_LOG=str(log),
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="verl",  # the bootstrap alone
    )
    return [line.split() for line in log.read_text().splitlines()]


def test_the_bootstrap_runs_once_and_the_users_own_sitecustomize_once_per_process(tmp_path):
    lines = _site_run(tmp_path, SITE_DIR)
    bootstraps = [pid for kind, pid, *_ in lines if kind == "bootstrap"]
    users = [(pid, where) for kind, pid, where in (line for line in lines if line[0] == "user")]
    assert len(bootstraps) == 1, lines  # the child the bootstrap started did not run it again
    # the user's sitecustomize ran in the worker (after the bootstrap) and in that child, once each,
    # and is what `import sitecustomize` gives there, as without this folder
    assert sorted(pid for pid, _ in users) == sorted({pid for pid, _ in users}) and len(users) == 2, lines
    assert bootstraps[0] in [pid for pid, _ in users]
    assert {where for _, where in users} == {str(tmp_path / "user" / "sitecustomize.py")}


def test_a_second_copy_of_the_folder_on_the_path_is_not_run_as_the_next_sitecustomize(tmp_path):
    copy = tmp_path / "elsewhere" / "_worker_site"
    copy.parent.mkdir()
    copy.symlink_to(SITE_DIR)
    lines = _site_run(tmp_path, SITE_DIR, SITE_DIR, str(copy))
    assert [line[0] for line in lines].count("bootstrap") == 1, lines
    assert [line[0] for line in lines].count("user") == 2, lines
