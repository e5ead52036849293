"""The rollout engine's own Prometheus metrics, bridged into this process's OTLP pipeline, per replica.

vLLM and SGLang keep their metrics (``vllm:kv_cache_usage_perc``, ``vllm:num_requests_waiting``,
``vllm:time_to_first_token_seconds``, ``vllm:num_preemptions``; ``sglang:token_usage``,
``sglang:num_queue_reqs``, ...) in ``prometheus_client``'s registry of the process that runs the
engine's front end: verl's rollout server actor. They are labelled by model and engine index,
not by replica, and nothing exports them unless something scrapes that process. Here each family
becomes an observable instrument of this process's meter, read from the registry at every export
(the server exports when it goes idle), with the engine's labels, ``verl.rollout.replica`` and the
run's resource:

* a counter ``vllm:x`` (series ``vllm:x_total``) -> observable counter ``vllm.x``;
* a gauge ``vllm:x`` -> observable gauge ``vllm.x``;
* a histogram ``vllm:x`` -> a histogram ``vllm.x``: the engine's own bounds and counts, exactly as
  it counted them. No instrument takes pre-aggregated buckets and the Python SDK has no
  MetricProducer (the specification's bridge), so otel-verl's readers add these points to each
  collected batch themselves (``add_histograms``, registered with ``process.step_reader.add_producer``
  when a bridge is made: the step reader of every push exporter, and the Prometheus pull reader),
  cumulative, or as differences for a reader that prefers delta.
  Replaying each observation into an SDK histogram would cost a record per observation, and
  vLLM's ``inter_token_latency_seconds`` observes every generated token.

In Prometheus (OTLP translation) these are the engine's usual names with ``:`` as ``_``:
``vllm_kv_cache_usage_perc``, ``vllm_num_preemptions_total``,
``vllm_time_to_first_token_seconds_bucket{le=...}`` (and ``_sum``, ``_count``), so dashboards
written for vLLM's own ``/metrics`` work on them by that one substitution.

The registry is read once per collection (one snapshot shared by the instruments); families are
found when the engine has started and again at most every ``DISCOVER_EVERY_S`` (an engine may
register some late). What it reads is bounded: ``MAX_FAMILIES`` families, ``MAX_SERIES`` series
per family, ``MAX_LABELS`` labels per series, label values cut to ``MAX_LABEL_CHARS``.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterable
from typing import Any

from otel_verl import per_process, semconv
from otel_verl._safe import safe
from otel_verl.process import step_reader

PREFIXES = ("vllm:", "sglang:")
KINDS = ("counter", "gauge", "histogram")
MAX_FAMILIES = 256
MAX_SERIES = 512
MAX_LABELS = 16
MAX_LABEL_CHARS = 256
MAX_BUCKETS = 64  # bounds of one histogram series
SNAPSHOT_TTL_S = 1.0  # one registry read serves every instrument of one collection
DISCOVER_EVERY_S = 60.0
_NAME = re.compile(r"[a-z][a-z0-9_]{0,120}:[a-zA-Z_][a-zA-Z0-9_:]{0,200}")


def otel_name(family: str) -> str:
    """``vllm:num_requests_waiting`` -> ``vllm.num_requests_waiting``."""
    return family.replace(":", ".")


def _attributes(labels: dict[str, str], replica: int | None) -> dict[str, Any] | None:
    if len(labels) > MAX_LABELS:
        return None
    attrs: dict[str, Any] = {str(k)[:MAX_LABEL_CHARS]: str(v)[:MAX_LABEL_CHARS] for k, v in labels.items()}
    if replica is not None:
        attrs[semconv.ATTR_ROLLOUT_REPLICA] = replica
    return attrs


Key = tuple[tuple[str, str], ...]  # a series: its labels without ``le``


def _histogram_series(family: Any) -> dict[Key, tuple[list[float], list[int], float, float | None]]:
    """Per series of a histogram family: (finite bounds, per-bucket counts (the last ``+Inf``'s),
    sum, ``_created`` seconds or None); a series whose samples do not make a histogram is left out."""
    buckets: dict[Key, dict[float, float]] = {}
    sums: dict[Key, float] = {}
    created: dict[Key, float] = {}
    for sample in getattr(family, "samples", ()):
        value = sample.value
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        labels = dict(sample.labels)
        key = tuple(sorted((str(k), str(v)) for k, v in labels.items() if k != "le"))
        if sample.name.endswith("_bucket"):
            try:
                le = float(labels.get("le", "nan"))
            except ValueError:
                continue
            if math.isnan(le):
                continue
            if len(buckets) < MAX_SERIES or key in buckets:
                buckets.setdefault(key, {})[le] = float(value)
        elif sample.name.endswith("_sum"):
            sums[key] = float(value)
        elif sample.name.endswith("_created"):
            created[key] = float(value)
    out = {}
    for key, by_le in buckets.items():
        les = sorted(by_le)
        if key not in sums or not les or les[-1] != math.inf or len(les) > MAX_BUCKETS + 1:
            continue
        running = [by_le[le] for le in les]
        if any(b < a for a, b in zip(running, running[1:], strict=False)) or running[0] < 0:
            continue
        counts = [int(b - a) for a, b in zip([0.0, *running[:-1]], running, strict=True)]
        out[key] = (les[:-1], counts, sums[key], created.get(key))
    return out


class Bridge:
    """The engine families of ``registry`` (``prometheus_client.REGISTRY``) as instruments of ``meter``."""

    def __init__(self, meter: Any, registry: Any, replica: int | None, clock: Any = time.monotonic) -> None:
        self._meter = meter
        self._registry = registry
        self.replica = replica
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot: dict[str, Any] = {}
        self._taken = -math.inf
        self._discovered = -math.inf
        self.families: dict[str, str] = {}  # family name -> kind, for those with instruments
        self._docs: dict[str, str] = {}  # histogram family -> its description
        self._start_ns = time.time_ns()  # a series' start when the engine gives none (``_created``)
        step_reader.add_producer(add_histograms)  # the process's readers add its histograms (once)

    def _families(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for family in self._registry.collect():
            name = getattr(family, "name", "")
            if not isinstance(name, str) or not name.startswith(PREFIXES) or _NAME.fullmatch(name) is None:
                continue
            if getattr(family, "type", None) in KINDS and len(out) < MAX_FAMILIES:
                out[name] = family
        return out

    def snapshot(self) -> dict[str, Any]:
        """The engine's families as of this collection (read at most once per ``SNAPSHOT_TTL_S``)."""
        with self._lock:
            now = self._clock()
            if now - self._taken >= SNAPSHOT_TTL_S:
                self._snapshot = self._families()
                self._taken = now
            return self._snapshot

    def discover(self, force: bool = False) -> None:
        """Instruments for the engine families not bridged yet."""
        now = self._clock()
        if not force and now - self._discovered < DISCOVER_EVERY_S:
            return
        self._discovered = now
        for name, family in self._families().items():
            if name not in self.families and len(self.families) < MAX_FAMILIES:
                self._instrument(name, family.type, str(getattr(family, "documentation", ""))[:200])
                self.families[name] = family.type

    def _instrument(self, name: str, kind: str, doc: str) -> None:
        base = otel_name(name)
        if kind == "counter":
            self._meter.create_observable_counter(base, callbacks=[self._reader(name, ("_total",))], description=doc)
        elif kind == "gauge":
            self._meter.create_observable_gauge(base, callbacks=[self._reader(name, ("",))], description=doc)
        else:  # no instrument: the readers add its points (``add_histograms``)
            self._docs[name] = doc

    def _reader(self, family: str, suffixes: tuple[str, ...]) -> Any:
        names = {family + s for s in suffixes}

        def observe(options: Any) -> Iterable[Any]:
            return self.observations(family, names)

        return observe

    def observations(self, family: str, sample_names: set[str]) -> list[Any]:
        from opentelemetry.metrics import Observation

        found = self.snapshot().get(family)
        out: list[Any] = []
        for sample in getattr(found, "samples", ()) if found is not None else ():
            if sample.name not in sample_names or len(out) >= MAX_SERIES:
                continue
            value = sample.value
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            attrs = _attributes(dict(sample.labels), self.replica)
            if attrs is not None:
                out.append(Observation(value, attrs))
        return out

    def histogram_metrics(self) -> list[Any]:
        """The engine's histogram families as cumulative histogram metrics, as the engine counts now."""
        from opentelemetry.sdk.metrics.export import AggregationTemporality, Histogram, HistogramDataPoint, Metric

        now = time.time_ns()
        snapshot = self.snapshot()
        out = []
        for name, doc in list(self._docs.items()):
            family = snapshot.get(name)
            points = []
            for key, (bounds, counts, total, created) in (_histogram_series(family) if family else {}).items():
                attrs = _attributes(dict(key), self.replica)
                if attrs is None:
                    continue
                start = int(created * 1e9) if created is not None and 0 < created * 1e9 <= now else self._start_ns
                points.append(
                    HistogramDataPoint(attrs, min(start, now), now, sum(counts), total, counts, bounds, None, None)
                )
            if points:
                data = Histogram(points, AggregationTemporality.CUMULATIVE)
                out.append(Metric(otel_name(name), doc, "", data))
        return out


def _as_delta(metrics: list[Any], last: dict[Any, Any]) -> list[Any]:
    """``metrics`` as differences from what ``last`` (one reader's state, updated) saw of each series;
    all of a series the first time and after an engine restart (its counts dropped)."""
    from dataclasses import replace

    from opentelemetry.sdk.metrics.export import AggregationTemporality, Histogram

    out = []
    for metric in metrics:
        points = []
        for p in metric.data.data_points:
            key = (metric.name, frozenset(p.attributes.items()))
            before = last.get(key)
            last[key] = p
            if before is not None and all(b >= a for a, b in zip(before.bucket_counts, p.bucket_counts, strict=False)):
                counts = [b - a for a, b in zip(before.bucket_counts, p.bucket_counts, strict=True)]
                p = replace(
                    p,
                    start_time_unix_nano=before.time_unix_nano,
                    count=sum(counts),
                    sum=p.sum - before.sum,
                    bucket_counts=counts,
                )
            points.append(p)
        out.append(replace(metric, data=Histogram(points, AggregationTemporality.DELTA)))
    return out


def add_histograms(batch: Any, delta: dict[Any, Any] | None = None) -> Any:
    """``batch`` (a collected ``MetricsData``) with this process's engine histograms added to its
    resource's points: cumulative, or differences from ``delta`` (a reader's own state) when given."""
    bridge = _STATE.bridge
    if bridge is None or batch is None or not batch.resource_metrics:
        return batch
    metrics = bridge.histogram_metrics()
    if not metrics:
        return batch
    if delta is not None:
        metrics = _as_delta(metrics, delta)
    from dataclasses import replace

    from opentelemetry.sdk.metrics.export import MetricsData, ScopeMetrics
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from otel_verl.version import __version__

    first, *rest = batch.resource_metrics
    scope = ScopeMetrics(InstrumentationScope(semconv.SCOPE, __version__), metrics, "")
    return MetricsData([replace(first, scope_metrics=[*first.scope_metrics, scope]), *rest])


class _State:
    bridge: Bridge | None = None


_STATE = _State()


@safe("engine metrics")
def bridge(meter: Any, replica: int | None) -> Bridge | None:
    """Bridge this process's engine metrics into ``meter`` (once; later calls look for new families).
    The caller passes the process's meter: instruments never import the process state."""
    if _STATE.bridge is None:
        try:
            import prometheus_client
        except ImportError:
            return None  # an engine without prometheus_client has no metrics to bridge
        _STATE.bridge = Bridge(meter, prometheus_client.REGISTRY, replica)
        _STATE.bridge.discover(force=True)
    else:
        if _STATE.bridge.replica is None:
            _STATE.bridge.replica = replica  # the server's own rank, where the engine start had none
        _STATE.bridge.discover()
    return _STATE.bridge


def reset() -> None:
    """Forget the bridge (tests)."""
    _STATE.bridge = None


per_process.register(__name__, reset=reset)
