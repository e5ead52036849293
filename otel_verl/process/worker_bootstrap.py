"""OpenTelemetry's auto-instrumentation in a verl job's Ray workers, minus the SDK configurator.

``opentelemetry-instrument`` runs its bootstrap in every process that has its ``sitecustomize`` on
``PYTHONPATH``: the distro (``opentelemetry-distro`` sets the exporter defaults), then the first
``opentelemetry_configurator`` entry point (the distro's: it builds a TracerProvider, MeterProvider
and LoggerProvider with periodic export and makes them global), then every installed
instrumentation. In a verl process that configurator's pipeline would be a second one, made at
interpreter start, before anyone knows which process this is: its resource has no run id, role or
rank, and the global providers it sets keep user code (reward functions, agent loops, tools) and
the other instrumentations off otel-verl's pipeline.

So the job's workers get this module's ``sitecustomize`` instead (``hooks.ray_launch``): the same
bootstrap with the configurator left out, through its own switch ``OTEL_PYTHON_CONFIGURATOR``,
named for no configurator. The distro and every instrumentation load as usual; otel-verl builds
each verl process's pipeline from the same ``OTEL_*`` environment once it knows who the process is
and installs it as the global providers (``global_providers``). A configurator the user chose by
name (``OTEL_PYTHON_CONFIGURATOR`` set) still runs: otel-verl then leaves its providers and says so.
"""

from __future__ import annotations

import logging
import os

CONFIGURATOR_VAR = "OTEL_PYTHON_CONFIGURATOR"
NO_CONFIGURATOR = "otel-verl:none"  # no entry point has this name
SITE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_worker_site")
# The loader says, for every configurator it skips, that OTEL_PYTHON_CONFIGURATOR named another
# (opentelemetry/instrumentation/auto_instrumentation/_load.py): expected here, so not shown.
_LOADER_LOGGER = "opentelemetry.instrumentation.auto_instrumentation._load"


class _SkippedByUs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (len(args) == 3 and args[1] == NO_CONFIGURATOR and args[2] == CONFIGURATOR_VAR)


def initialize() -> None:
    """Run OpenTelemetry's auto-instrumentation here, without a configurator unless one was named."""
    ours = not os.environ.get(CONFIGURATOR_VAR)
    quiet = _SkippedByUs()
    loader_log = logging.getLogger(_LOADER_LOGGER)
    if ours:
        os.environ[CONFIGURATOR_VAR] = NO_CONFIGURATOR
        loader_log.addFilter(quiet)
    try:
        from opentelemetry.instrumentation.auto_instrumentation import initialize as otel_initialize

        otel_initialize()
    except Exception:  # noqa: BLE001 - never stop a Ray worker from starting
        logging.getLogger("otel_verl").warning("otel-verl: OpenTelemetry's auto-instrumentation failed", exc_info=True)
    finally:
        if ours:
            os.environ.pop(CONFIGURATOR_VAR, None)
            loader_log.removeFilter(quiet)
