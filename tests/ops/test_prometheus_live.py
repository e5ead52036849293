"""Every dashboard query and rule selector, evaluated on a real Prometheus fed by a real run.

The module fixture starts Debian's Prometheus 2.42 on 127.0.0.1 and runs the CPU verl harness
instrumented zero-code (``opentelemetry-instrument python -m verl.trainer.main_ppo``) with
``OTEL_METRICS_EXPORTER=otlp_json_file,prometheus``: every instrumented process (TaskRunner,
worker ranks, rollout servers) serves its metrics on its own pull endpoint (otel-verl's
Prometheus reader: next free port from ``OTEL_EXPORTER_PROMETHEUS_PORT``, every series labelled
with the run's resource attributes like the collector set-up does), Prometheus scrapes that
port range every 200 ms, and the same metrics go to OTLP JSON files.

Why scrape and not remote write: ``opentelemetry-exporter-prometheus-remote-write`` (0.66b1)
has no exporter entry point (it must be built in code), needs ``protobuf < 7`` (this
environment has 7.x) and python-snappy; Prometheus 2.42 has no OTLP receiver.

Names: the Python Prometheus exporter and Prometheus 3's OTLP receiver (what users run, see
docs/prometheus.md) translate OTel names alike except for unit ``1``: Prometheus 3 appends
``_ratio`` to such gauges, the Python exporter appends nothing. The files give each metric's
OTel name, unit and kind, so the test knows both names: it checks the dashboard and rules
against the Prometheus 3 names and rewrites each query to the scraped names to run it.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.opskit import (
    HIST_SUFFIXES,
    dashboard_prom_exprs,
    datasource_prom_exprs,
    excused_names,
    excused_reason,
    logged_prometheus_names,
    otlp_to_prometheus_name,
    poll_until,
    promql_names,
    require_tool,
    rule_exprs,
)

pytestmark = pytest.mark.e2e

STEPS = 3
SCRAPE_INTERVAL = "200ms"
RATE_INTERVAL = "5s"
PULL_PORTS = 12

DERIVED_LABELS = {"metric", "severity", "le", "__name__", "alertname", "alertstate"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _free_port_range(n: int) -> int:
    """A first port such that it and the next n - 1 are free now."""
    for _ in range(50):
        first = _free_port()
        if first + n > 65535:
            continue
        try:
            socks = []
            for port in range(first, first + n):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no free port range")


def _python_exporter_name(name: str, unit: str, kind: str) -> str:
    """The name ``opentelemetry-exporter-prometheus`` + prometheus_client expose."""
    from opentelemetry.exporter.prometheus._mapping import map_unit, sanitize_full_name

    out = sanitize_full_name(name)
    suffix = map_unit(unit)
    if suffix and not out.endswith("_" + suffix):
        out += "_" + suffix
    if kind == "counter":
        out = out.removesuffix("_total") + "_total"
    return out


def _instruments(folder: Path) -> dict[str, tuple[str, str]]:
    """OTel metric name -> (unit, kind) as exported into the OTLP JSON files."""
    out: dict[str, tuple[str, str]] = {}
    for path in sorted(folder.glob("metrics-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            for rm in json.loads(line)["resourceMetrics"]:
                for sm in rm["scopeMetrics"]:
                    for m in sm["metrics"]:
                        if "gauge" in m:
                            kind = "gauge"
                        elif "sum" in m:
                            kind = "counter" if m["sum"].get("isMonotonic") else "gauge"
                        elif "histogram" in m:
                            kind = "histogram"
                        else:
                            continue
                        out[m["name"]] = (m.get("unit", ""), kind)
    return out


@dataclass
class LiveRun:
    url: str
    run_id: str
    start: float
    end: float
    output: str
    returncode: int
    instruments: dict[str, tuple[str, str]]
    console: dict[int, dict[str, float]]  # verl's own console log
    prom3_to_scraped: dict[str, str] = field(default_factory=dict)
    _scraped: set[str] | None = None

    def api(self, path: str, **params) -> dict:
        query = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query_range(self, expr: str) -> list:
        return self.api("query_range", query=expr, start=self.start, end=self.end, step="1s")["result"]

    def names(self) -> set[str]:
        return set(self.api("label/__name__/values", start=self.start, end=self.end))

    def has_series(self, prom3_name: str) -> bool:
        """Whether the run was scraped under ``prom3_name`` (a Prometheus 3 name, rewritten)."""
        if self._scraped is None:
            self._scraped = self.names()
        return self.to_scraped(prom3_name) in self._scraped

    def excused(self, where: str, names: set[str]) -> dict[str, str]:
        """opskit's excuse rule on this run: the names it lacks for a known reason; asserts the rest."""
        return excused_names(where, names, logged_prometheus_names(self.console), self.has_series)

    def to_scraped(self, expr: str) -> str:
        """Rewrite the Prometheus 3 names in ``expr`` to the names scraped here."""
        for prom3, scraped in sorted(self.prom3_to_scraped.items(), key=lambda kv: -len(kv[0])):
            if prom3 != scraped:
                expr = re.sub(rf"\b{re.escape(prom3)}(?=(_bucket|_sum|_count)?\b)", scraped, expr)
        return expr

    def substitute(self, expr: str, experiment: str) -> str:
        out = (
            expr.replace("$__rate_interval", RATE_INTERVAL)
            .replace("$__tags", f'verl_run_id="{self.run_id}"')
            .replace("$experiment", experiment)
            .replace("$run", self.run_id)
        )
        assert "$" not in out, f"unknown template variable in {expr!r}"
        return out


