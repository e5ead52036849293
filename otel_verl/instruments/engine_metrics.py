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
* a histogram ``vllm:x`` -> three observable up-down counters ``vllm.x.bucket`` (label ``le``),
  ``vllm.x.sum`` and ``vllm.x.count``: the engine's cumulative buckets exactly as it counted them
  (no OpenTelemetry instrument takes pre-aggregated buckets).

In Prometheus (OTLP translation) these are the engine's usual names with ``:`` as ``_``:
``vllm_kv_cache_usage_perc``, ``vllm_num_preemptions_total``,
``vllm_time_to_first_token_seconds_bucket{le=...}``, so dashboards written for vLLM's own
``/metrics`` work on them by that one substitution.

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
from otel_verl._safe import safe
from otel_verl.process.state import PROCESS

PREFIXES = ("vllm:", "sglang:")
KINDS = ("counter", "gauge", "histogram")
MAX_FAMILIES = 256
MAX_SERIES = 512
MAX_LABELS = 16
MAX_LABEL_CHARS = 256
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
        else:
            for part in ("bucket", "sum", "count"):
                self._meter.create_observable_up_down_counter(
                    f"{base}.{part}", callbacks=[self._reader(name, (f"_{part}",))], description=doc
                )

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
