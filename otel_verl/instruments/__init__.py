"""Instruments: defined once (``catalog``), built once per process (``Instruments``).

* ``catalog``: every named instrument (name, kind, unit, buckets, description);
* ``training``: what ``Tracking.log`` values become (TaskRunner); ``goodput``: a step's seconds per
  role in productive / overhead / idle / wasted, from its time categories and verl's drops;
* ``rollout``: trajectory / LLM-call histograms and the tail ratio (agent-loop workers);
* ``gpu``: ``hw.gpu.*`` observable gauges from NVML or torch (worker ranks);
* ``system``: ``process.*`` through the system-metrics instrumentation (every verl process);
* ``prometheus``: the series names those become in Prometheus 3;
* ``self_metrics``: otel-verl's own counts as observable instruments, added to each meter once;
* ``drops``: what otel-verl's bounded queues and spool dropped, ``otel_verl.telemetry.dropped``.
"""

from __future__ import annotations

from opentelemetry.metrics import Meter

from otel_verl.instruments.rollout import RolloutMetrics
from otel_verl.instruments.training import TrainingMetrics


class Instruments:
    """A process's synchronous instruments on its meter (``PROCESS.instruments``)."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.training = TrainingMetrics(meter)
        self.rollout = RolloutMetrics(meter)
