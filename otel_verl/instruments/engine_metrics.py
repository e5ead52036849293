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
* a histogram ``vllm:x`` -> a histogram ``vllm.x`` with the engine's own bucket bounds (its ``le``
  labels). No OpenTelemetry instrument takes pre-aggregated buckets (the spec's MetricProducer is
  not in the Python SDK), so at every collection the engine's new observations are replayed into
  it (``Replay``): per series, each bucket's new count as that many values inside the bucket,
  placed so that they add up to the engine's new sum. Bucket counts, count and sum are the
  engine's; only min and max are values of the bounds' buckets, not the engine's.

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

from otel_verl import semconv
from otel_verl._safe import safe, warn_once
from otel_verl.process.state import PROCESS

PREFIXES = ("vllm:", "sglang:")
KINDS = ("counter", "gauge", "histogram")
MAX_FAMILIES = 256
MAX_SERIES = 512
MAX_LABELS = 16
MAX_LABEL_CHARS = 256
MAX_BUCKETS = 64  # bounds of one histogram family
MAX_REPLAYED = 100_000  # values one collection replays into one series (beyond: counts scaled down)
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


def _bounds(family: Any) -> tuple[float, ...] | None:
    """The finite ``le`` bounds of a histogram family's first series, None until it has one."""
    les: list[float] = []
    first: tuple[tuple[str, str], ...] | None = None
    for sample in getattr(family, "samples", ()):
        if not sample.name.endswith("_bucket"):
            continue
        labels = dict(sample.labels)
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        if first is None:
            first = key
        if key != first:
            continue
        try:
            le = float(labels.get("le", "nan"))
        except ValueError:
            return None
        if math.isfinite(le):
            les.append(le)
    if first is None or len(les) > MAX_BUCKETS or les != sorted(set(les)):
        return None
    return tuple(les)