@pytest.fixture(scope="module")
def live(tmp_path_factory, verl_runs) -> LiveRun:
    prometheus = require_tool("prometheus")
    root = tmp_path_factory.mktemp("promlive")
    prom_port = _free_port()
    metrics_port = _free_port_range(PULL_PORTS)  # each instrumented process takes the next free one
    config = root / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {SCRAPE_INTERVAL}\n"
        f"  scrape_timeout: {SCRAPE_INTERVAL}\n"
        "scrape_configs:\n"
        "  - job_name: verl\n"
        "    static_configs:\n"
        f"      - targets: {[f'127.0.0.1:{p}' for p in range(metrics_port, metrics_port + PULL_PORTS)]}\n"
    )
    proc = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={root / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--web.enable-remote-write-receiver",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(root / "prometheus.log").open("w"),
    )
    url = f"http://127.0.0.1:{prom_port}"
    try:

        def ready() -> bool:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                return resp.status == 200

        poll_until(f"Prometheus ready ({root / 'prometheus.log'})", ready, 30, every_s=0.2)

        run_id = f"promlive-{uuid.uuid4().hex[:8]}"
        env = {
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "otlp_json_file,prometheus",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
            "OTEL_EXPORTER_PROMETHEUS_PORT": str(metrics_port),
            "OTEL_VERL_RUN_ID": run_id,
        }
        start = time.time()
        result = verl_runs.get("v0", "ppo", steps=STEPS, env=env)
        folder = result.telemetry_dir
        run = LiveRun(
            url, run_id, start, time.time(), result.output, result.returncode, _instruments(folder), result.console
        )
        for name, (unit, kind) in run.instruments.items():
            run.prom3_to_scraped[otlp_to_prometheus_name(name, unit, kind)] = _python_exporter_name(name, unit, kind)
        yield run
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _experiment(live: LiveRun) -> str:
    values = live.api("label/verl_experiment/values", start=live.start, end=live.end)
    assert len(values) == 1, values
    return values[0]


def test_the_run_was_scraped_under_every_emitted_name(live):
    assert live.returncode == 0, live.output[-4000:]
    assert live.instruments, "no metrics in the OTLP files"
    scraped = live.names()
    missing = {
        p3: s
        for p3, s in live.prom3_to_scraped.items()
        if (s not in scraped and not any(s + x in scraped for x in HIST_SUFFIXES))
    }
    assert not missing, f"emitted but not in Prometheus: {missing}"
    # The series carry the run's resource attributes as labels.
    series = live.api("series", **{"match[]": "verl_training_step"}, start=live.start, end=live.end)
    assert {s.get("verl_run_id") for s in series} == {live.run_id}
    assert {s.get("verl_process_role") for s in series} == {"taskrunner"}


