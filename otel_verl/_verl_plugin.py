"""verl's ``verl.plugins`` entry point: turn the instrumentation on in every verl process.

verl imports this module wherever ``import verl`` runs: the launcher, the Ray TaskRunner,
worker actors, agent-loop and reward workers. It instruments the process only when the job
was started under otel-verl (``OTEL_VERL_RUN_ID`` is set: the launcher's instrumentor sets
it and hands it to Ray workers), so installing the package alone changes nothing.
It respects ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` and ``OTEL_SDK_DISABLED`` and is a
no-op where ``opentelemetry-instrument`` already instrumented the process.
"""

from __future__ import annotations

import os


def _disabled() -> bool:
    names = {n.strip() for n in os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "").split(",")}
    return bool(names & {"verl", "*"}) or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def _activate() -> None:
    if not os.environ.get("OTEL_VERL_RUN_ID") or _disabled():
        return
    try:
        from otel_verl.instrumentor import VerlInstrumentor

        instrumentor = VerlInstrumentor()
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument(skip_dep_check=True)
    except Exception:  # noqa: BLE001 - never break ``import verl``
        import logging

        logging.getLogger("otel_verl").warning("otel-verl: could not instrument this verl process", exc_info=True)


_activate()
