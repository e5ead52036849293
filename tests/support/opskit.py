"""Shared helpers for the ops-kit tests (collector/ folder).

Imported as ``support.opskit``.

Nothing here talks to the network but the live-stack helpers (`get_json`,
`StackAPI`, `running_stack`), which the e2e tests use too. External tools (promtool, amtool,
otelcol-contrib) are looked up on PATH; a test that needs a missing one stops by
``components.require`` (a skip on a workstation, a failure under CI).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from verl_cpu_harness.ports import free_ports

from otel_verl.instruments.prometheus import translate
from otel_verl.semconv import metric_name
from support.components import SESSION_START, require  # the missing-component rule
from support.components import require_tool as _require_tool

REPO = Path(__file__).resolve().parents[2]
COLLECTOR = REPO / "collector"

PROM_DIR = COLLECTOR / "prometheus"
RULES_DIR = PROM_DIR / "rules"
RULE_FILES = sorted(RULES_DIR.glob("*.yaml"))
PROM_TEST_FILE = PROM_DIR / "tests" / "verl-alerts.test.yaml"
DASHBOARD_FILES = sorted((COLLECTOR / "grafana" / "dashboards").glob("*.json"))
DATASOURCES_FILE = COLLECTOR / "grafana" / "provisioning" / "datasources" / "datasources.yaml"
DASHBOARD_PROVIDERS_FILE = COLLECTOR / "grafana" / "provisioning" / "dashboards" / "dashboards.yaml"
OTELCOL_CONFIG = COLLECTOR / "otelcol-config.yaml"
OTELCOL_REMOTE = COLLECTOR / "otelcol-remote.yaml"  # overlay: TLS + bearer token for other nodes
OTELCOL_AGENT = COLLECTOR / "otelcol-agent.yaml"  # a node's agent, forwarding to the gateways
OTELCOL_DEBUG = COLLECTOR / "otelcol-debug.yaml"  # overlay: a line per span exported
BUILDER_CONFIG = COLLECTOR / "builder-config.yaml"
COMPOSE_FILE = COLLECTOR / "compose.yaml"
PROM_CONFIG = PROM_DIR / "prometheus.yml"
ALERTMANAGER_CONFIG = COLLECTOR / "alertmanager" / "alertmanager.yml"
METRIC_NAMES_FILE = COLLECTOR / "metric_names.txt"
LABEL_NAMES_FILE = COLLECTOR / "label_names.txt"


def load_yaml(path: Path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def load_json(path: Path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# `${env:VAR:-default}` in otelcol-config.yaml: the defaults are the compose values, and
# `otel-verl stack up` sets the variables (docs/stack.md, "One copy of each config").
_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env_defaults(value, env: dict[str, str] | None = None):
    """``value`` (parsed YAML) with every ``${env:VAR:-default}`` resolved as the Collector does.

    ``env`` gives the variables that are set (default: none, i.e. the compose values). A string
    that is one reference only takes the YAML type of its value (a port becomes an int).
    """
    env = env or {}
    if isinstance(value, dict):
        return {k: expand_env_defaults(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env_defaults(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        if m.group(1) in env:
            return env[m.group(1)]
        assert m.group(2) is not None, f"${{env:{m.group(1)}}} has no default: compose would not start"
        return m.group(2)

    whole = _ENV_REF.fullmatch(value)
    if whole:
        return yaml.safe_load(sub(whole))
    return _ENV_REF.sub(sub, value)


def load_otelcol_config(env: dict[str, str] | None = None) -> dict:
    """otelcol-config.yaml as the Collector sees it with no variable set (or under ``env``)."""
    return expand_env_defaults(load_yaml(OTELCOL_CONFIG), env)


def merge_configs(base: Any, overlay: Any) -> Any:
    """Two Collector config files as ``--config=A --config=B`` merges them: maps key by key, and
    anything else (a list, a scalar) of the later file replaces the earlier one."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        return {
            k: merge_configs(base[k], overlay[k]) if k in base and k in overlay else overlay.get(k, base.get(k))
            for k in {**base, **overlay}
        }
    return overlay


def compose_otelcol_env() -> dict[str, str]:
    """The variables compose.yaml gives the otelcol container."""
    env = load_yaml(COMPOSE_FILE)["services"]["otelcol"].get("environment") or {}
    return {str(k): str(v) for k, v in env.items()}


def read_name_list(path: Path) -> list[str]:
    """Non-empty, non-comment lines of a names file."""
    names = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(line)
    return names


PROMETHEUS_TOOLS_HOW = (
    "on Debian `apt-get install -y --no-install-recommends prometheus prometheus-alertmanager` "
    "(`bash scripts/setup.sh` does)"
)


def require_tool(name: str) -> str:
    """Debian's Prometheus family tool ``name`` (promtool, amtool, prometheus), or ``require``."""
    return _require_tool(name, PROMETHEUS_TOOLS_HOW)


