"""OpenTelemetry's declarative configuration (``OTEL_CONFIG_FILE``) and otel-verl.

When ``OTEL_CONFIG_FILE`` is set, the SDK's configurator (the one ``opentelemetry-instrument``
runs through ``opentelemetry-distro``) builds the global providers from that file alone and
ignores the ``OTEL_*`` variables; without the ``opentelemetry-configuration`` package it raises
instead, and OpenTelemetry's bootstrap then loads no instrumentation at all (it logs the
traceback and goes on): otel-verl's instrumentor among them, so the job ran uninstrumented.

otel-verl does not read the file: every verl process builds its own pipeline (its identity on the
resource, the step metric reader, the spool) from the ``OTEL_*`` variables, in the launcher and in
the Ray workers alike (whose bootstrap runs no configurator, ``process.worker_bootstrap``).
So with the file set:

* the job is instrumented all the same: where the bootstrap failed on the file, verl's
  ``verl.plugins`` entry point starts the instrumentor when ``import verl`` runs
  (:func:`bootstrap_failed_on_it`);
* the launcher says once what that means (:func:`warn_if_set`): verl's telemetry goes where the
  ``OTEL_*`` variables say, the file's exporters, processors, sampler and resource do not apply
  to it, and where the bootstrap failed, the other instrumentations are not loaded in that
  process. The Ray workers, which inherit the variable, say nothing more.
"""

from __future__ import annotations

import importlib.util
import os

from otel_verl.config import CONFIG_FILE

# opentelemetry-instrument's sitecustomize folder, on PYTHONPATH of every process it starts
_BOOTSTRAP_FOLDER = os.path.join("instrumentation", "auto_instrumentation")


def is_set() -> bool:
    return bool(os.environ.get(CONFIG_FILE, "").strip())


def _reader_installed() -> bool:
    """Whether the SDK's configurator can read the file (``opentelemetry-configuration``)."""
    try:
        return importlib.util.find_spec("opentelemetry.configuration") is not None
    except (ImportError, ValueError):
        return False


def bootstrap_failed_on_it() -> bool:
    """Whether this process was started by ``opentelemetry-instrument`` with ``OTEL_CONFIG_FILE``
    set and no package to read it: its bootstrap then raised in the configurator and loaded no
    instrumentor."""
    if not is_set() or _reader_installed():
        return False
    path = os.environ.get("PYTHONPATH", "")
    return any(entry.rstrip(os.sep).endswith(_BOOTSTRAP_FOLDER) for entry in path.split(os.pathsep))


def warn_if_set() -> None:
    """One warning, in the process that starts the run, when ``OTEL_CONFIG_FILE`` is set."""
    if not is_set():
        return
    from otel_verl._safe import warn_once

    failed = (
        " OpenTelemetry's own start-up failed on it (opentelemetry-configuration is not installed),"
        " so no other instrumentation is loaded in this process; otel-verl started from verl's plugin."
        if bootstrap_failed_on_it()
        else " The file still builds this process's global providers, for the other instrumentations here."
    )
    warn_once(
        "declarative configuration",
        "%s is set: otel-verl does not read it. verl's traces, metrics and logs go where the OTEL_*"
        " variables say (exporters, endpoint, protocol, headers, temporality), in this process and in"
        " every Ray worker; the file's exporters, processors, sampler and resource do not apply to them.%s",
        CONFIG_FILE,
        failed,
    )