class Replay:
    """One engine histogram family fed into an OpenTelemetry histogram, its new observations at a time."""

    def __init__(self, histogram: Any, bounds: tuple[float, ...]) -> None:
        self.histogram = histogram
        self.bounds = bounds
        self._seen: dict[tuple[tuple[str, str], ...], tuple[list[float], float]] = {}  # series -> (per-bucket, sum)
        self._lock = threading.Lock()  # readers may collect at once: each new observation is replayed once

    def series(self, samples: Iterable[Any]) -> dict[tuple[tuple[str, str], ...], tuple[list[float], float]]:
        """Per series (labels without ``le``): its per-bucket counts (the last one ``+Inf``'s) and sum."""
        cumulative: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
        sums: dict[tuple[tuple[str, str], ...], float] = {}
        for sample in samples:
            labels = dict(sample.labels)
            key = tuple(sorted((str(k), str(v)) for k, v in labels.items() if k != "le"))
            value = sample.value
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                continue
            if sample.name.endswith("_bucket"):
                try:
                    cumulative.setdefault(key, {})[float(labels.get("le", "nan"))] = float(value)
                except ValueError:
                    continue
            elif sample.name.endswith("_sum"):
                sums[key] = float(value)
        out = {}
        for key, by_le in cumulative.items():
            if key not in sums or len(out) >= MAX_SERIES:
                continue
            edges = [*self.bounds, math.inf]
            if set(by_le) != set(edges):
                continue  # other bounds than the family's first series: left out
            running = [by_le[e] for e in edges]
            out[key] = ([b - a for a, b in zip([0.0, *running[:-1]], running, strict=True)], sums[key])
        return out

    def feed(self, samples: Iterable[Any], replica: int | None) -> None:
        """Record what each series counted since the last feed (all of it after an engine restart)."""
        with self._lock:
            for key, (counts, total) in self.series(samples).items():
                self._feed_series(key, counts, total, replica)

    def _feed_series(
        self, key: tuple[tuple[str, str], ...], counts: list[float], total: float, replica: int | None
    ) -> None:
        before = self._seen.get(key)
        if before is None and len(self._seen) >= MAX_SERIES:
            return
        self._seen[key] = (counts, total)
        if before is not None and all(c >= b for c, b in zip(counts, before[0], strict=True)):
            counts = [c - b for c, b in zip(counts, before[0], strict=True)]
            total -= before[1]
        attrs = _attributes(dict(key), replica)
        if attrs is None or not any(counts):
            return
        for value, n in self.values(counts, total):
            for _ in range(n):
                self.histogram.record(value, attrs)

    def values(self, counts: list[float], total: float) -> list[tuple[float, int]]:
        """(value, how many) inside each bucket, adding up to ``total`` where the buckets allow it."""
        bounds = self.bounds
        n = [max(0, int(c)) for c in counts]
        over = sum(n) - MAX_REPLAYED
        if over > 0:  # bounded: the largest buckets give up counts (the sum stays close)
            scale = MAX_REPLAYED / sum(n)
            n = [int(c * scale) for c in n]
        low = [min(0.0, bounds[0]) if bounds else 0.0] + [math.nextafter(b, math.inf) for b in bounds]
        high = [*bounds, low[-1]]  # +Inf: from just above the last bound, the rest of the sum added below
        floor = sum(k * lo for k, lo in zip(n, low, strict=True))
        span = sum(k * (hi - lo) for k, lo, hi in zip(n[:-1], low[:-1], high[:-1], strict=True))
        t = min(1.0, max(0.0, (total - floor) / span)) if span > 0 else 0.0
        out = [(lo + t * (hi - lo), k) for k, lo, hi in zip(n[:-1], low[:-1], high[:-1], strict=True) if k]
        if n[-1]:
            rest = total - floor - t * span  # what the finite buckets could not hold
            out.append((low[-1] + max(0.0, rest) / n[-1], n[-1]))
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
        self._replays: dict[str, Replay] = {}  # histogram family -> its replay
        self._feed: Any = None  # the observable instrument whose callback feeds the replays

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
                if self._instrument(name, family, str(getattr(family, "documentation", ""))[:200]):
                    self.families[name] = family.type

    def _instrument(self, name: str, family: Any, doc: str) -> bool:
        """Instruments for ``family``; False when it cannot have them yet (a histogram without series)."""
        base, kind = otel_name(name), family.type
        if kind == "counter":
            self._meter.create_observable_counter(base, callbacks=[self._reader(name, ("_total",))], description=doc)
        elif kind == "gauge":
            self._meter.create_observable_gauge(base, callbacks=[self._reader(name, ("",))], description=doc)
        else:
            bounds = _bounds(family)
            if bounds is None:
                return False  # its bounds are known once it has a series: found again later
            histogram = self._meter.create_histogram(
                base, description=doc, explicit_bucket_boundaries_advisory=list(bounds)
            )
            self._replays[name] = Replay(histogram, bounds)
            if self._feed is None:  # runs before the SDK reads the histograms' aggregations
                self._feed = self._meter.create_observable_gauge(
                    semconv.ENGINE_HISTOGRAM_FEED, callbacks=[self._fed], description="feeds histograms; no points"
                )
        return True

    def _fed(self, options: Any) -> Iterable[Any]:
        snapshot = self.snapshot()
        for name, replay in list(self._replays.items()):
            family = snapshot.get(name)
            if family is not None:
                try:
                    replay.feed(family.samples, self.replica)
                except Exception:  # noqa: BLE001 - one odd family must not stop the others
                    warn_once(f"engine histogram {name}", "could not replay %s", name, exc_info=True)
        return ()

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


class _State:
    bridge: Bridge | None = None


_STATE = _State()


@safe("engine metrics")
def bridge(replica: int | None) -> Bridge | None:
    """Bridge this process's engine metrics (once; later calls look for new families)."""
    if _STATE.bridge is None:
        try:
            import prometheus_client
        except ImportError:
            return None  # an engine without prometheus_client has no metrics to bridge
        _STATE.bridge = Bridge(PROCESS.telemetry.meter, prometheus_client.REGISTRY, replica)
        _STATE.bridge.discover(force=True)
    else:
        if _STATE.bridge.replica is None:
            _STATE.bridge.replica = replica  # the server's own rank, where the engine start had none
        _STATE.bridge.discover()
    return _STATE.bridge


def reset() -> None:
    """Forget the bridge (tests)."""
    _STATE.bridge = None