def run_tool(
    args: list[str], cwd: Path | None = None, timeout: int = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run a tool; ``env`` is added to this process's environment."""
    full_env = {**os.environ, **env} if env else None
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, env=full_env)


def backends_dir() -> Path:
    """Where scripts/backends.sh puts the binaries it builds."""
    default = Path.home() / ".cache" / "otel-verl" / "backends"
    return Path(os.environ.get("OTEL_VERL_BACKENDS_DIR") or default)


def promtool_major_version(promtool: str) -> int:
    out = run_tool([promtool, "--version"])
    m = re.search(r"version (\d+)\.", out.stdout + out.stderr)
    assert m, f"cannot read the promtool version from: {out.stdout!r} {out.stderr!r}"
    return int(m.group(1))


# --------------------------------------------------------------------------
# PromQL name extraction (enough PromQL for our rules and dashboards; it
# raises on anything it does not understand rather than guessing).

PROMQL_KEYWORDS = {
    # aggregation operators
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    # binary / set operators and modifiers
    "and",
    "or",
    "unless",
    "atan2",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "start",
    "end",
    # literals
    "Inf",
    "NaN",
    "inf",
    "nan",
}

_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING_RE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_MATCHER_RE = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\')\s*')
_TOKEN_RE = re.compile(
    r"(?P<dur>\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)"
    r"|(?P<num>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)"
    r"|(?P<other>\S)"
)
_GRAFANA_VAR_RE = re.compile(r"\$\{[^}]*\}|\$\$?\w+")
_IDENT_RE = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*$")


@dataclass
class PromQLNames:
    metrics: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)


def _unquote(s: str) -> str:
    return s[1:-1]


