"""Per-process state shared by the hooks: who this process is and its telemetry.

Telemetry is built on first use, so the identity hooks learn first (the trainer's
project/experiment in the TaskRunner, the rank in a worker) ends up in the resource.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import SpanContext

from otel_verl.pipeline import Identity, Telemetry, build_own


class Runtime:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.identity = Identity()
        self._telemetry: Telemetry | None = None
        self._given: tuple[Any, Any] | None = None
        self._trainer: weakref.ReferenceType[Any] | None = None
        # (id of the step's timing dict, the step span's context): stages verl times outside
        # the ``step`` timer (``testing``) join that step's trace.
        self.last_step: tuple[int, SpanContext] | None = None
        self._metrics: Any = None

    # -- configuration -------------------------------------------------------------
    def use_providers(self, tracer_provider: Any, meter_provider: Any) -> None:
        """Providers passed to ``instrument()``; either may be None (then the global one)."""
        with self._lock:
            self._given = (tracer_provider, meter_provider)
            self._telemetry = None
            self._metrics = None

    def identify(self, **fields: Any) -> None:
        """Record who this process is; only effective before telemetry is first used."""
        with self._lock:
            for key, value in fields.items():
                if value is not None:
                    setattr(self.identity, key, value)

    # -- access --------------------------------------------------------------------
    @property
    def telemetry(self) -> Telemetry:
        tel = self._telemetry
        if tel is None:
            with self._lock:
                if self._telemetry is None:
                    if self._given is not None:
                        tp, mp = self._given
                        self._telemetry = Telemetry(
                            tp or trace.get_tracer_provider(), mp or metrics.get_meter_provider()
                        )
                    else:
                        self._telemetry = build_own(self.identity)
                tel = self._telemetry
        return tel

    @property
    def metrics(self) -> Any:
        if self._metrics is None:
            from otel_verl.metrics import TrainingMetrics

            with self._lock:
                if self._metrics is None:
                    self._metrics = TrainingMetrics(self.telemetry.meter)
        return self._metrics

    @property
    def trainer(self) -> Any:
        return self._trainer() if self._trainer is not None else None

    @trainer.setter
    def trainer(self, value: Any) -> None:
        self._trainer = weakref.ref(value) if value is not None else None


RUNTIME = Runtime()
