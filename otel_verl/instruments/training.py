"""Training metrics: every value verl logs, plus the named RL signals users alert on.

Every numeric value passed to verl's ``Tracking.log(data, step)`` becomes a gauge named by
``semconv.metric_name`` (``actor/kl_loss`` -> ``verl.actor.kl_loss``). Non-numeric values
are skipped. NaN and inf are never turned into 0: the OpenTelemetry SDK refuses non-finite
measurements, so such a value is not recorded on its gauge (which keeps its previous value)
and is counted instead in ``verl.training.nonfinite`` with the offending key as attribute,
which the "NaN in training" alert watches. The named instruments: ``catalog``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import Meter
from opentelemetry.trace import SpanContext

from otel_verl import semconv
from otel_verl._safe import safe
from otel_verl._values import as_float
from otel_verl.instruments import catalog, goodput

_UNSET = object()  # a key whose route is not worked out yet


def _span_context(span: SpanContext | None) -> otel_context.Context:
    """A context whose current span is ``span`` (an exemplar's link); empty without one."""
    if span is None or not span.is_valid:
        return otel_context.Context()
    return trace.set_span_in_context(trace.NonRecordingSpan(span), otel_context.Context())


def _mismatch_instruments(meter: Meter) -> dict[str, tuple[Any, dict[str, str]]]:
    """verl key -> (named instrument, attributes) of the rollout/training mismatch and staleness keys."""
    diff = catalog.create(meter, catalog.ROLLOUT_PROBS_DIFF)
    mismatch = catalog.create(meter, catalog.ROLLOUT_MISMATCH)
    staleness = catalog.create(meter, catalog.OFF_POLICY_STALENESS)
    out: dict[str, tuple[Any, dict[str, str]]] = {
        semconv.PROBS_CORRELATION_KEY: (catalog.create(meter, catalog.ROLLOUT_PROBS_CORRELATION), {})
    }
    out.update({k: (diff, {semconv.ATTR_STAT: stat}) for k, stat in semconv.PROBS_DIFF_KEYS.items()})
    out.update({k: (mismatch, {semconv.ATTR_MISMATCH_MEASURE: m}) for k, m in semconv.MISMATCH_KEYS.items()})
    out.update(
        {
            k: (staleness, {semconv.ATTR_STALENESS_BOUND: bound, semconv.ATTR_STAT: stat})
            for k, (bound, stat) in semconv.STALENESS_KEYS.items()
        }
    )
    return out


class TrainingMetrics:
    def __init__(self, meter: Meter) -> None:
        self._meter = meter
        self._gauges: dict[str, Any] = {}
        self._routes: dict[str, tuple[Any, dict[str, str] | None, str | None] | None] = {}  # key -> ``_route``
        self.step = catalog.create(meter, catalog.TRAINING_STEP)
        self.steps = catalog.create(meter, catalog.TRAINING_STEPS)
        self.last_step = catalog.create(meter, catalog.LAST_STEP_TIMESTAMP)
        self.stage_duration = catalog.create(meter, catalog.STAGE_DURATION)
        self.kl = catalog.create(meter, catalog.KL)
        self.reward = catalog.create(meter, catalog.REWARD)
        self.throughput = catalog.create(meter, catalog.THROUGHPUT)
        self._mismatch = _mismatch_instruments(meter)
        self.nonfinite = catalog.create(meter, catalog.NONFINITE)
        self.guard_triggered = catalog.create(meter, catalog.GUARD_TRIGGERED)
        self.stalled = catalog.create(meter, catalog.TRAINING_STALLED)
        self.step_time = catalog.create(meter, catalog.STEP_TIME)
        self.idle_ratio = catalog.create(meter, catalog.TRAINER_IDLE_RATIO)
        self.poll_lag = catalog.create(meter, catalog.TRAINER_POLL_LAG)
        self.pool_time = catalog.create(meter, catalog.POOL_TIME)
        self.rollout_idle_ratio = catalog.create(meter, catalog.ROLLOUT_IDLE_RATIO)
        self.goodput = catalog.create(meter, catalog.GOODPUT_TIME)
        self.dropped_groups = catalog.create(meter, catalog.GOODPUT_DROPPED_GROUPS)
        # the last step's categories and batch size, until verl logs the step's values (its drops)
        self._goodput_pending: tuple[dict[str, float], int | None] | None = None

    def _gauge(self, key: str) -> Any:
        gauge = self._gauges.get(key)
        if gauge is None:
            gauge = self._gauges[key] = catalog.create(self._meter, catalog.logged_value(key))
        return gauge

    def record_log(
        self, data: Mapping[str, Any], forward_all: bool = True, stage_spans: Mapping[str, SpanContext] | None = None
    ) -> int:
        """Record one ``Tracking.log`` payload; returns how many values were recorded.

        ``stage_spans``: stage -> the span that timed it in this step; a ``timing_s/<stage>`` value's
        exemplar names that span (none without one: the recording thread's own context is not the
        step's)."""
        if self._goodput_pending is not None:  # the values of the step that just ended
            self._record_goodput(data)
        recorded = 0
        spans = stage_spans or {}
        routes, gauges = self._routes, self._gauges
        for key, raw in data.items():
            value = as_float(raw)
            if value is None or not isinstance(key, str):
                continue
            if not math.isfinite(value):
                self.nonfinite.add(1, {semconv.ATTR_METRIC_KEY: key})
                continue
            if forward_all and key != semconv.STEP_KEY:  # verl.training.step carries it
                gauge = gauges.get(key)
                (gauge if gauge is not None else self._gauge(key)).set(value)
            route = routes.get(key, _UNSET)
            if route is _UNSET:
                route = routes[key] = self._route(key)
            if route is not None:
                instrument, attributes, stage = route
                if stage is None:
                    instrument.set(value, attributes)
                elif value >= 0:
                    # One value per stage and step, exactly what verl reports: cheaper than a record
                    # per stage call on the training thread, and equal to timing_s by construction.
                    instrument.record(value, attributes, context=_span_context(spans.get(stage)))
            recorded += 1
        return recorded

    def _route(self, key: str) -> tuple[Any, dict[str, str] | None, str | None] | None:
        """The named instrument a logged key also goes to: (instrument, attributes, the stage it times
        or None), or None; worked out once per key (``record_log`` sees the same keys every step)."""
        if key in semconv.KL_KEYS:
            return self.kl, {semconv.ATTR_KL_SOURCE: semconv.KL_KEYS[key]}, None
        if key in semconv.REWARD_KEYS:
            return self.reward, {semconv.ATTR_REWARD_SOURCE: semconv.REWARD_KEYS[key]}, None
        if key == semconv.THROUGHPUT_KEY:
            return self.throughput, None, None
        if (named := self._mismatch.get(key)) is not None:
            return named[0], named[1], None
        if (stage := semconv.stage_of(key)) is not None:
            return self.stage_duration, {semconv.ATTR_STAGE: stage}, stage
        return None

    def record_step_end(
        self,
        global_step: int | None,
        ended: float | None = None,
        seconds: Mapping[str, float] | None = None,
        idle_ratio: float | None = None,
        pools: Mapping[tuple[str, str], float] | None = None,
        rollout_idle_ratio: float | None = None,
        poll_lag: float | None = None,
        batch_groups: int | None = None,
    ) -> None:
        """The end of a step; ``seconds`` / ``idle_ratio`` / ``pools`` / ``poll_lag``: where its time
        went (``hooks.accounting``). Its goodput (``instruments.goodput``) is recorded with the step's
        values verl logs next (``record_log``: its dropped groups and aborted samples; ``batch_groups``:
        the prompt groups it trains on)."""
        if self._goodput_pending is not None:  # verl logged nothing after the last step: no drops known
            self._record_goodput({})
        if seconds:
            self._goodput_pending = (dict(seconds), batch_groups)
        for category, value in (seconds or {}).items():
            self.step_time.set(value, {semconv.ATTR_TIME_CATEGORY: category})
        if idle_ratio is not None:
            self.idle_ratio.set(idle_ratio)
        for (role, state), value in (pools or {}).items():
            self.pool_time.set(value, {semconv.ATTR_POOL_ROLE: role, semconv.ATTR_POOL_STATE: state})
        if rollout_idle_ratio is not None:
            self.rollout_idle_ratio.set(rollout_idle_ratio)
        if poll_lag is not None:
            self.poll_lag.set(poll_lag)
        if global_step is not None:
            self.step.set(global_step)
        self.steps.add(1)
        self.last_step.set(time.time() if ended is None else ended)

    @safe("goodput")  # on its own: a failure here must not cost the step's other values
    def _record_goodput(self, data: Mapping[str, Any]) -> None:
        """The pending step's seconds per role and bucket, its drops from verl's values ``data``."""
        pending, self._goodput_pending = self._goodput_pending, None
        if pending is None:
            return
        seconds, batch = pending
        dropped, share = goodput.step_waste(data, batch)
        for (role, bucket), value in goodput.step_goodput(seconds, share).items():
            self.goodput.add(value, {semconv.ATTR_GOODPUT_ROLE: role, semconv.ATTR_GOODPUT_BUCKET: bucket})
        self.dropped_groups.add(dropped)