def promql_names(expr: str) -> PromQLNames:
    """Metric and label names referenced by a PromQL expression.

    Grafana template variables ($run, ${run:regex}, $__rate_interval,
    $$__tags in provisioning files) are tolerated.
    """
    out = PromQLNames()
    text = expr

    # 1. Label matcher blocks {...}: record labels, __name__ values, and the
    #    metric name right before the block. Strings inside may contain '}'.
    pieces = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "\"'`":
            m = _STRING_RE.match(text, i)
            if not m:
                raise ValueError(f"unterminated string in {expr!r}")
            pieces.append(m.group(0))
            i = m.end()
            continue
        if ch == "{":
            j = i + 1
            body = []
            while j < len(text) and text[j] != "}":
                if text[j] in "\"'`":
                    m = _STRING_RE.match(text, j)
                    if not m:
                        raise ValueError(f"unterminated string in {expr!r}")
                    body.append(m.group(0))
                    j = m.end()
                else:
                    body.append(text[j])
                    j += 1
            if j >= len(text):
                raise ValueError(f"unbalanced '{{' in {expr!r}")
            inner = "".join(body).strip()
            # Grafana's $__tags (trace-to-metrics) expands to matchers later.
            inner = _GRAFANA_VAR_RE.sub("", inner).strip().strip(",")
            pos = 0
            while pos < len(inner):
                m = _MATCHER_RE.match(inner, pos)
                if not m:
                    raise ValueError(f"cannot parse label matchers {inner!r} in {expr!r}")
                label, op, value = m.group(1), m.group(2), _unquote(m.group(3))
                out.labels.add(label)
                if label == "__name__":
                    alternatives = value.split("|") if op == "=~" else [value]
                    for alt in alternatives:
                        if not _IDENT_RE.match(alt):
                            raise ValueError(f"__name__ matcher {value!r} is not a list of plain names: {expr!r}")
                        out.metrics.add(alt)
                pos = m.end()
                if pos < len(inner):
                    if inner[pos] != ",":
                        raise ValueError(f"cannot parse label matchers {inner!r} in {expr!r}")
                    pos += 1
            pieces.append(" __MATCHERS__ ")
            i = j + 1
            continue
        pieces.append(ch)
        i += 1
    text = "".join(pieces)

    # 2. Drop strings (label_replace arguments etc.), ranges and subqueries.
    text = _STRING_RE.sub(" ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GRAFANA_VAR_RE.sub(" 0 ", text)

    # 3. Grouping clauses carry label names.
    for m in _GROUPING_RE.finditer(text):
        for label in m.group(2).split(","):
            label = label.strip()
            if label:
                if not _IDENT_RE.match(label):
                    raise ValueError(f"bad label {label!r} in grouping of {expr!r}")
                out.labels.add(label)
    text = _GROUPING_RE.sub(" ", text)

    # 4. What is left: identifiers that are neither functions nor keywords are
    #    metric names.
    tokens = [m for m in _TOKEN_RE.finditer(text)]
    for idx, tok in enumerate(tokens):
        ident = tok.group("ident")
        if not ident or ident == "__MATCHERS__":
            continue
        nxt = tokens[idx + 1].group(0) if idx + 1 < len(tokens) else ""
        if nxt == "(":
            continue  # function call or aggregation
        if ident in PROMQL_KEYWORDS:
            continue
        out.metrics.add(ident)
    return out


_LABEL_VALUES_RE = re.compile(r"^\s*label_values\s*\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$", re.S)
_LABEL_VALUES_1_RE = re.compile(r"^\s*label_values\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")


def grafana_variable_names(query: str) -> PromQLNames:
    """Names used by a Grafana Prometheus variable query."""
    m = _LABEL_VALUES_RE.match(query)
    if m:
        names = promql_names(m.group(1))
        names.labels.add(m.group(2))
        return names
    m = _LABEL_VALUES_1_RE.match(query)
    if m:
        return PromQLNames(labels={m.group(1)})
    m = re.match(r"^\s*query_result\s*\((.*)\)\s*$", query, re.S)
    if m:
        return promql_names(m.group(1))
    m = re.match(r"^\s*metrics\s*\((.*)\)\s*$", query)
    if m:
        return PromQLNames()
    return promql_names(query)


# --------------------------------------------------------------------------
# Collecting every PromQL expression of the kit.


def _walk_panels(panels):
    for p in panels or []:
        yield p
        yield from _walk_panels(p.get("panels"))


def dashboard_panels(dashboard: dict):
    return list(_walk_panels(dashboard.get("panels")))


def _ds_uid(ds) -> str | None:
    if isinstance(ds, dict):
        return ds.get("uid")
    return ds


_DS_VARIABLE_RE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def dashboard_datasource_uid(dashboard: dict, ds) -> str | None:
    """The provisioned data source a dashboard's data-source reference (a panel's, a target's, a
    variable's) reaches in the kit: a fixed UID as it is; a data-source variable (``${ds_prometheus}``,
    scripts/dashboards/kit.py) the kit's one data source of the variable's plugin (what the
    variable falls back to when nothing was chosen); None when it resolves to nothing."""
    uid = _ds_uid(ds)
    m = _DS_VARIABLE_RE.fullmatch(uid or "")
    if not m:
        return uid
    name = m.group(1) or m.group(2)
    plugins = [
        v.get("query")
        for v in dashboard.get("templating", {}).get("list", [])
        if v.get("name") == name and v.get("type") == "datasource"
    ]
    if len(plugins) != 1:
        return None
    uids = [d["uid"] for d in load_yaml(DATASOURCES_FILE)["datasources"] if d["type"] == plugins[0]]
    return uids[0] if len(uids) == 1 else None


def rule_exprs() -> list[tuple[str, str]]:
    """(where, expr) for every rule in collector/prometheus/rules."""
    out = []
    for path in RULE_FILES:
        for group in load_yaml(path)["groups"]:
            for rule in group["rules"]:
                name = rule.get("alert") or rule.get("record")
                out.append((f"{path.name}:{name}", rule["expr"]))
    return out


def dashboard_prom_exprs() -> list[tuple[str, str, str]]:
    """(where, kind, expr) for Prometheus queries in the dashboards.

    kind is "expr" for panel/annotation queries and "variable" for template
    variable queries.
    """
    prom_uids = {d["uid"] for d in load_yaml(DATASOURCES_FILE)["datasources"] if d["type"] == "prometheus"}
    out = []
    for path in DASHBOARD_FILES:
        dash = load_json(path)
        for panel in dashboard_panels(dash):
            for t in panel.get("targets", []) or []:
                uid = dashboard_datasource_uid(dash, t.get("datasource")) or dashboard_datasource_uid(
                    dash, panel.get("datasource")
                )
                if uid in prom_uids and t.get("expr"):
                    out.append((f"{path.name}:{panel.get('title')}:{t.get('refId')}", "expr", t["expr"]))
        for ann in dash.get("annotations", {}).get("list", []):
            if dashboard_datasource_uid(dash, ann.get("datasource")) in prom_uids and ann.get("expr"):
                out.append((f"{path.name}:annotation:{ann.get('name')}", "expr", ann["expr"]))
        for var in dash.get("templating", {}).get("list", []):
            if var.get("type") == "query" and dashboard_datasource_uid(dash, var.get("datasource")) in prom_uids:
                q = var.get("query")
                if isinstance(q, dict):
                    q = q.get("query")
                out.append((f"{path.name}:variable:{var.get('name')}", "variable", q))
    return out


def datasource_prom_exprs() -> list[tuple[str, str]]:
    """PromQL written into the Tempo data source's trace-to-metrics links."""
    out = []
    for ds in load_yaml(DATASOURCES_FILE)["datasources"]:
        ttm = (ds.get("jsonData") or {}).get("tracesToMetrics") or {}
        for q in ttm.get("queries", []) or []:
            # Provisioning files escape $ as $$.
            out.append((f"datasources.yaml:{ds['name']}:{q.get('name')}", q["query"].replace("$$", "$")))
    return out


def all_used_names() -> PromQLNames:
    used = PromQLNames()
    for _, expr in rule_exprs():
        n = promql_names(expr)
        used.metrics |= n.metrics
        used.labels |= n.labels
    for _, kind, expr in dashboard_prom_exprs():
        n = grafana_variable_names(expr) if kind == "variable" else promql_names(expr)
        used.metrics |= n.metrics
        used.labels |= n.labels
    for _, expr in datasource_prom_exprs():
        n = promql_names(expr)
        used.metrics |= n.metrics
        used.labels |= n.labels
    return used


# --------------------------------------------------------------------------
# The metric-name rules are otel-verl's own (one definition): the generic key -> instrument name
# rule and Prometheus 3's OTLP translation of an instrument.
otlp_to_prometheus_name = translate
verl_key_to_otel_name = metric_name


def get_json(url: str, json_lines: bool = False, timeout: float = 30) -> Any:
    """GET a live-stack query API on 127.0.0.1 and decode its JSON answer."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - 127.0.0.1
        body = resp.read().decode()
    if json_lines:  # VictoriaLogs answers one JSON object per line
        return [json.loads(line) for line in body.splitlines() if line.strip()]
    return json.loads(body)


# --------------------------------------------------------------------------
# The excuse rule of the live tests (a kit query on a real run's series): which metric names a
# run may lack, and why. Each name on its own, never a whole query: a query that also reads names
# the run must have still checks those, and a name is excused only while the run really lacks it
# (an excuse cannot outlive its cause).

# Metric names only a GPU run emits: queries on them may return nothing on the CPU harness.
NEEDS_GPU = {
    "hw_gpu_memory_usage_bytes",
    "hw_gpu_memory_limit_bytes",
    "hw_gpu_utilization_ratio",
    "hw_power_watts",
    "hw_temperature_celsius",
    "verl_process_gpu_memory_usage_bytes",
}
# created by the first NaN/Inf verl logs, the guard's first firing (its built-in nonfinite rule fires on
# a NaN), the stall doctor's first stall
STALL_ONLY = {"verl_training_stalled"}
FAILURE_ONLY = {"verl_training_nonfinite_total", "verl_guard_triggered_total"} | STALL_ONLY
ALERT_STATE = {"ALERTS", "ALERTS_FOR_STATE"}  # written by Prometheus only while a rule fires
HIST_SUFFIXES = ("_bucket", "_sum", "_count")
ENGINE_PREFIXES = ("vllm_", "sglang_")  # the rollout engine's own metrics (otel_verl.hooks.rollout.engine_metrics)


def catalog_prometheus_names() -> set[str]:
    """The Prometheus 3 names of otel-verl's named instruments (a histogram's three series)."""
    from otel_verl.instruments import catalog
    from otel_verl.instruments.prometheus import prometheus_name

    out: set[str] = set()
    for spec in catalog.ALL + catalog.ENGINE:
        base = prometheus_name(spec)
        out |= {base + s for s in HIST_SUFFIXES} if spec.kind == catalog.HISTOGRAM else {base}
    return out


def logged_prometheus_names(console: dict[int, dict[str, float]]) -> set[str]:
    """The Prometheus 3 names of the values verl logged in a run (its console: step -> key -> value)."""
    from otel_verl import semconv
    from otel_verl.instruments import catalog
    from otel_verl.instruments.prometheus import prometheus_name

    # verl's step number is carried by verl.training.step, not forwarded a second time
    return {
        prometheus_name(catalog.logged_value(k)) for values in console.values() for k in values if k != semconv.STEP_KEY
    }


def keyed_prometheus_names() -> dict[str, set[str]]:
    """Named instruments that carry only keys verl logs in some configurations (staleness: the v1
    driver; the mismatch: a rollout that returns log-probs) -> the Prometheus 3 names of those keys'
    generic gauges."""
    from otel_verl import semconv
    from otel_verl.instruments import catalog
    from otel_verl.instruments.prometheus import prometheus_name

    keys = {
        catalog.ROLLOUT_PROBS_DIFF: semconv.PROBS_DIFF_KEYS,
        catalog.ROLLOUT_PROBS_CORRELATION: (semconv.PROBS_CORRELATION_KEY,),
        catalog.ROLLOUT_MISMATCH: semconv.MISMATCH_KEYS,
        catalog.OFF_POLICY_STALENESS: semconv.STALENESS_KEYS,
    }
    return {prometheus_name(spec): {prometheus_name(catalog.logged_value(k)) for k in ks} for spec, ks in keys.items()}


def why_absent(name: str, logged: set[str]) -> str | None:
    """Why a healthy run on the CPU harness may have no series ``name``; None: it must have one.
    ``logged``: ``logged_prometheus_names`` of the run."""
    if name in NEEDS_GPU:
        return f"{name} needs a GPU"
    if name in FAILURE_ONLY:
        return f"{name} exists only after a failure (NaN/Inf, a guard rule firing, a stall)"
    if name in ALERT_STATE:
        return f"{name}: written only while an alert fires"
    keyed = keyed_prometheus_names().get(name)
    if keyed is not None and not keyed & logged:
        return f"verl logged none of the keys {name} carries in this run (staleness: the v1 driver only)"
    if name.startswith(ENGINE_PREFIXES):
        return f"{name} comes from verl's vLLM rollout (tests/e2e/test_vllm_rollout.py); these runs use the HF one"
    if name.startswith("verl_") and name not in catalog_prometheus_names() and name not in logged:
        return f"verl logged no key for {name} in this run (e.g. no critic, no kl_loss in GRPO)"
    return None


def excused_names(where: str, names: set[str], logged: set[str], present: Callable[[str], bool]) -> dict[str, str]:
    """name -> why, for the names of one query that the run lacks for a known reason (``why_absent``);
    asserts that the run has every other name (``present(name)``: it has a series of it)."""
    excused: dict[str, str] = {}
    missing: list[str] = []
    for name in sorted(names):
        if present(name):
            continue
        why = why_absent(name, logged)
        if why is None:
            missing.append(name)
        else:
            excused[name] = why
    assert not missing, f"{where}: no series of {missing} in this run"
    return excused


def excused_reason(excused: dict[str, str], names: set[str]) -> str:
    """The skip reason of a query whose data ``excused`` explains; names the others it checked."""
    others = sorted(names - excused.keys())
    return "; ".join(excused.values()) + (f" (its other names have series: {others})" if others else "")


# The wait for a background backend build ends this long after the pytest session started. From
# empty Go caches the build (~1,000-1,300 CPU-s at nice 19) runs beside the other tests, and the
# live-stack tests, which run last, need ~15 min of their own after it: 50 min leaves them room
# within a 90-minute CI job (setup included). A build still running then is a missing component.
BACKENDS_DEADLINE_S = float(os.environ.get("OTEL_VERL_BACKENDS_DEADLINE_S", "3000"))
BACKENDS_HOW = "`bash scripts/backends.sh` builds them (Go >= 1.26.8; `bash scripts/setup.sh` starts it)"


def wait_for_backend_build(deadline: float | None = None) -> bool:
    """Wait while ``scripts/backends.sh`` builds into :func:`backends_dir`, until ``deadline``
    (``time.monotonic()``; default ``BACKENDS_DEADLINE_S`` after the session start).

    ``scripts/setup.sh`` leaves the build running in the background from empty caches; the build
    holds ``.lock`` there (flock) while it runs. Returns whether no build is running now."""
    lock = backends_dir() / ".lock"
    if not lock.is_file():
        return True
    if deadline is None:
        deadline = SESSION_START + BACKENDS_DEADLINE_S
    said = False
    with open(lock, "a") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return False
                if not said:
                    print(f"waiting for scripts/backends.sh to finish ({lock})", file=sys.stderr, flush=True)
                    said = True
                time.sleep(2.0)  # polling a lock: flock has no timeout of its own
                continue
            fcntl.flock(f, fcntl.LOCK_UN)
            return True


def require_backend_build() -> None:
    """Wait for a background backend build (``wait_for_backend_build``); ``require`` if it is
    still running at the deadline."""
    if not wait_for_backend_build():
        require(
            "the live stack's backends",
            f"scripts/backends.sh was still building {BACKENDS_DEADLINE_S:.0f} s after the test session "
            f"started ({backends_dir()}; OTEL_VERL_BACKENDS_DEADLINE_S)",
        )


def stack_bin_dir() -> Path | None:
    """The folder for ``otel-verl stack``'s binaries (``scripts/backends.sh``'s, if built); stops the
    calling test by ``require``, naming what is missing, when the binaries are not there. Waits for a
    build that is still running (``require_backend_build``)."""
    from otel_verl import stack
    from otel_verl.exits import CommandError

    require_backend_build()
    bin_dir = backends_dir() if backends_dir().is_dir() else None
    try:
        stack.binaries.find_binaries(bin_dir)
    except CommandError as exc:
        require("the live stack's backends", f"{exc}; {BACKENDS_HOW}")
    return bin_dir


# --------------------------------------------------------------------------
# The live stack and real verl runs in the e2e tests (tests/e2e: test_live_stack, test_stack_faults,
# faults/test_collector_restart).

_POLL_RETRY_ON: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError)


def poll_until(
    what: str,
    probe: Callable[[], Any],
    timeout_s: float,
    every_s: float = 1.0,
    retry_on: tuple[type[BaseException], ...] = _POLL_RETRY_ON,
) -> Any:
    """probe() until it returns something true; its last answer in the failure otherwise.

    The backends answer late (batching, retry backoff), so a wait is bounded polling; ``retry_on``
    are the errors of a backend that is not ready yet (refused, partial JSON, missing key)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except retry_on as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(every_s)
    raise AssertionError(f"{what}: not there after {timeout_s:g} s (last answer {last!r})")


