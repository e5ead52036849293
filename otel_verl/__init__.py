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

User code in any verl process (reward functions, agent loops, tools) can use the plain
OpenTelemetry API: otel-verl installs its pipeline as the global providers there. The current
training step for such code: ``otel_verl.current_step()`` / ``otel_verl.step_attributes()``.

Configuration: the standard ``OTEL_*`` variables, plus the ``OTEL_VERL_*`` ones listed in
``otel_verl.config``. Names of everything emitted: ``otel_verl.semconv``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from otel_verl.version import __version__

if TYPE_CHECKING:
    from otel_verl.instrumentor import VerlInstrumentor
    from otel_verl.step_context import current_epoch, current_step, step_attributes

__all__ = ["VerlInstrumentor", "__version__", "current_epoch", "current_step", "step_attributes"]

# Loaded on first use: ``opentelemetry-instrument`` imports this package in every process of a
# job (Ray's daemons too), which should not pay for the OpenTelemetry API's baggage and friends.
_LAZY = {
    "VerlInstrumentor": "otel_verl.instrumentor",
    "current_epoch": "otel_verl.step_context",
    "current_step": "otel_verl.step_context",
    "step_attributes": "otel_verl.step_context",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
