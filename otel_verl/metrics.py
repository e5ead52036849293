"""RL training metrics: everything verl logs, plus the signals users alert on.

Every numeric value passed to verl's ``Tracking.log(data, step)`` becomes a gauge named by
``semconv.metric_name`` (``actor/kl_loss`` -> ``verl.actor.kl_loss``). Non-numeric values
are skipped. NaN and inf are never turned into 0: the OpenTelemetry SDK refuses non-finite
measurements, so such a value is not recorded on its gauge (which keeps its previous value)
and is counted instead in ``verl.training.nonfinite`` with the offending key as attribute,
which the "NaN in training" alert watches.

Named instruments on top:

==========================================  =========  =========  ==========================
Instrument                                  Type       Unit       Source
==========================================  =========  =========  ==========================
``verl.training.step``                      gauge      {step}     global step just finished
``verl.training.steps``                     counter    {step}     training steps completed
``verl.training.last_step.timestamp``       gauge      s          unix time of the last step
                                                                  end (heartbeat)
``verl.stage.duration``                     histogram  s          every verl timer, attr
                                                                  ``verl.stage``
``verl.training.kl``                        gauge      1          ``actor/kl_loss``,
                                                                  ``actor/ppo_kl``,
                                                                  ``actor/reward_kl_penalty``
                                                                  (attr ``verl.kl.source``)
``verl.training.reward``                    gauge      1          ``critic/score/mean``,
                                                                  ``critic/rewards/mean``
                                                                  (attr ``verl.reward.source``)
``verl.training.throughput``                gauge      {token}/s  ``perf/throughput``
                                                                  (tokens/s per GPU)
``verl.training.nonfinite``                 counter    {value}    NaN/inf values logged
                                                                  (attr ``verl.metric.key``)
==========================================  =========  =========  ==========================
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.metrics import Meter

from otel_verl import semconv

# Seconds, from a 5 ms timer to a multi-hour stage.
DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1000,
    2500,
    5000,
    10000,
)


def as_float(value: Any) -> float | None:
    """The number in ``value`` (Python/numpy scalar, one-element tensor), else None."""
    if isinstance(value, (str, bytes)):
        return None
    # Any failure means "not a number we can record": an int beyond float range
    # (OverflowError), a complex, an object whose ``item()`` raises... must cost only its own key.
    if isinstance(value, numbers.Number):
        try:
            return float(value)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001
            return None
    # numpy arrays and torch tensors holding exactly one number
    try:
        if not callable(getattr(value, "item", None)):
            return None
        numel = getattr(value, "numel", None)
        count = numel() if callable(numel) else getattr(value, "size", None)
        return float(value.item()) if count == 1 else None
    except Exception:  # noqa: BLE001
        return None


class TrainingMetrics:
    def __init__(self, meter: Meter) -> None:
        self._meter = meter
        self._gauges: dict[str, Any] = {}
        self.step = meter.create_gauge(semconv.M_TRAINING_STEP, unit="{step}", description="Global step just finished")
        self.steps = meter.create_counter(
            semconv.M_TRAINING_STEPS, unit="{step}", description="Training steps completed"
        )
        self.last_step = meter.create_gauge(
            semconv.M_LAST_STEP_TIMESTAMP, unit="s", description="Unix time the last training step ended (heartbeat)"
        )
        self.stage_duration = meter.create_histogram(
            semconv.M_STAGE_DURATION,
            unit="s",
            description="Duration of each stage verl times",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        # No unit: Prometheus 3 would name a unit-"1" gauge ``..._ratio``, and neither is a ratio.
        self.kl = meter.create_gauge(semconv.M_KL, description="KL divergence as logged by verl")
        self.reward = meter.create_gauge(semconv.M_REWARD, description="Mean sequence reward of the batch")
        self.throughput = meter.create_gauge(
            semconv.M_THROUGHPUT, unit="{token}/s", description="Tokens per second per GPU (perf/throughput)"
        )
        self.nonfinite = meter.create_counter(
            semconv.M_NONFINITE, unit="{value}", description="NaN or inf values verl logged"
        )

    def _gauge(self, key: str) -> Any:
        gauge = self._gauges.get(key)
        if gauge is None:
            gauge = self._meter.create_gauge(semconv.metric_name(key), description=f"verl logged key {key!r}")
            self._gauges[key] = gauge
        return gauge

    def record_log(self, data: Mapping[str, Any], forward_all: bool = True) -> int:
        """Record one ``Tracking.log`` payload; returns how many values were recorded."""
        recorded = 0
        for key, raw in data.items():
            value = as_float(raw)
            if value is None or not isinstance(key, str):
                continue
            if not math.isfinite(value):
                self.nonfinite.add(1, {semconv.ATTR_METRIC_KEY: key})
                continue
            if forward_all:
                self._gauge(key).set(value)
            if key in semconv.KL_KEYS:
                self.kl.set(value, {semconv.ATTR_KL_SOURCE: semconv.KL_KEYS[key]})
            elif key in semconv.REWARD_KEYS:
                self.reward.set(value, {semconv.ATTR_REWARD_SOURCE: semconv.REWARD_KEYS[key]})
            elif key == semconv.THROUGHPUT_KEY:
                self.throughput.set(value)
            elif key.startswith(semconv.TIMING_PREFIX):
                # One value per stage and step, exactly what verl reports: cheaper than a record
                # per stage call on the training thread, and equal to timing_s by construction.
                self.stage_duration.record(value, {semconv.ATTR_STAGE: key[len(semconv.TIMING_PREFIX) :]})
            recorded += 1
        return recorded

    def record_step_end(self, global_step: int | None, ended: float | None = None) -> None:
        if global_step is not None:
            self.step.set(global_step)
        self.steps.add(1)
        self.last_step.set(time.time() if ended is None else ended)