@dataclass
class StackAPI:
    """The query APIs of a stack that ``otel-verl stack up`` started on ``ports`` (127.0.0.1)."""

    ports: dict[str, int]
    data_dir: Path
    logsql_limit: ClassVar[int] = 10000  # records one LogsQL query returns at most

    def url(self, port_name: str) -> str:
        return f"http://127.0.0.1:{self.ports[port_name]}"

    def prom(self, path: str, **params: Any) -> Any:
        """Prometheus' HTTP API ``/api/v1/<path>``: its ``data``, once its status is success."""
        body = get_json(f"{self.url('prometheus')}/api/v1/{path}?{urllib.parse.urlencode(params)}")
        assert body["status"] == "success", body
        return body["data"]

    def logsql(self, query: str) -> list[dict]:
        """VictoriaLogs' records for a LogsQL ``query`` (at most ``logsql_limit``)."""
        params = urllib.parse.urlencode({"query": query, "limit": self.logsql_limit})
        return get_json(f"{self.url('victorialogs')}/select/logsql/query?{params}", json_lines=True)


@contextmanager
def running_stack(
    tmp_path_factory: pytest.TempPathFactory, name: str, fixed: dict[str, int] | None = None
) -> Iterator[tuple[Path | None, Path, dict]]:
    """(binaries folder, data folder, ports) of ``otel-verl stack up`` with collector/'s configs on free
    ports (``fixed``: these ones on the ports given), its data in a new tmp folder ``name``; down on
    exit, what up and down said printed (pytest shows it with a failure). Skips without the binaries
    (``stack_bin_dir``)."""
    from otel_verl import stack

    bin_dir = stack_bin_dir()
    data_dir = tmp_path_factory.mktemp(name)
    ports = {**free_ports([n for n in stack.ports.DEFAULT_PORTS if n not in (fixed or {})]), **(fixed or {})}
    lines: list[str] = []
    try:
        stack.supervisor.up(bin_dir, data_dir, ports, timeout_s=90, config_dir=COLLECTOR, out=lines.append)
        yield bin_dir, data_dir, ports
    finally:
        stack.supervisor.down(data_dir, out=lines.append)
        print("\n".join(lines))


