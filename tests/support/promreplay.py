"""A real run's exported metrics, as Prometheus 3 stores them, replayed through the shipped alert rules.

The alert rules are checked by hand-written promtool cases (``collector/prometheus/tests``); those
prove the PromQL, not that the series it reads exist. Here the series come from a real run instead:

* ``run_series``: every data point of a run's OTLP JSON metric files (``otlp_json_file``) as the
  series Prometheus 3's OTLP receiver makes of it: the name by its default translation
  (``otel_verl.instruments.prometheus.translate``, with the file's unit and kind), the point's
  attributes and the promoted resource attributes of ``collector/prometheus/prometheus.yml`` as
  labels, ``job``/``instance`` from ``service.name``/``service.instance.id``, a histogram as its
  ``_bucket``/``_sum``/``_count`` series;
* ``Replay``: those series on promtool's clock. The run's first export of a series the rules read
  is time 0; each export stays the series' value until the next one, as long as its process
  exported (what a periodic reader would have sent: gauges keep their last value, counters are
  cumulative), then the series ends (a process that exited or was killed). promtool's samples lie
  on a grid (``step_s``): each export shows at the grid point at or after it. ``slower`` replays
  the run that many times slower, its clock-valued gauges (``*_timestamp_seconds``) with it: a
  40 s stall of a CPU run is the 2 h stall of a real one. ``what_if`` changes one series' values
  from a time on: a failure (KL blow-up, reward collapse) that a few CPU steps do not have, on the
  series the run did export;
* ``Replay.alerts``: the alerts promtool's rule engine fires at given times (the shipped rules,
  their annotations left out: the hand-written cases check those), as label sets.
"""

from __future__ import annotations

import functools
import json
import math
import re
import subprocess
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from otel_verl.instruments import catalog
from otel_verl.instruments.prometheus import translate

REPO = Path(__file__).resolve().parents[2]
PROM_DIR = REPO / "collector" / "prometheus"
RULE_FILES = sorted((PROM_DIR / "rules").glob("*.yaml"))
TIMESTAMP_SUFFIX = "_timestamp_seconds"  # a gauge whose value is a time (the step heartbeat)


