"""``SelfMetrics``: observable instruments of otel-verl's own counts, added to each meter once.

otel-verl keeps some counts of itself in the process (what its queues dropped, ``drops``;
its own CPU, ``process.overhead``; what the on-disk spool did, ``spool.stats``) and reports them
with observable instruments read at every collection. The pipeline's build and a worker's first
hook may both ask for them on the same meter: each meter gets them once. Adding them never
raises (a self-metric must never break a process): a failure is said once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from otel_verl._safe import warn_once
from otel_verl.instruments import catalog

Callback = Callable[[CallbackOptions], Iterable[Observation]]


class SelfMetrics:
    """Observable instruments (``catalog`` specs, each with its callback) for ``register``."""

    def __init__(self, *instruments: tuple[catalog.InstrumentSpec, Callback]) -> None:
        self._instruments = instruments
        self._lock = threading.Lock()
        self._meters: set[int] = set()  # id() of meters that have them

    def register(self, meter: Any) -> bool:
        """Add the instruments to ``meter`` once; False when they were there already or could not be added."""
        try:
            with self._lock:
                if id(meter) in self._meters:
                    return False
                self._meters.add(id(meter))
            for spec, callback in self._instruments:
                catalog.create_observable(meter, spec, [callback])
            return True
        except Exception:  # noqa: BLE001 - a self-metric must never break a process
            name = self._instruments[0][0].name
            warn_once(f"self-metric {name}", "%s could not be registered", name, exc_info=True)
            return False
