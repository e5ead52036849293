"""verl's ``verl.plugins`` entry point: turn the instrumentation on in every verl process.

verl imports this module wherever ``import verl`` runs: the launcher, the Ray TaskRunner,
worker actors, agent-loop and reward workers. It instruments the process only when the job
was started under otel-verl (``OTEL_VERL_RUN_ID`` is set: the launcher's instrumentor sets
it and hands it to Ray workers), so installing the package alone changes nothing; or in a
launcher started by ``opentelemetry-instrument`` whose bootstrap failed on ``OTEL_CONFIG_FILE``
before loading any instrumentor (``declarative_config``).
It obeys the kill switches (``otel_verl.config.disabled_reason``) and is a no-op where
``opentelemetry-instrument`` already instrumented the process.
"""

from __future__ import annotations

import os


def _activate() -> None:
    try:
        from otel_verl import config

        if not os.environ.get(config.RUN_ID):
            from otel_verl import declarative_config

            # a launcher whose OpenTelemetry bootstrap failed on OTEL_CONFIG_FILE: no instrumentor ran
            if not declarative_config.bootstrap_failed_on_it():
                return
        if config.disabled_reason() is not None:
            return
        from otel_verl.instrumentor import VerlInstrumentor

        instrumentor = VerlInstrumentor()
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument(skip_dep_check=True)
    except Exception:  # noqa: BLE001 - never break ``import verl``
        import logging

        logging.getLogger("otel_verl").warning("otel-verl: could not instrument this verl process", exc_info=True)


_activate()
