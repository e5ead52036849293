"""The dashboard and the alert rules on a Prometheus 3 with its default OTLP settings, against the kit's.

What a user with their own Prometheus 3 (or Mimir, Grafana Cloud: the same OTLP translation) has:
``--web.enable-otlp-receiver`` and nothing else, so no resource attribute becomes a label (they stay
in ``target_info``). otel-verl puts the series identity (``verl.run.id``, ``verl.experiment``, ...)
on every metric point itself (``otel_verl.process.point_identity``), so the queries need no
``target_info`` join.

Two real runs (test_verl_cpu's v0 PPO and v0 GRPO runs, from the session's ``verl_runs`` cache: no
run of their own) are sent, as their processes exported them (their OTLP JSON metric files, through
``otel-verl replay``'s sender), to three Go-built Prometheus 3 servers:

* ``default``: both runs, an empty configuration (Prometheus' defaults);
* ``kit``: both runs, the ``otlp:`` and ``storage:`` blocks of collector/prometheus/prometheus.yml
  (its promoted resource attributes meet the same names on the points: one label each);
* ``alone``: the chosen run only, default settings: what "exactly the chosen run" looks like.

Then, with the PPO run chosen: the dashboard's variables list both runs' experiments and both
runs; every Prometheus query of the dashboard (and of the data sources' trace-to-metrics links)
returns series, the same on ``default`` as on ``alone`` (nothing of the other run merged in) and
as on ``kit``; and every series an alert rule reads carries the labels the rule groups by.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support.opskit import (
    PROM_CONFIG,
    dashboard_prom_exprs,
    datasource_prom_exprs,
    excused_names,
    excused_reason,
    logged_prometheus_names,
    poll_until,
    promql_names,
    rule_exprs,
    stack_bin_dir,
)
from verl_cpu_harness.ports import free_ports

from otel_verl import semconv, stack
from otel_verl.offline.http_post import Poster
from otel_verl.offline.replay import RETRIES, RETRY_STATUS, replay_signal

pytestmark = [pytest.mark.e2e, pytest.mark.live_stack]  # late: the Go-built Prometheus, test_verl_cpu's runs

RUNS = (("v0", "ppo"), ("v0", "grpo"))  # test_verl_cpu's (steps=2); the first is chosen
STEPS = 2
RATE_INTERVAL = "10m"  # $__rate_interval: wider than a CPU run, whose metrics leave at step ends only
IDENTITY_LABELS = {re.sub(r"[^A-Za-z0-9_]", "_", k) for k in semconv.RES_SERIES_IDENTITY}
DERIVED_LABELS = {"metric", "severity", "le", "__name__", "alertname", "alertstate"}


@dataclass
class Prom:
    """One Prometheus 3 on 127.0.0.1."""

    name: str
    url: str
    proc: subprocess.Popen
    log: Path

    def api(self, path: str, **params) -> object:
        query = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as resp:  # noqa: S310
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]


@dataclass
class RunData:
    run_id: str
    experiment: str
    folder: Path
    console: dict[int, dict[str, float]]


@dataclass
class Backends:
    default: Prom
    kit: Prom
    alone: Prom
    chosen: RunData
    other: RunData
    start: float
    end: float
    step: float
    send_s: float

    def query_range(self, prom: Prom, expr: str) -> list[dict]:
        return prom.api("query_range", query=expr, start=self.start, end=self.end, step=self.step)["result"]

    def series(self, prom: Prom, selector: str) -> list[dict[str, str]]:
        return prom.api("series", **{"match[]": selector}, start=self.start, end=self.end)

    def names_of(self, run: RunData) -> set[str]:
        return set(
            self.default.api(
                "label/__name__/values",
                **{"match[]": f'{{verl_run_id="{run.run_id}"}}'},
                start=self.start,
                end=self.end,
            )
        )

    def substitute(self, expr: str, run: RunData) -> str:
        out = (
            expr.replace("$__rate_interval", RATE_INTERVAL)
            .replace("$__tags", f'verl_run_id="{run.run_id}"')
            .replace("$experiment", re.escape(run.experiment))
            .replace("$run", re.escape(run.run_id))
        )
        assert "$" not in out, f"unknown template variable in {expr!r}"
        return out


def _start(binary: str, root: Path, name: str, config: str, port: int) -> Prom:
    folder = root / name
    folder.mkdir()
    (folder / "prometheus.yml").write_text(config)
    log = folder / "prometheus.log"
    proc = subprocess.Popen(  # noqa: S603 - the Go-built Prometheus, our own arguments
        [
            binary,
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-otlp-receiver",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    return Prom(name, f"http://127.0.0.1:{port}", proc, log)


def _ready(prom: Prom) -> bool:
    with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as resp:  # noqa: S310
        return resp.status == 200


def _send(prom: Prom, folder: Path) -> None:
    """The run's metric files as its processes exported them, OTLP/HTTP JSON, a line a request."""
    result = replay_signal(
        Poster(RETRIES, RETRY_STATUS), folder, "metrics", f"{prom.url}/api/v1/otlp/v1/metrics", {}, 30
    )
    assert result.requests and result.ok, (prom.name, result.errors, prom.log.read_text()[-2000:])