def test_scraped_names_equal_prometheus3_otlp_names_except_unit_1_gauges(live):
    differ = {p3: s for p3, s in live.prom3_to_scraped.items() if p3 != s}
    unit_1_gauges = {
        otlp_to_prometheus_name(n, u, k) for n, (u, k) in live.instruments.items() if u == "1" and k == "gauge"
    }
    assert set(differ) <= unit_1_gauges, differ
    for prom3, scraped in differ.items():  # Prometheus 3 adds "_ratio", the Python exporter nothing
        assert prom3 == scraped + "_ratio", (prom3, scraped)


def _dashboard_cases():
    return [(w, e) for w, kind, e in dashboard_prom_exprs() if kind == "expr"] + datasource_prom_exprs()


@pytest.mark.parametrize("where,expr", _dashboard_cases(), ids=[w for w, _ in _dashboard_cases()])
def test_every_dashboard_query_returns_data(live, where, expr):
    names = promql_names(expr).metrics
    excused = live.excused(where, names)  # the others: asserted there
    query = live.to_scraped(live.substitute(expr, _experiment(live)))
    result = live.query_range(query)
    if not result and excused:
        pytest.skip(f"{where}: empty: {excused_reason(excused, names)}")
    assert result, f"{where}: no data for {query}"
    unknown = (
        names
        - set(live.prom3_to_scraped)
        - {n for n in names if n.endswith(HIST_SUFFIXES) and n[: n.rfind("_")] in live.prom3_to_scraped}
    )
    assert not unknown, f"{where}: names not emitted under their Prometheus 3 name: {unknown}"


def test_every_dashboard_variable_query_returns_values(live):
    for where, kind, query in dashboard_prom_exprs():
        if kind != "variable":
            continue
        m = re.match(r"^\s*label_values\s*\((.*),\s*(\w+)\s*\)\s*$", query, re.S)
        assert m, f"{where}: unsupported variable query {query!r}"
        selector = live.to_scraped(live.substitute(m.group(1), ".*"))
        series = live.api("series", **{"match[]": selector}, start=live.start, end=live.end)
        assert {s.get(m.group(2)) for s in series} - {None}, f"{where}: no values for {query}"


_SELECTOR_RE = re.compile(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})")


@pytest.mark.parametrize("where,expr", rule_exprs(), ids=[w for w, _ in rule_exprs()])
def test_every_rule_selector_matches_emitted_series(live, where, expr):
    used = promql_names(expr)
    # Each name on its own: a rule may `or` a failure-only or GPU-only series with ones a run has.
    excused = live.excused(where, used.metrics)
    if excused.keys() == used.metrics:
        pytest.skip(f"{where}: {excused_reason(excused, used.metrics)}")
    labels: set[str] = set()
    for name in sorted(used.metrics - excused.keys()):
        selector = live.to_scraped(name)
        series = live.api("series", **{"match[]": selector}, start=live.start, end=live.end)
        labels |= {k for s in series for k in s}
    # Selectors with matchers (verl_reward_source="score", __name__=~"a|b") match something.
    for m in _SELECTOR_RE.finditer(expr):
        if m.group(1) in {"by", "on", "without", "ignoring", "group_left", "group_right"} or m.group(1) in excused:
            continue
        selector = live.to_scraped(m.group(0))
        assert live.query_range(f"count({selector})"), f"{where}: nothing matches {selector}"
    for m in re.finditer(r'(?<![\w}])\{([^}]*)__name__=~"([^"]+)"([^}]*)\}', expr):
        alternatives = set(m.group(2).split("|")) - excused.keys()  # the names this run has match
        selector = live.to_scraped(f'{{{m.group(1)}__name__=~"{"|".join(sorted(alternatives))}"{m.group(3)}}}')
        assert live.query_range(f"count({selector})"), f"{where}: nothing matches {selector}"
    if not excused:
        missing = used.labels - labels - DERIVED_LABELS
        assert not missing, f"{where}: labels not on any series: {missing}"