def file_log_records(folder: Path) -> Iterator[tuple[dict, dict]]:
    """(``resourceLogs`` entry, log record) of every record in the OTLP JSON log files
    (``logs-*.jsonl``) in ``folder``: what the processes sent, to compare with a backend."""
    for path in sorted(folder.glob("logs-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            for rl in json.loads(line)["resourceLogs"]:
                for sl in rl["scopeLogs"]:
                    for r in sl.get("logRecords", []):
                        yield rl, r


# What a run's processes sent (its OTLP JSON files, and what is left in its spools) against what
# the backends have: the e2e fault tests' "nothing lost" (test_stack_faults, faults/test_worker_death).


def jaeger_spans(stack: StackAPI, service: str) -> tuple[dict[str, dict], int]:
    """(span id -> Jaeger span, tags as a dict) of every trace of ``service``, and how many entries
    Jaeger's answer had (a span it stores twice counts twice there)."""
    params = urllib.parse.urlencode({"service": service, "lookback": "2h", "limit": 100000})
    out: dict[str, dict] = {}
    entries = 0
    for trace in get_json(f"{stack.url('jaeger')}/api/traces?{params}")["data"]:
        entries += len(trace["spans"])
        for s in trace["spans"]:
            out[s["spanID"]] = {**s, "tags": {t["key"]: t["value"] for t in s["tags"]}}
    return out, entries


def prom_collections(stack: StackAPI, run_id: str) -> dict[str, list[int]]:
    """instance -> how many series got a sample at each sample time, in time order: every series
    Prometheus has with the run's ``verl_run_id`` (``target_info`` aside)."""
    from collections import Counter, defaultdict

    selector = f'{{verl_run_id="{run_id}", __name__!="target_info"}}[2h]'
    by: dict[str, Counter[int]] = defaultdict(Counter)
    for series in stack.prom("query", query=selector, time=time.time())["result"]:
        instance = series["metric"].get("instance", "")
        for t, _ in series["values"]:
            by[instance][round(float(t) * 1000)] += 1
    return {k: [n for _, n in sorted(v.items())] for k, v in by.items()}


def file_collections(points: list[Any], run_id: str) -> dict[str, list[int]]:
    """The same from the OTLP JSON files' points (``MetricPoint``s): instance -> how many Prometheus
    series each collection makes (a histogram point: a bucket per bound and +Inf, _sum, _count)."""
    from collections import Counter, defaultdict

    by: dict[str, Counter[int]] = defaultdict(Counter)
    for p in points:
        if p.resource.get("verl.run.id") != run_id:
            continue
        n = len(p.bounds or []) + 3 if p.kind == "histogram" else 1
        by[str(p.resource.get("service.instance.id", ""))][p.time_ns // 1_000_000] += n
    return {k: [n for _, n in sorted(v.items())] for k, v in by.items()}


def spool_files(root: Path) -> list[Path]:
    """Every batch left in a spool root (``otel_verl.spool.store``): ``<process>/<signal>/<n>.pb``."""
    return sorted(root.glob("*/*/*.pb")) if root.is_dir() else []


def spooled_items(files: list[Path]) -> dict[str, set[str]]:
    """signal -> what these spool files hold: span ids (hex), log record bodies, metric names."""
    from otel_verl.spool.resend import parse

    out: dict[str, set[str]] = {"traces": set(), "logs": set(), "metrics": set()}
    for path in files:
        signal = path.parent.name.split("-")[0]
        request = parse(signal, path.read_bytes())
        if request is None:
            continue
        if signal == "traces":
            out[signal] |= {s.span_id.hex() for r in request.resource_spans for ss in r.scope_spans for s in ss.spans}
        elif signal == "logs":
            out[signal] |= {
                x.body.string_value for r in request.resource_logs for sl in r.scope_logs for x in sl.log_records
            }
        else:
            out[signal] |= {m.name for r in request.resource_metrics for sm in r.scope_metrics for m in sm.metrics}
    return out


class VerlThread:
    """A real ``opentelemetry-instrument``-ed verl run (``verl_cpu_harness.run_verl``) in a daemon
    thread, started on construction, its console streamed to ``watcher`` (a ``StepWatcher``): the
    test acts while it trains (stops a receiver, kills a component once step N is out). However the
    run ends, ``done`` is set and the watcher's waiters are woken, so no ``wait_for`` outlives it."""

    def __init__(
        self, workdir: Path, watcher: Any, *, driver: str, algo: str, steps: int, env: dict[str, str], timeout: float
    ) -> None:
        import verl_cpu_harness

        self.done = threading.Event()
        self.result: Any = None  # its verl_cpu_harness.RunResult once done
        self.ended: float | None = None  # time.monotonic() at its end

        def run() -> None:
            try:
                self.result = verl_cpu_harness.run_verl(
                    workdir, driver=driver, algo=algo, steps=steps, launcher="opentelemetry-instrument",
                    env=env, timeout=timeout, stream=watcher,
                )  # fmt: skip
            finally:
                self.ended = time.monotonic()
                self.done.set()
                with watcher.changed:
                    watcher.changed.notify_all()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()


# --------------------------------------------------------------------------
# TraceQL and LogQL of the kit (the Tempo and Loki data sources' queries and links), and the
# name mappings Grafana and Loki apply to them. The grammar check is tests/ops/query_grammar.

LOKI_CONFIG = COLLECTOR / "loki" / "loki.yaml"

# Resource attributes Loki 3.x promotes to index labels by default on its OTLP endpoint
# (distributor.otlp_config.default_resource_attributes_as_index_labels; Loki docs, "Ingesting logs
# to Loki using OpenTelemetry Collector"); limits_config.otlp_config adds to them or drops them.
# Everything else (other resource attributes, log attributes, a record's trace_id/span_id and
# severity) becomes structured metadata, dots turned into underscores.
LOKI_DEFAULT_INDEX_ATTRIBUTES = (
    "cloud.availability_zone",
    "cloud.region",
    "container.name",
    "deployment.environment",
    "deployment.environment.name",
    "k8s.cluster.name",
    "k8s.container.name",
    "k8s.cronjob.name",
    "k8s.daemonset.name",
    "k8s.deployment.name",
    "k8s.job.name",
    "k8s.namespace.name",
    "k8s.pod.name",
    "k8s.replicaset.name",
    "k8s.statefulset.name",
    "service.instance.id",
    "service.name",
    "service.namespace",
)

# Grafana's template-variable syntax ($var, [[var:fmt]], ${var.field:fmt}): the variableRegex of
# Grafana's templating code.
_GRAFANA_TEMPLATE_RE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^}]+))?(?::([^}]+))?\}")


