"""``SelfMetrics``: observable instruments of otel-verl's own counts, added to each meter once.

otel-verl keeps some counts of itself in the process (what its queues dropped, ``drops``;
its own CPU, ``process.overhead``; what the on-disk spool did, ``spool.stats``) and reports them
with observable instruments read at every collection. The pipeline's build and a worker's first
hook may both ask for them on the same meter: each meter gets them once. Adding them never
raises (a self-metric must never break a process): a failure is said once.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from otel_verl._safe import warn_once
from otel_verl.instruments import catalog

Callback = Callable[[CallbackOptions], Iterable[Observation]]


class Meters:
    """The meters something was done to, each remembered as long as it lives (by weak reference:
    an ``id()`` of a freed meter can be the next meter's, which would then be skipped)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: weakref.WeakSet[Any] = weakref.WeakSet()
        self._kept: list[Any] = []  # a meter without weak references: kept alive, so never confused

    def first(self, meter: Any) -> bool:
        """Remember ``meter``; whether it is the first time."""
        with self._lock:
            try:
                if meter in self._live:
                    return False
                self._live.add(meter)
            except TypeError:
                if any(m is meter for m in self._kept):
                    return False
                self._kept.append(meter)
            return True

    def clear(self) -> None:
        """Remember none (a process that just started)."""
        with self._lock:
            self._live = weakref.WeakSet()
            self._kept = []


class SelfMetrics:
    """Observable instruments (``catalog`` specs, each with its callback) for ``register``."""

    def __init__(self, *instruments: tuple[catalog.InstrumentSpec, Callback]) -> None:
        self._instruments = instruments
        self._meters = Meters()  # the meters that have them

    def register(self, meter: Any) -> bool:
        """Add the instruments to ``meter`` once; False when they were there already or could not be added."""
        try:
            if not self._meters.first(meter):
                return False
            for spec, callback in self._instruments:
                catalog.create_observable(meter, spec, [callback])
            return True
        except Exception:  # noqa: BLE001 - a self-metric must never break a process
            name = self._instruments[0][0].name
            warn_once(f"self-metric {name}", "%s could not be registered", name, exc_info=True)
            return False
