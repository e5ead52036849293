"""OpenTelemetry auto-instrumentation for verl (RL post-training of LLMs).

Usage
-----
Zero code: put ``opentelemetry-instrument`` in front of your usual command::

    opentelemetry-instrument python -m verl.trainer.main_ppo <your overrides>

Every verl process of the job (the Ray TaskRunner, worker actors, agent-loop and reward
workers) is instrumented: the launcher hands the ``OTEL_*`` settings to Ray and verl's
``verl.plugins`` entry point turns the instrumentation on wherever verl is imported.

Programmatic, like any contrib instrumentation::

    from otel_verl import VerlInstrumentor
    VerlInstrumentor().instrument(tracer_provider=tp, meter_provider=mp)

Configuration: the standard ``OTEL_*`` variables, plus the ``OTEL_VERL_*`` ones listed in
``otel_verl.config``. Names of everything emitted: ``otel_verl.semconv``.
"""

from otel_verl.instrumentor import VerlInstrumentor
from otel_verl.version import __version__

__all__ = ["VerlInstrumentor", "__version__"]