def grafana_interpolate(expr: str, values: dict[str, str]) -> str:
    """``expr`` with Grafana's template variables replaced from ``values``.

    Keys are variable names, or ``name.field`` for ``${name.field}`` (``__trace.traceId``). A
    variable ``values`` lacks raises KeyError naming it, so that no ``$x`` reaches a parser
    unnoticed. Format suffixes (``${run:regex}``) are rejected: the kit does not use them.
    """

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if fmt:
            raise KeyError(f"variable format {m.group(0)!r} in {expr!r} is not handled here")
        key = f"{name}.{m.group(5)}" if m.group(5) else name
        if key not in values:
            raise KeyError(f"no value for template variable {m.group(0)!r} in {expr!r}")
        return values[key]

    return _GRAFANA_TEMPLATE_RE.sub(sub, expr)


def unescape_provisioning(value: str) -> str:
    """A string of a provisioning file as Grafana reads it: ``$$`` is a literal ``$`` there
    (Grafana expands ``$VAR`` from its environment in provisioning files)."""
    return value.replace("$$", "$")


def datasource_uids(kind: str) -> set[str]:
    return {d["uid"] for d in load_yaml(DATASOURCES_FILE)["datasources"] if d["type"] == kind}


@dataclass
class KitQuery:
    """One TraceQL or LogQL query of the kit, as written (before template variables)."""

    where: str
    lang: str  # traceql | logql
    query: str