def _time_range(folders: list[Path]) -> tuple[float, float]:
    """The first and last point time (unix seconds) of the runs' metric files."""
    times = [
        int(t) / 1e9
        for folder in folders
        for path in folder.glob("metrics-*.jsonl")
        for t in re.findall(r'"timeUnixNano":\s*"?(\d+)', path.read_text())
    ]
    return min(times), max(times)


def _resource_value(folder: Path, key: str) -> str:
    for path in sorted(folder.glob("metrics-taskrunner-*.jsonl")):
        for line in path.read_text().splitlines():
            for rm in json.loads(line)["resourceMetrics"]:
                for a in rm["resource"]["attributes"]:
                    if a["key"] == key:
                        return str(next(iter(a["value"].values())))
    raise AssertionError(f"no {key} on the TaskRunner's metrics in {folder}")


def kit_config() -> str:
    """The kit's OTLP and storage settings (its rules, scrape jobs and Alertmanager are not here)."""
    kit = yaml.safe_load(PROM_CONFIG.read_text())
    return yaml.safe_dump({"otlp": kit["otlp"], "storage": kit["storage"]})


@pytest.fixture(scope="module")
def backends(verl_runs, tmp_path_factory) -> Iterator[Backends]:
    runs = []
    for driver, algo in RUNS:
        run = verl_runs.get(driver, algo, steps=STEPS)
        assert run.returncode == 0, run.output[-3000:]
        folder = run.telemetry_dir
        runs.append(
            RunData(
                _resource_value(folder, semconv.RES_RUN_ID),
                _resource_value(folder, semconv.RES_EXPERIMENT),
                folder,
                run.console,
            )
        )
    chosen, other = runs
    assert chosen.run_id != other.run_id
    binary = stack.binaries.find_binaries(stack_bin_dir(), ("prometheus",))["prometheus"]
    root = tmp_path_factory.mktemp("promdefault")
    ports = free_ports(["default", "kit", "alone"])
    started = time.monotonic()
    proms = {
        "default": _start(
            binary, root, "default", "# Prometheus 3's defaults: no resource attribute promoted\n", ports["default"]
        ),
        "kit": _start(binary, root, "kit", kit_config(), ports["kit"]),
        "alone": _start(binary, root, "alone", "# Prometheus 3's defaults\n", ports["alone"]),
    }
    try:
        for prom in proms.values():
            poll_until(f"Prometheus {prom.name} ready ({prom.log})", lambda p=prom: _ready(p), 60, every_s=0.2)
        for run in (chosen, other):  # in time order per series: each series is one process's
            _send(proms["default"], run.folder)
            _send(proms["kit"], run.folder)
        _send(proms["alone"], chosen.folder)
        first, last = _time_range([chosen.folder, other.folder])
        start, end = math.floor(first) - 60, math.ceil(last) + 60
        yield Backends(
            proms["default"],
            proms["kit"],
            proms["alone"],
            chosen,
            other,
            start,
            end,
            max(1.0, math.ceil((end - start) / 2000)),
            time.monotonic() - started,
        )
    finally:
        for prom in proms.values():
            prom.proc.terminate()
        for prom in proms.values():
            try:
                prom.proc.wait(10)
            except subprocess.TimeoutExpired:
                prom.proc.kill()