def _label_name(key: str) -> str:
    """An attribute key as a Prometheus label name (the receiver's sanitization)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", key)
    return "key_" + name if name[:1].isdigit() else name


def _any_value(v: dict[str, Any]) -> str:
    for key in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if key in v:
            value = v[key]
            return ("true" if value else "false") if key == "boolValue" else str(value)
    return json.dumps(v, sort_keys=True)


def _attrs(items: list[dict[str, Any]] | None) -> dict[str, str]:
    return {a["key"]: _any_value(a.get("value", {})) for a in items or []}


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound)).removesuffix(".0")


@dataclass
class Series:
    labels: dict[str, str]  # __name__ included
    samples: list[tuple[float, float]] = field(default_factory=list)  # (unix seconds, value)
    process: str = ""  # service.instance.id of the process that exported it

    @property
    def name(self) -> str:
        return self.labels["__name__"]

    def selector(self) -> str:
        inner = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(self.labels.items()) if k != "__name__")
        return f"{self.name}{{{inner}}}"


def promoted_attributes() -> list[str]:
    return list(yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())["otlp"]["promote_resource_attributes"])


def run_series(folder: Path) -> list[Series]:
    """Every series the run's metric files give Prometheus 3 (see the module's docstring)."""
    promoted = promoted_attributes()
    out: dict[tuple, Series] = {}

    def add(name: str, labels: dict[str, str], process: str, t: float, value: float) -> None:
        full = {"__name__": name, **labels}
        key = tuple(sorted(full.items()))
        series = out.get(key) or out.setdefault(key, Series(full, process=process))
        series.samples.append((t, value))

    for path in sorted(folder.glob("metrics-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            for rm in json.loads(line).get("resourceMetrics", []):
                res = _attrs(rm.get("resource", {}).get("attributes"))
                base = {_label_name(k): res[k] for k in promoted if k in res}
                namespace, service = res.get("service.namespace"), res.get("service.name", "")
                base["job"] = f"{namespace}/{service}" if namespace else service
                process = res.get("service.instance.id", "")
                if process:
                    base["instance"] = process
                for sm in rm.get("scopeMetrics", []):
                    for m in sm.get("metrics", []):
                        _metric(m, base, process, add)
    for series in out.values():
        series.samples.sort()
    return list(out.values())


def _metric(m: dict[str, Any], base: dict[str, str], process: str, add: Any) -> None:
    unit = m.get("unit", "")
    if "gauge" in m or "sum" in m:
        data = m.get("gauge") or m["sum"]
        monotonic = "sum" in m and data.get("isMonotonic", False)
        if "sum" in m:
            assert int(data.get("aggregationTemporality", 2)) in (2, "AGGREGATION_TEMPORALITY_CUMULATIVE"), m["name"]
        name = translate(m["name"], unit, catalog.COUNTER if monotonic else catalog.GAUGE)
        for p in data.get("dataPoints", []):
            value = float(p["asDouble"] if "asDouble" in p else p.get("asInt", 0))
            labels = {**base, **{_label_name(k): v for k, v in _attrs(p.get("attributes")).items()}}
            add(name, labels, process, int(p["timeUnixNano"]) / 1e9, value)
    elif "histogram" in m:
        name = translate(m["name"], unit, catalog.HISTOGRAM)
        for p in m["histogram"].get("dataPoints", []):
            labels = {**base, **{_label_name(k): v for k, v in _attrs(p.get("attributes")).items()}}
            t = int(p["timeUnixNano"]) / 1e9
            add(name + "_sum", labels, process, t, float(p.get("sum", 0)))
            add(name + "_count", labels, process, t, float(p.get("count", 0)))
            bounds = [float(b) for b in p.get("explicitBounds", [])] + [math.inf]
            running = 0
            for bound, count in zip(bounds, p.get("bucketCounts", []), strict=False):
                running += int(count)
                add(name + "_bucket", {**labels, "le": _le(bound)}, process, t, float(running))


def _alerts_of(text: str) -> dict[tuple[str, float], list[dict[str, str]]]:
    """(alert name, eval time) -> the label sets promtool 'got' (its failure report of a case that
    expected none); cases that passed (no alert) are absent."""
    out: dict[tuple[str, str], list[dict[str, str]]] = {}
    blocks = re.split(r"\n\s*alertname: ", "\n" + text)
    for block in blocks[1:]:
        head = re.match(r"(\S+), time: ([^,]+),", block)
        assert head, block[:200]
        got = block.split("got:", 1)[1] if "got:" in block else ""
        sets = []
        for labels in re.findall(r"Labels:\{(.*?)\}\n", got):
            sets.append(dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels)))
        out[(head.group(1), _seconds(head.group(2).strip()))] = sets
    return out


def _duration(seconds: float) -> str:
    return f"{int(round(seconds))}s"


class Replay:
    """A run's series on promtool's clock (see the module's docstring)."""

    @classmethod
    def stretched(cls, series: list[Series], name: str, seconds: float, step_s: float = 60.0) -> Replay:
        """The run replayed so slowly that its series ``name`` spans ``seconds`` from its first export to
        its process's last."""
        plain = cls(series)
        (first,) = {s.process for s in plain.find(name)}
        span = plain._last_export[first] - min(s.samples[0][0] for s in plain.find(name))
        assert span > 0, f"{name} was exported once only"
        return cls(series, slower=seconds / span, step_s=step_s)

    def __init__(self, series: list[Series], slower: float = 1.0, step_s: float = 10.0) -> None:
        assert series, "the run exported no metrics"
        self.series = series
        self.slower = slower
        self.step_s = step_s
        names = _rule_names()
        used = [s for s in series if s.name in names] or series
        self.t0 = min(s.samples[0][0] for s in used)  # the first export the rules can see
        last: dict[str, float] = defaultdict(float)
        for s in series:
            last[s.process] = max(last[s.process], s.samples[-1][0])
        self._last_export = dict(last)
        self._what_if: list[tuple[Series, Callable[[float, float], float], float, float]] = []

    def at(self, unix_s: float) -> float:
        """promtool's time (s) of a moment of the run."""
        return (unix_s - self.t0) * self.slower

    def first(self, name: str, **labels: str) -> float:
        """promtool's time of the first sample of ``name`` (with ``labels``)."""
        return min(self.at(t) for s in self.find(name, **labels) for t, _ in s.samples)

    def last(self, name: str, **labels: str) -> float:
        return max(self.at(t) for s in self.find(name, **labels) for t, _ in s.samples)

    def after(self, name: str, **labels: str) -> float:
        """The grid point where the first sample of ``name`` shows (at or after it)."""
        return math.ceil(self.first(name, **labels) / self.step_s - 1e-9) * self.step_s

    def end(self) -> float:
        """promtool's time of the run's last export."""
        return self.at(max(self._last_export.values()))

    def find(self, name: str, **labels: str) -> list[Series]:
        found = [s for s in self.series if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
        assert found, f"the run exported no series {name} {labels}"
        return found

    def what_if(
        self,
        name: str,
        change: Callable[[float, float], float],
        from_s: float,
        until_s: float = math.inf,
        **labels: str,
    ) -> None:
        """``change(value, t)`` every value of the series ``name`` (with ``labels``) at each promtool time
        ``t`` from ``from_s`` until ``until_s``."""
        for s in self.find(name, **labels):
            self._what_if.append((s, change, from_s, until_s))

    def _values(self, s: Series, points: int) -> str:
        out = []
        # promtool's samples are on a grid: a sample shows at the grid point at or after it, and the
        # process's series last until the grid point at or after its last export
        last = math.ceil(self.at(self._last_export[s.process]) / self.step_s - 1e-9)
        i = -1
        for k in range(points):
            now = self.t0 + k * self.step_s / self.slower
            while i + 1 < len(s.samples) and s.samples[i + 1][0] <= now + 1e-6:
                i += 1
            if i < 0 or k > last:
                out.append("_")
                continue
            value = s.samples[i][1]
            if s.name.endswith(TIMESTAMP_SUFFIX):
                value = self.at(value)
            for changed, change, from_s, until_s in self._what_if:
                if changed is s and from_s <= k * self.step_s < until_s:
                    value = change(value, k * self.step_s)
            out.append(repr(value))
        return " ".join(out)

    def alerts(self, tmp: Path, cases: list[tuple[str, float]]) -> dict[tuple[str, float], list[dict[str, str]]]:
        """(alert, promtool time) -> the label sets of that alert firing then, by promtool's rule
        engine on the shipped rules (annotations left out). Only the series the rules read go in."""
        tmp.mkdir(parents=True, exist_ok=True)
        rules = []
        for path in RULE_FILES:
            doc = yaml.safe_load(path.read_text())
            for group in doc["groups"]:
                for rule in group["rules"]:
                    rule.pop("annotations", None)
            out = tmp / path.name
            out.write_text(yaml.safe_dump(doc, sort_keys=False))
            rules.append(out.name)
        used = _rule_names()
        horizon = max(t for _, t in cases) + self.step_s
        points = int(horizon // self.step_s) + 2
        doc = {
            "rule_files": rules,
            "evaluation_interval": _duration(self.step_s),
            "tests": [
                {
                    "interval": _duration(self.step_s),
                    "input_series": [
                        {"series": s.selector(), "values": self._values(s, points)}
                        for s in self.series
                        if s.name in used
                    ],
                    "alert_rule_test": [
                        {"eval_time": _duration(t), "alertname": name, "exp_alerts": []} for name, t in cases
                    ],
                }
            ],
        }
        test = tmp / "replay.test.yaml"
        test.write_text(yaml.safe_dump(doc, sort_keys=False, width=10**9))
        res = subprocess.run(  # noqa: S603 - promtool from PATH, our own file
            ["promtool", "test", "rules", test.name], cwd=tmp, capture_output=True, text=True, timeout=300
        )
        text = res.stdout + res.stderr
        assert res.returncode == 0 or "FAILED" in text, text[-3000:]
        got = _alerts_of(text)
        result: dict[tuple[str, float], list[dict[str, str]]] = {}
        for name, t in cases:
            result[(name, t)] = got.get((name, float(round(t))), [])
        return result


_UNITS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}


def _seconds(text: str) -> float:
    """A duration as promtool prints one (Prometheus' ``model.Duration``: ``1d2h``, ``1m10s``, ``7m``)."""
    parts = re.findall(r"(\d+)(ms|y|w|d|h|m|s)", text)
    assert parts and "".join(n + u for n, u in parts) == text, text
    return sum(int(n) * _UNITS[u] for n, u in parts)


@functools.cache
def _rule_names() -> frozenset[str]:
    """Every word of the rules' expressions: the metric names among them are the series they read."""
    return frozenset(w for r in _rule_exprs() for w in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", r))


def _rule_exprs() -> list[str]:
    out = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            out += [r["expr"] for r in group["rules"]]
    return out


def alert_names() -> set[str]:
    """Every alert the shipped rules define."""
    return {
        r["alert"]
        for path in RULE_FILES
        for group in yaml.safe_load(path.read_text())["groups"]
        for r in group["rules"]
        if "alert" in r
    }


# Where each shipped alert is fired on a real run's series (test_promreplay.py: every alert is
# in exactly one of these).
AS_IT_HAPPENED = {  # the run had the failure itself
    "VerlNonFiniteLossOrGradNorm": "tests/e2e/test_guard.py (a reward turning NaN at step 2)",
    "VerlNonFiniteMetric": "tests/e2e/test_guard.py",
    "VerlGuardTriggered": "tests/e2e/test_guard.py",
    "VerlTrainingTelemetryLost": "tests/e2e/test_guard.py (the run's end)",
    "VerlStallDoctorStalled": "tests/e2e/faults/test_stall.py (a rollout server that stops answering)",
    "VerlTrainingStalled": "tests/e2e/faults/test_stall.py (replayed slower: its stall lasts hours)",
    "VerlRolloutPolicyMismatch": "tests/e2e/test_mismatch_e2e.py (a rollout server returning noisy log-probs)",
    "VerlRolloutDegenerateResponses": "tests/e2e/test_rollout_tail_e2e.py (loops and empty answers)",
}
WHAT_IF = {  # the failure put into the values of a healthy run's own series
    **dict.fromkeys(
        (
            "VerlKLDivergenceHigh",
            "VerlRewardCollapse",
            "VerlEntropyCollapse",
            "VerlEntropyNearZero",
            "VerlGradNormSpike",
            "VerlThroughputDrop",
            "VerlWeightSyncGrowing",
            "VerlRolloutLongTail",
        ),
        "tests/e2e/test_alerts_replayed.py (the shared v0 PPO run)",
    ),
    **dict.fromkeys(
        ("VerlEngineKVCacheSaturated", "VerlEnginePreemptionStorm", "VerlEngineQueueGrowing"),
        "tests/e2e/test_vllm_rollout.py (verl's vLLM rollout on vLLM's CPU build)",
    ),
    "VerlOffPolicyStalenessHigh": "tests/e2e/test_mismatch_e2e.py (the v1 run's own staleness series)",
}
NOT_ON_CPU = {  # no real series on the CPU harness: hand-written promtool cases only
    "VerlGPUMemoryNearLimit": "hw.gpu.* needs a GPU",
}