def dashboard_trace_log_queries() -> tuple[list[KitQuery], list[str]]:
    """(queries, unsupported) for the dashboards' Tempo and Loki targets, annotations and variables.

    ``unsupported`` names each Tempo/Loki query this collector does not turn into TraceQL/LogQL
    text (a traceqlSearch target's filters, a service graph, a Loki variable query), so that a test
    can fail on it instead of passing it by.
    """
    tempo, loki = datasource_uids("tempo"), datasource_uids("loki")
    out: list[KitQuery] = []
    unsupported: list[str] = []
    for path in DASHBOARD_FILES:
        dash = load_json(path)
        for panel in dashboard_panels(dash):
            for t in panel.get("targets", []) or []:
                uid = dashboard_datasource_uid(dash, t.get("datasource")) or dashboard_datasource_uid(
                    dash, panel.get("datasource")
                )
                where = f"{path.name}:{panel.get('title')}:{t.get('refId')}"
                if uid in tempo:
                    if t.get("queryType", "traceql") == "traceql" and t.get("query"):
                        out.append(KitQuery(where, "traceql", t["query"]))
                    else:
                        unsupported.append(f"{where} (Tempo queryType {t.get('queryType')!r})")
                elif uid in loki:
                    if t.get("expr"):
                        out.append(KitQuery(where, "logql", t["expr"]))
                    else:
                        unsupported.append(f"{where} (Loki target without expr)")
        for ann in dash.get("annotations", {}).get("list", []):
            uid = dashboard_datasource_uid(dash, ann.get("datasource"))
            where = f"{path.name}:annotation:{ann.get('name')}"
            if uid in loki and ann.get("expr"):
                out.append(KitQuery(where, "logql", ann["expr"]))
            elif uid in tempo or uid in loki:
                unsupported.append(f"{where} (annotation)")
        for var in dash.get("templating", {}).get("list", []):
            if dashboard_datasource_uid(dash, var.get("datasource")) in tempo | loki:
                unsupported.append(f"{path.name}:variable:{var.get('name')} (Tempo/Loki variable query)")
    return out, unsupported