def test_default_settings_promote_nothing(backends):
    """The premise: the default server made no label of a resource attribute (target_info has them),
    so every identity label on a series came from the points."""
    info = backends.series(backends.default, "target_info")
    ours = [s for s in info if s.get("verl_process_role")]
    assert ours and all(s.get("verl_run_id") for s in ours)  # the resource attribute, in target_info
    # the rest: the launchers' distro providers (their system metrics, replayed with the runs: the
    # ``distro-*`` files), built before otel-verl set the run's identity
    assert all(s.get("telemetry_auto_version") and not s.get("verl_run_id") for s in info if s not in ours)
    step = backends.series(backends.default, "verl_training_step")
    assert {s["verl_run_id"] for s in step} == {backends.chosen.run_id, backends.other.run_id}
    print(f"three Prometheus servers started and fed with two runs in {backends.send_s:.1f} s")


def _variable_values(backends: Backends, prom, query: str, experiment: str) -> set[str]:
    m = re.match(r"^\s*label_values\s*\((.*),\s*(\w+)\s*\)\s*$", query, re.S)
    assert m, f"unsupported variable query {query!r}"
    selector = m.group(1).replace("$experiment", experiment)
    assert "$" not in selector, selector
    return {s[m.group(2)] for s in backends.series(prom, selector) if m.group(2) in s}


def test_the_dashboard_variables_offer_both_runs(backends):
    chosen, other = backends.chosen, backends.other
    variables = {where.rsplit(":", 1)[1]: q for where, kind, q in dashboard_prom_exprs() if kind == "variable"}
    assert set(variables) == {"experiment", "run"}, variables
    for prom in (backends.default, backends.kit):
        assert _variable_values(backends, prom, variables["experiment"], ".*") == {chosen.experiment, other.experiment}
        assert _variable_values(backends, prom, variables["run"], ".*") == {chosen.run_id, other.run_id}
        picked = _variable_values(backends, prom, variables["run"], re.escape(chosen.experiment))
        assert chosen.run_id in picked
        if chosen.experiment != other.experiment:
            assert other.run_id not in picked


def _dashboard_cases() -> list[tuple[str, str]]:
    return [(w, e) for w, kind, e in dashboard_prom_exprs() if kind == "expr"] + datasource_prom_exprs()


def _canonical(result: list[dict]) -> list[tuple]:
    return sorted((tuple(sorted(r["metric"].items())), tuple(map(tuple, r["values"]))) for r in result)


@pytest.mark.parametrize("where,expr", _dashboard_cases(), ids=[w for w, _ in _dashboard_cases()])
def test_every_dashboard_query_shows_the_chosen_run_alone(backends, where, expr):
    chosen = backends.chosen
    names = promql_names(expr).metrics
    present = backends.names_of(chosen)
    excused = excused_names(where, names, logged_prometheus_names(chosen.console), present.__contains__)
    query = backends.substitute(expr, chosen)
    got = backends.query_range(backends.default, query)
    if not got and excused:
        pytest.skip(f"{where}: empty: {excused_reason(excused, names)}")
    assert got, f"{where}: no data on default settings for {query}"
    assert _canonical(got) == _canonical(backends.query_range(backends.alone, query)), (
        f"{where}: the other run is merged into {query}"
    )
    assert _canonical(got) == _canonical(backends.query_range(backends.kit, query)), (
        f"{where}: default and kit settings answer {query} differently"
    )


def _grouping(expr: str) -> set[str]:
    return {
        label.strip()
        for m in re.finditer(r"\b(?:by|on)\s*\(([^()]*)\)", expr)
        for label in m.group(1).split(",")
        if label.strip()
    }


@pytest.mark.parametrize("where,expr", rule_exprs(), ids=[w for w, _ in rule_exprs()])
def test_every_rule_groups_by_labels_its_series_have(backends, where, expr):
    names = promql_names(expr).metrics
    present = backends.names_of(backends.chosen) | backends.names_of(backends.other)
    logged = logged_prometheus_names(backends.chosen.console) | logged_prometheus_names(backends.other.console)
    excused = excused_names(where, names, logged, present.__contains__)
    read = sorted(names - excused.keys())
    if not read:
        pytest.skip(f"{where}: {excused_reason(excused, names)}")
    grouping = _grouping(expr) - DERIVED_LABELS
    seen: set[str] = set()
    for name in read:
        series = backends.series(backends.default, name)
        assert series, f"{where}: no series {name}"
        for s in series:  # the identity is on every series, whatever made it
            assert not (grouping & IDENTITY_LABELS) - s.keys(), f"{where}: {name} series {s} lacks an identity label"
        seen |= {k for s in series for k in s}
    if not excused:
        assert not grouping - seen, f"{where}: grouped by labels no series has: {grouping - seen}"