@dataclass
class TraceLinks:
    """The Tempo and Loki data sources' cross-links (datasources.yaml), provisioning-unescaped."""

    logs_query: str  # tracesToLogsV2 custom query (LogQL with ${__tags}, ${__trace.traceId})
    logs_tags: dict[str, str]  # span attribute -> Loki label
    metrics_tags: dict[str, str]  # span attribute -> Prometheus label
    derived_fields: list[dict]  # Loki derivedFields


def datasource_trace_links() -> TraceLinks:
    by_type = {d["type"]: d for d in load_yaml(DATASOURCES_FILE)["datasources"]}
    tempo = by_type["tempo"]["jsonData"]
    t2l, t2m = tempo["tracesToLogsV2"], tempo.get("tracesToMetrics") or {}
    assert t2l.get("customQuery"), "tracesToLogsV2 without customQuery: Grafana builds the query itself"
    return TraceLinks(
        logs_query=unescape_provisioning(t2l["query"]),
        logs_tags={t["key"]: t.get("value") or t["key"] for t in t2l.get("tags", [])},
        metrics_tags={t["key"]: t.get("value") or t["key"] for t in t2m.get("tags", [])},
        derived_fields=[
            {k: unescape_provisioning(v) if isinstance(v, str) else v for k, v in f.items()}
            for f in by_type["loki"]["jsonData"].get("derivedFields", [])
        ],
    )


def loki_label_name(attribute: str) -> str:
    """The Loki label / structured-metadata name of an OTLP attribute (Prometheus-style
    normalisation: every character outside [A-Za-z0-9_] becomes ``_``; a leading digit gets ``_``)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", attribute)
    return f"_{name}" if name[:1].isdigit() else name


def loki_index_attributes() -> set[str]:
    """Resource attributes the kit's Loki indexes as stream labels: the defaults plus
    limits_config.otlp_config's ``index_label`` ones (loki.yaml)."""
    otlp = (load_yaml(LOKI_CONFIG).get("limits_config") or {}).get("otlp_config") or {}
    resource = otlp.get("resource_attributes") or {}
    out = set() if resource.get("ignore_defaults") else set(LOKI_DEFAULT_INDEX_ATTRIBUTES)
    for rule in resource.get("attributes_config", []) or []:
        assert not rule.get("regex"), "a regex attributes_config rule: extend loki_index_attributes"
        if rule.get("action") == "index_label":
            out |= set(rule.get("attributes", []))
        else:
            out -= set(rule.get("attributes", []))
    return out
