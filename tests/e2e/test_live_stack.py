"""A real verl run on CPU -> OTLP gRPC -> the real Collector -> Prometheus 3, Jaeger v2, VictoriaLogs.

The module fixture brings the stack of ``otel-verl stack up`` (the configs of ``collector/``) up on
free ports with its data under tmp; each driver (v1, v0) then runs GRPO for 2 steps
``opentelemetry-instrument``-ed, exporting every signal over OTLP gRPC to the stack's Collector
(traces and logs also to OTLP JSON files: the ground truth of what the processes sent). Each
signal is then read back through its backend's query API, after bounded polling, and checked
against verl's own console log:

* Prometheus: every finite value verl logged for a step, at that step's sample timestamp (the
  ``verl_training_step`` sample equal to the step), under the name
  ``otel_verl.instruments.prometheus`` derives (the names the dashboards and rules use);
* Jaeger: each step's trace (``/api/traces?service=...``) with its stage and worker spans and the
  trajectory spans (v0: in the step's trace; v1: their own traces, linked to the step's gen
  span), from at least three processes; the slowest trajectory of a step found by duration;
* VictoriaLogs: every log record the processes sent, with the run's resource attributes, and the
  sampled generations with their step's trace id;
* every PromQL of the kit (dashboard panels, variables, annotation, the Tempo data source's
  trace-to-metrics links, every rule's selectors) on this Prometheus with Grafana's template
  variables substituted for the run; GPU-only, PPO-only and failure-only ones skip, naming why,
  and the failure-only ones are proven on a third run with a NaN fault instead;
* what a person looks at (docs/stack.md), in Chromium: ``otel-verl report --jaeger URL --run RUN_ID``'s
  page of the run's steps from Jaeger's API v3, and Prometheus's own web UI querying the run;
* alerting: that NaN run fires VerlNonFiniteLossOrGradNorm in Prometheus, and Alertmanager
  delivers it to a webhook receiver on 127.0.0.1:5001 (alertmanager.yml's) with the run's
  labels; the healthy runs fire nothing.

Needs the binaries of ``bash scripts/backends.sh`` (or release binaries on PATH); skips without.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.components import require_chromium
from support.opskit import (
    ALERT_STATE,
    FAILURE_ONLY,
    STALL_ONLY,
    StackAPI,
    all_used_names,
    dashboard_prom_exprs,
    datasource_prom_exprs,
    excused_names,
    excused_reason,
    file_log_records,
    get_json,
    logged_prometheus_names,
    poll_until,
    promql_names,
    require,
    rule_exprs,
    running_stack,
)

from otel_verl import semconv
from otel_verl.instruments import catalog
from otel_verl.instruments.prometheus import prometheus_name, translate
from otel_verl.offline.otlp_files import SpanRecord, read_spans

pytestmark = [pytest.mark.e2e, pytest.mark.live_stack]

STEPS = 2
DRIVERS = ["v1", "v0"]
POLL_S = 60.0  # the Collector batches for up to 2 s per exporter, Jaeger's own batch 200 ms; margin for 2 cores
CORE_STAGES = {"gen", "old_log_prob", "adv", "update_actor", "update_weights"}
STAGES_SUMMED = ("gen", "update_actor", "step")  # stage histogram sums compared with verl's timings
SAMPLES = {"OTEL_VERL_SAMPLES": "true", "OTEL_VERL_SAMPLES_EVERY_N_STEPS": "1", "OTEL_VERL_SAMPLES_PER_STEP": "2"}


# ---------------------------------------------------------------------------------------------
# HTTP helpers


def _until(what: str, probe: Callable[[], Any], timeout_s: float = POLL_S) -> Any:
    """``poll_until``, a failed assertion in ``probe`` (a backend's partial answer) retried too."""
    return poll_until(what, probe, timeout_s, retry_on=(OSError, ValueError, KeyError, AssertionError))


# ---------------------------------------------------------------------------------------------
# Fixtures


class Stack(StackAPI):
    def jaeger(self, path: str, **params: Any) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return get_json(f"{self.url('jaeger')}/api/{path}{query}")


@pytest.fixture(scope="module")
def live_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory, "live-stack") as (_, data_dir, ports):
        yield Stack(ports, data_dir)


@dataclass
class LiveRun:
    driver: str
    run_id: str
    service: str
    console: dict[int, dict[str, float]]
    spans: list[SpanRecord]  # what the processes sent (OTLP JSON files next to the OTLP exporter)
    log_lines: int  # log records the processes sent (same files)
    stack: Stack
    start: float  # unix seconds around the run, for range queries
    end: float
    cache: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module", params=DRIVERS)
def run(request: pytest.FixtureRequest, live_stack: Stack, run_verl_instrumented, tmp_path_factory) -> LiveRun:
    driver = request.param
    run_id = f"live-{driver}-{uuid.uuid4().hex[:8]}"
    service = f"verl-live-{driver}"
    env = {
        # OTLP to the Collector; the files only record what was sent, for the comparison.
        "OTEL_TRACES_EXPORTER": "otlp,otlp_json_file",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_LOGS_EXPORTER": "otlp,otlp_json_file",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": live_stack.url("otlp-grpc"),
        "OTEL_VERL_RUN_ID": run_id,
        "OTEL_SERVICE_NAME": service,
        **SAMPLES,
    }
    workdir = tmp_path_factory.mktemp(f"live-{driver}")
    start = time.time()
    result = run_verl_instrumented(workdir, driver, "grpo", env=env, steps=STEPS)
    assert result.returncode == 0, result.output[-4000:]
    # Step 0: the validation before training, logged by verl like a step.
    assert sorted(result.console) == list(range(STEPS + 1)), sorted(result.console)
    spans = read_spans(result.telemetry_dir)
    assert spans, "the file exporter next to OTLP wrote no spans"
    logs = sum(1 for _ in file_log_records(result.telemetry_dir))
    return LiveRun(driver, run_id, service, result.console, spans, logs, live_stack, start, time.time())


# ---------------------------------------------------------------------------------------------
# Metrics


def _same(exported: float, logged: float) -> bool:
    """Equal, allowing for verl printing float32 values in float32 precision."""
    return exported == logged or bool(np.float32(exported) == np.float32(logged))


# Labels every series of a process carries (promoted resource attributes, job and instance).
RESOURCE_LABELS = (
    "job",
    "instance",
    "verl_run_id",
    "verl_project",
    "verl_experiment",
    "verl_process_role",
    "verl_rank",
    "host_name",
)


def _raw_samples(run: LiveRun) -> dict[tuple[str, tuple], dict[int, float]]:
    """(name, other labels) -> {timestamp ms: value} of every TaskRunner series of the run."""
    if "samples" not in run.cache:
        selector = f'{{verl_run_id="{run.run_id}", verl_process_role="{semconv.ROLE_TASKRUNNER}"}}[1h]'

        def fetch() -> dict[tuple[str, tuple], dict[int, float]]:
            out: dict[tuple[str, tuple], dict[int, float]] = {}
            for series in run.stack.prom("query", query=selector, time=time.time())["result"]:
                labels = dict(series["metric"])
                name = labels.pop("__name__")
                for k in RESOURCE_LABELS:
                    labels.pop(k, None)
                key = (name, tuple(sorted(labels.items())))
                out[key] = {round(float(ts) * 1000): float(v) for ts, v in series["values"]}
            return out

        def complete() -> dict[tuple[str, tuple], dict[int, float]]:
            # The Collector may split one collection over export requests: wait until every series
            # the tests read has its sample at each step's timestamp, not for the first part only.
            out = fetch()
            at = _step_times(out)
            missing = [
                (n, key) for n, keys in _read_at_steps(run).items() for key in keys if at.get(n) not in out.get(key, {})
            ]
            assert not missing, f"{len(missing)} samples not at their step's timestamp yet, e.g. {missing[:5]}"
            return out

        run.cache["samples"] = _until(f"run {run.run_id}'s steps in Prometheus", complete)
    return run.cache["samples"]


def _read_at_steps(run: LiveRun) -> dict[int, set[tuple[str, tuple]]]:
    """step -> the TaskRunner series the tests read at that step's timestamp: every finite value verl
    logged for it and the named instruments of ``test_every_logged_value_is_in_prometheus_at_its_step``."""
    named = {
        (prometheus_name(catalog.REWARD), (("verl_reward_source", "score"),)),
        (prometheus_name(catalog.KL), (("verl_kl_source", semconv.KL_KEYS["actor/ppo_kl"]),)),
        (prometheus_name(catalog.THROUGHPUT), ()),
        (prometheus_name(catalog.TRAINING_STEPS), ()),
        (prometheus_name(catalog.LAST_STEP_TIMESTAMP), ()),
    }
    out = {
        n: named
        | {
            (prometheus_name(catalog.logged_value(k)), ())
            for k, v in run.console[n].items()
            if math.isfinite(v) and k != semconv.STEP_KEY
        }
        for n in range(1, STEPS + 1)
    }
    hist = prometheus_name(catalog.STAGE_DURATION)  # its sums are read at the last step
    out[STEPS] |= {
        (hist + suffix, (("verl_stage", stage),)) for suffix in ("_sum", "_count") for stage in STAGES_SUMMED
    }
    return out


def _step_times(samples: dict[tuple[str, tuple], dict[int, float]]) -> dict[int, int]:
    """step -> timestamp (ms) of the first collection after it: where verl_training_step == step."""
    out: dict[int, int] = {}
    for ts, value in sorted(samples.get((prometheus_name(catalog.TRAINING_STEP), ()), {}).items()):
        out.setdefault(int(value), ts)
    return out


def test_every_logged_value_is_in_prometheus_at_its_step(run: LiveRun) -> None:
    samples = _raw_samples(run)
    at = _step_times(samples)
    assert sorted(at) == list(range(1, STEPS + 1)), at
    names: dict[str, str] = {}
    for n in sorted(run.console):
        checked = 0
        for key, value in run.console[n].items():
            if not math.isfinite(value):
                continue  # a NaN is counted (verl_training_nonfinite_total), not stored as a value
            # verl's step number is carried by verl.training.step, not forwarded a second time
            spec = catalog.TRAINING_STEP if key == semconv.STEP_KEY else catalog.logged_value(key)
            name = prometheus_name(spec)
            assert names.setdefault(name, key) == key, f"{key} and {names[name]} share the name {name}"
            series = samples.get((name, ()))
            assert series is not None, f"step {n}: {key} not in Prometheus as {name}"
            if n == 0:
                # The validation before training sets no verl_training_step: its values are the
                # ones exported before step 1's collection.
                before = [ts for ts in series if ts < at[1]]
                assert before, f"step 0: {name} has no sample before step 1"
                ts = max(before)
            else:
                ts = at[n]
                assert ts in series, f"step {n}: {name} has no sample at the step's timestamp {ts}"
            assert _same(series[ts], value), (n, key, name, series[ts], value)
            checked += 1
        assert checked >= (50 if n else 1), (n, checked)  # verl logs ~100 keys per training step

    # The named instruments the dashboard and rules query, under the names they use.
    used = all_used_names().metrics
    reward = (prometheus_name(catalog.REWARD), (("verl_reward_source", "score"),))
    kl_key = "actor/ppo_kl"
    kl = (prometheus_name(catalog.KL), (("verl_kl_source", semconv.KL_KEYS[kl_key]),))
    throughput = (prometheus_name(catalog.THROUGHPUT), ())
    steps_total = (prometheus_name(catalog.TRAINING_STEPS), ())
    heartbeat = (prometheus_name(catalog.LAST_STEP_TIMESTAMP), ())
    for name, _ in (reward, kl, throughput, heartbeat):  # (steps_total: for users' own queries)
        assert name in used, f"{name}: not a name the dashboard or rules use"
    for n in range(1, STEPS + 1):
        logged, ts = run.console[n], at[n]
        assert _same(samples[reward][ts], logged["critic/score/mean"])
        assert _same(samples[kl][ts], logged[kl_key])
        assert _same(samples[throughput][ts], logged[semconv.THROUGHPUT_KEY])
        assert samples[steps_total][ts] == n
        assert abs(samples[heartbeat][ts] - ts / 1000) < 60  # unix seconds, near the collection
    # The stage histogram: one observation per step and stage, summing verl's timings.
    hist = prometheus_name(catalog.STAGE_DURATION)
    assert hist + "_bucket" in used
    for stage in STAGES_SUMMED:
        key = (hist + "_sum", (("verl_stage", stage),))
        count = (hist + "_count", (("verl_stage", stage),))
        last = at[STEPS]
        assert samples[count][last] == STEPS
        total = sum(run.console[n][f"timing_s/{stage}"] for n in range(1, STEPS + 1))
        assert samples[key][last] == pytest.approx(total, rel=1e-6, abs=1e-6)


def test_prometheus_names_follow_the_translation_the_kit_assumes(run: LiveRun) -> None:
    """Names Prometheus 3 built itself (UnderscoreEscapingWithSuffixes), against translate()."""
    samples = _raw_samples(run)
    present = {name for name, _ in samples}
    expected = {
        translate(semconv.M_LAST_STEP_TIMESTAMP, "s", catalog.GAUGE): "verl_training_last_step_timestamp_seconds",
        translate(semconv.M_THROUGHPUT, "{token}/s", catalog.GAUGE): "verl_training_throughput_per_second",
        translate(semconv.M_TRAINING_STEPS, "{step}", catalog.COUNTER): "verl_training_steps_total",
        translate(semconv.M_TRAINING_STEP, "{step}", catalog.GAUGE): "verl_training_step",
    }
    for derived, literal in expected.items():
        assert derived == literal and literal in present, (derived, literal)
    # The process.* system metrics come through the same path (the dashboard's host panels).
    assert "process_cpu_time_seconds_total" in present, sorted(n for n in present if n.startswith("process"))


# ---------------------------------------------------------------------------------------------
# Traces


def _tags(items: list[dict]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in items}


@dataclass
class JSpan:
    trace_id: str
    span_id: str
    name: str
    duration_us: int
    tags: dict[str, Any]
    process: dict[str, Any]
    refs: list[dict]
    logs: list[dict]


def _jaeger_spans(trace: dict) -> list[JSpan]:
    procs = {pid: _tags(p["tags"]) | {"service.name": p["serviceName"]} for pid, p in trace["processes"].items()}
    return [
        JSpan(
            s["traceID"],
            s["spanID"],
            s["operationName"],
            s["duration"],
            _tags(s["tags"]),
            procs[s["processID"]],
            s.get("references") or [],
            s.get("logs") or [],
        )
        for s in trace["spans"]
    ]


def _traces(run: LiveRun) -> dict[str, list[JSpan]]:
    """trace id -> its spans in Jaeger, once every span the processes sent is there."""
    if "traces" not in run.cache:
        sent = {s.span_id for s in run.spans}

        def fetch() -> dict[str, list[JSpan]]:
            found = run.stack.jaeger("traces", service=run.service, lookback="1h", limit=100000)["data"]
            out = {t["traceID"]: _jaeger_spans(t) for t in found}
            got = {s.span_id for spans in out.values() for s in spans}
            return out if sent <= got else {}

        run.cache["traces"] = _until(f"{len(sent)} spans of {run.run_id} in Jaeger", fetch)
    return run.cache["traces"]


def _step_traces(run: LiveRun) -> dict[int, list[JSpan]]:
    out: dict[int, list[JSpan]] = {}
    for spans in _traces(run).values():
        for s in spans:
            if s.name == semconv.SPAN_STEP:
                out[int(s.tags[semconv.ATTR_STEP])] = spans
    return out


def _trajectories(run: LiveRun, step: int) -> list[JSpan]:
    return [
        s
        for spans in _traces(run).values()
        for s in spans
        if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY
        and int(s.tags[semconv.ATTR_ROLLOUT_SUBMIT_STEP]) == step
        and not s.tags[semconv.ATTR_ROLLOUT_VALIDATE]
    ]


def test_every_sent_span_is_in_jaeger_with_ids_names_and_resource(run: LiveRun) -> None:
    by_id = {s.span_id: s for spans in _traces(run).values() for s in spans}
    for sent in run.spans:
        got = by_id[sent.span_id]
        assert (got.trace_id, got.name) == (sent.trace_id, sent.name)
        assert abs(got.duration_us - (sent.end_ns - sent.start_ns) / 1000) <= 1
        assert got.process[semconv.RES_RUN_ID] == run.run_id
        assert got.process["service.name"] == run.service


def test_each_step_trace_holds_stage_worker_and_trajectory_spans_from_three_processes(run: LiveRun) -> None:
    steps = _step_traces(run)
    assert sorted(steps) == list(range(1, STEPS + 1))
    for n, spans in steps.items():
        stages = {s.tags[semconv.ATTR_STAGE] for s in spans if semconv.ATTR_STAGE in s.tags}
        timed = {k.split("/", 1)[1] for k in run.console[n] if k.startswith("timing_s/") and k.count("/") == 1}
        timed -= {"step", "start_profile", "stop_profile"}  # v0's profiler stages: no span with the profiler off
        assert CORE_STAGES <= timed <= stages, (n, sorted(timed), sorted(stages))
        workers = [s for s in spans if s.name.startswith(semconv.SPAN_WORKER_PREFIX)]
        assert {"verl.worker.compute_log_prob", "verl.worker.update_actor"} <= {s.name for s in workers}
        assert {s.process[semconv.RES_ROLE] for s in workers} == {semconv.ROLE_WORKER}
        trajs = _trajectories(run, n)
        assert len(trajs) >= 4 * 2, len(trajs)  # train_batch_size x rollout.n
        (gen,) = [s for s in spans if s.name == semconv.SPAN_GEN]
        if run.driver == "v0":
            # v0: inside the step's trace, under the gen stage.
            assert {t.trace_id for t in trajs} == {spans[0].trace_id}
        else:
            # v1: each a root of its own trace (the rollout outlives the dispatch), linked to the
            # step's gen span: Jaeger shows the OTLP link as a FOLLOWS_FROM reference.
            for t in trajs:
                assert t.trace_id != gen.trace_id
                refs = {(r["refType"], r["traceID"], r["spanID"]) for r in t.refs}
                assert ("FOLLOWS_FROM", gen.trace_id, gen.span_id) in refs, t.refs
        members = spans + trajs
        pids = {s.process["process.pid"] for s in members}
        roles = {s.process[semconv.RES_ROLE] for s in members}
        assert len(pids) >= 3, pids
        assert {semconv.ROLE_TASKRUNNER, semconv.ROLE_WORKER, semconv.ROLE_AGENT_LOOP} <= roles, roles


def test_the_slowest_trajectory_of_a_step_is_found_through_the_api(run: LiveRun) -> None:
    _traces(run)  # everything is in
    for n in range(1, STEPS + 1):
        trajs = _trajectories(run, n)
        slowest = max(trajs, key=lambda s: s.duration_us)
        # Through the query API: trajectory spans at least that long, of this service.
        found = run.stack.jaeger(
            "traces",
            service=run.service,
            operation=semconv.SPAN_ROLLOUT_TRAJECTORY,
            minDuration=f"{slowest.duration_us}us",
            lookback="1h",
            limit=1000,
        )["data"]
        longest = [
            s
            for t in found
            for s in _jaeger_spans(t)
            if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY
            and s.duration_us >= slowest.duration_us
            and int(s.tags[semconv.ATTR_ROLLOUT_SUBMIT_STEP]) == n
            and not s.tags[semconv.ATTR_ROLLOUT_VALIDATE]
        ]
        assert [s.span_id for s in longest] == [slowest.span_id], (n, [(s.span_id, s.duration_us) for s in longest])
        # And it is the one otel-verl named in the step's slowest-trajectory event (v0 on the
        # rollout batch span, v1 on a verl.rollout.tail span).
        events = [
            _tags(log["fields"])
            for spans in _traces(run).values()
            for s in spans
            if s.name in (semconv.SPAN_ROLLOUT_BATCH, semconv.SPAN_ROLLOUT_TAIL)
            for log in s.logs
            if _tags(log["fields"]).get("event") == semconv.EVENT_SLOWEST_TRAJECTORY
        ]
        named = [
            e for e in events if int(e[semconv.ATTR_ROLLOUT_SUBMIT_STEP]) == n and not e[semconv.ATTR_ROLLOUT_VALIDATE]
        ]
        assert [e[semconv.ATTR_ROLLOUT_SLOWEST_SPAN_ID] for e in named] == [slowest.span_id], named


# ---------------------------------------------------------------------------------------------
# Logs


def _logs(run: LiveRun) -> list[dict]:
    if "logs" not in run.cache:
        query = f'"{semconv.RES_RUN_ID}":="{run.run_id}"'
        run.cache["logs"] = _until(
            f"{run.log_lines} log records of {run.run_id} in VictoriaLogs",
            lambda: (got := run.stack.logsql(query)) and len(got) >= run.log_lines and got,
        )
    return run.cache["logs"]


def test_every_log_record_is_in_victorialogs_with_the_run_resource(run: LiveRun) -> None:
    records = _logs(run)
    assert run.log_lines > 0
    assert len(records) == run.log_lines, (len(records), run.log_lines)
    for r in records:
        assert r["service.name"] == run.service
        assert r[semconv.RES_PROJECT] == "verl_cpu_harness"
        assert r[semconv.RES_EXPERIMENT] == f"{run.driver}_grpo"
        assert r[semconv.RES_ROLE] and r["process.pid"]


def test_sampled_generations_carry_their_step_trace_id(run: LiveRun) -> None:
    records = _logs(run)
    step_trace = {n: spans[0].trace_id for n, spans in _step_traces(run).items()}
    by_step: dict[int, list[dict]] = defaultdict(list)
    for r in records:
        if semconv.ATTR_SAMPLE_INDEX in r:
            by_step[int(r[semconv.ATTR_STEP])].append(r)
    assert sorted(by_step) == list(range(1, STEPS + 1)), sorted(by_step)
    for n, samples in by_step.items():
        assert len(samples) == int(SAMPLES["OTEL_VERL_SAMPLES_PER_STEP"])
        for r in samples:
            assert r["trace_id"] == step_trace[n]
            assert r["span_id"]
            assert r[semconv.ATTR_DATA_SOURCE] == "tiny_add"
    # LogsQL finds a step's records by the trace id Jaeger shows for that step.
    for n, trace_id in step_trace.items():
        hits = run.stack.logsql(f'trace_id:="{trace_id}"')
        assert {r["_stream_id"] for r in hits} and all(r["trace_id"] == trace_id for r in hits)
        assert len([r for r in hits if semconv.ATTR_SAMPLE_INDEX in r]) == len(by_step[n])


# ---------------------------------------------------------------------------------------------
# Every PromQL of the kit on this live Prometheus (Prometheus 3 names as they are, no rewriting)

RATE_INTERVAL = "1m"  # $__rate_interval: spans a 2-step run's collections (pushed at step ends)
_SELECTOR_RE = re.compile(r"\b([A-Za-z_:][A-Za-z0-9_:]*)\s*\{")


def _substitute(run: LiveRun, expr: str) -> str:
    """Grafana's template variables, as it expands them for one selected run."""
    out = (
        expr.replace("$__rate_interval", RATE_INTERVAL)
        .replace("$__tags", f'verl_run_id="{run.run_id}"')
        .replace("$experiment", f"{run.driver}_grpo")
        .replace("$run", run.run_id)
    )
    assert "$" not in out.replace('"$1"', ""), f"unknown template variable in {expr!r}"
    return out


def _excused(run: LiveRun, where: str, names: set[str]) -> dict[str, str]:
    """opskit's excuse rule on this run: the names it lacks for a known reason; asserts the rest."""
    return excused_names(where, names, logged_prometheus_names(run.console), lambda name: _has_series(run, name))


def _has_series(run: LiveRun, name: str) -> bool:
    """Whether Prometheus has a series ``name`` of this run (cached per run)."""
    key = f"series:{name}"
    if key not in run.cache:
        match = f'{name}{{verl_run_id="{run.run_id}"}}'
        run.cache[key] = bool(run.stack.prom("series", **{"match[]": match}, start=run.start, end=time.time()))
    return run.cache[key]


def _query_range(run: LiveRun, expr: str) -> list:
    return run.stack.prom("query_range", query=expr, start=run.start, end=time.time(), step="1s")["result"]


def _dashboard_cases() -> list[tuple[str, str]]:
    return [(w, e) for w, kind, e in dashboard_prom_exprs() if kind == "expr"] + datasource_prom_exprs()


@pytest.mark.parametrize("where,expr", _dashboard_cases(), ids=[w for w, _ in _dashboard_cases()])
def test_every_dashboard_query_returns_data_live(run: LiveRun, where: str, expr: str) -> None:
    _raw_samples(run)  # the run's metrics are in
    excused = _excused(run, where, promql_names(expr).metrics)  # the others: asserted there
    result = _query_range(run, _substitute(run, expr))
    if not result and excused:
        pytest.skip(f"{where}: empty: {excused_reason(excused, promql_names(expr).metrics)}")
    assert result, f"{where}: no data for {_substitute(run, expr)}"
    # Only this run's series answered (the variables select it).
    for series in result:
        assert series["metric"].get("verl_run_id", run.run_id) == run.run_id, series["metric"]


def test_every_dashboard_variable_query_returns_this_run(run: LiveRun) -> None:
    _raw_samples(run)
    found: dict[str, set[str]] = {}
    for where, kind, query in dashboard_prom_exprs():
        if kind != "variable":
            continue
        m = re.match(r"^\s*label_values\s*\((.*),\s*(\w+)\s*\)\s*$", query, re.S)
        assert m, f"{where}: unsupported variable query {query!r}"
        selector = _substitute(run, m.group(1))
        series = run.stack.prom("series", **{"match[]": selector}, start=run.start, end=time.time())
        found[m.group(2)] = {s.get(m.group(2)) for s in series} - {None}
    assert f"{run.driver}_grpo" in found["verl_experiment"], found
    assert run.run_id in found["verl_run_id"], found


@pytest.mark.parametrize("where,expr", rule_exprs(), ids=[w for w, _ in rule_exprs()])
def test_every_rule_selector_matches_this_runs_series_live(run: LiveRun, where: str, expr: str) -> None:
    _raw_samples(run)
    used = promql_names(expr)
    # Each name on its own: a rule may `or` a GPU-only or PPO-only series with one a CPU run has.
    excused = _excused(run, where, used.metrics)
    if excused.keys() == used.metrics:
        pytest.skip(f"{where}: {excused_reason(excused, used.metrics)}")
    scope = f'verl_run_id="{run.run_id}"'
    labels: set[str] = set()
    for name in sorted(used.metrics - excused.keys()):
        series = run.stack.prom("series", **{"match[]": f"{name}{{{scope}}}"}, start=run.start, end=time.time())
        labels |= {k for s in series for k in s}
    # Selectors with matchers (verl_reward_source="score"), scoped to this run.
    for m in _SELECTOR_RE.finditer(expr):
        if m.group(1) in {"by", "on", "without", "ignoring", "group_left", "group_right"} or m.group(1) in excused:
            continue
        end = expr.index("}", m.end())
        selector = f"{m.group(1)}{{{scope}, {expr[m.end() : end]}}}"
        assert _query_range(run, f"count({selector})"), f"{where}: nothing matches {selector}"
    # {__name__=~"a|b|c"}: the names this run has match.
    for m in re.finditer(r'\{__name__=~"([^"]+)"\}', expr):
        alternatives = set(m.group(1).split("|")) - excused.keys()
        selector = f'{{{scope}, __name__=~"{"|".join(sorted(alternatives))}"}}'
        assert _query_range(run, f"count({selector})"), f"{where}: nothing matches {selector}"
    if not excused:
        missing = used.labels - labels - {"metric", "severity", "le", "__name__"}
        assert not missing, f"{where}: labels not on any series: {missing}"


def test_prometheus_loaded_and_evaluates_every_rule_without_error(live_stack: Stack) -> None:
    def evaluated() -> dict[str, dict]:
        groups = live_stack.prom("rules")["groups"]
        rules = {f"{r['name']}: {r['query']}": r for g in groups for r in g["rules"]}
        return rules if all(not r["lastEvaluation"].startswith("0001") for r in rules.values()) else {}

    rules = _until("every rule evaluated at least once", evaluated)
    assert {w.split(":", 1)[1] for w, _ in rule_exprs()} <= {r["name"] for r in rules.values()}
    for where, r in rules.items():
        assert r["health"] == "ok" and not r.get("lastError"), (where, r.get("lastError"))


# ---------------------------------------------------------------------------------------------
# Alerting end to end: a NaN fault in a real run -> the rule fires in Prometheus -> Alertmanager
# -> its webhook receiver (collector/alertmanager/alertmanager.yml, on 127.0.0.1 under stack up).

WEBHOOK_PORT = 5001  # fixed by alertmanager.yml (http://host.docker.internal:5001/verl-alerts)
ALERT_WAIT_S = 150.0  # rule evaluation 15 s + Alertmanager group_wait 30 s, with margin for 2 cores


class _Webhook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).received.append({"path": self.path, **json.loads(body)})
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def webhook() -> Iterator[list[dict]]:
    """The alert receiver, up before the first run so that any alert of the module reaches it."""
    try:
        server = ThreadingHTTPServer(("127.0.0.1", WEBHOOK_PORT), _Webhook)
    except OSError as exc:
        require(f"port {WEBHOOK_PORT}", f"alertmanager.yml's webhook port is taken: {exc}")
    _Webhook.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield _Webhook.received
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def nan_run(live_stack: Stack, webhook: list[dict], run_verl_instrumented, tmp_path_factory) -> LiveRun:
    """A v1 GRPO run whose reward turns NaN from step 2 (the harness's fault switch); its run id."""
    run_id = f"live-nan-{uuid.uuid4().hex[:8]}"
    env = {
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": live_stack.url("otlp-grpc"),
        "OTEL_VERL_RUN_ID": run_id,
        "OTEL_SERVICE_NAME": "verl-live-nan",
        "VERL_CPU_HARNESS_NAN_REWARD_AFTER": "8",  # 8 reward calls per step: NaN from step 2 on
    }
    workdir = tmp_path_factory.mktemp("live-nan")
    start = time.time()
    result = run_verl_instrumented(workdir, "v1", "grpo", env=env, steps=STEPS, val_before_train=False)
    assert result.returncode == 0, result.output[-4000:]
    assert not math.isfinite(result.console[2]["actor/pg_loss"]), result.console[2]["actor/pg_loss"]
    return LiveRun("v1", run_id, "verl-live-nan", result.console, [], 0, live_stack, start, time.time())


def test_a_nan_fault_fires_the_rule_and_reaches_the_webhook_with_the_run_labels(
    live_stack: Stack, webhook: list[dict], nan_run: LiveRun
) -> None:
    run_id = nan_run.run_id

    def firing() -> list[dict]:
        alerts = [
            a
            for msg in webhook
            for a in msg["alerts"]
            if a["status"] == "firing" and a["labels"].get("verl_run_id") == run_id
        ]
        # Alertmanager groups by alert name: each rule's group comes in a message of its own, in
        # no set order (the guard's VerlGuardTriggered often first).
        names = {a["labels"]["alertname"] for a in alerts}
        assert "VerlNonFiniteLossOrGradNorm" in names, names
        return alerts

    alerts = _until(f"VerlNonFiniteLossOrGradNorm of {run_id} at the webhook", firing, timeout_s=ALERT_WAIT_S)
    (nonfinite,) = [a for a in alerts if a["labels"]["alertname"] == "VerlNonFiniteLossOrGradNorm"][:1]
    labels = nonfinite["labels"]
    assert labels["verl_project"] == "verl_cpu_harness" and labels["verl_experiment"] == "v1_grpo", labels
    assert labels["severity"] == "critical" and re.search("loss|grad_norm", labels["verl_metric_key"]), labels
    assert all(msg["path"] == "/verl-alerts" for msg in webhook)
    # Prometheus holds it as firing too (ALERTS, what the dashboard's alert panel reads).
    firing_in_prom = live_stack.prom("query", query=f'ALERTS{{alertstate="firing", verl_run_id="{run_id}"}}')
    assert {s["metric"]["alertname"] for s in firing_in_prom["result"]} >= {"VerlNonFiniteLossOrGradNorm"}


def test_the_healthy_runs_fired_nothing(live_stack: Stack, webhook: list[dict], nan_run: LiveRun) -> None:
    # By now (after the fault's alert arrived) every rule has been evaluated on the healthy runs too.
    healthy_runs = live_stack.prom(
        "query", query='count by (verl_run_id) (last_over_time(verl_training_step{verl_run_id=~"live-v.*"}[1h]))'
    )["result"]
    if not healthy_runs:
        pytest.skip("no healthy run in this session (the driver runs were deselected)")
    active = live_stack.prom("query", query='ALERTS{verl_run_id=~"live-v.*"}')["result"]
    assert active == [], [s["metric"] for s in active]
    faulty = nan_run.run_id
    healthy = [a["labels"] for msg in webhook for a in msg["alerts"] if a["labels"].get("verl_run_id") != faulty]
    assert healthy == [], healthy


def test_the_failure_only_queries_return_data_for_the_faulty_run(nan_run: LiveRun) -> None:
    """What the healthy runs skip as failure-only (and the alert panel) has data for the NaN run."""
    cases = [(w, e) for w, kind, e in dashboard_prom_exprs() if kind == "expr"]
    cases += [(w, e) for w, e in rule_exprs() if "nonfinite" in w.lower() or "NonFinite" in w or "GuardTriggered" in w]
    checked = []
    for where, expr in cases:
        names = promql_names(expr).metrics
        # a NaN run does not stall: the stall gauge's alert is fired on the hung run's series (faults/test_stall.py)
        if not names & ((FAILURE_ONLY - STALL_ONLY) | ALERT_STATE):
            continue
        query = _substitute(nan_run, expr)
        assert _query_range(nan_run, query), f"{where}: no data for the NaN run: {query}"
        checked.append(where)
    # NaN and guard panels, alert panel and annotation, the two NonFinite rules and the guard's
    assert len(checked) >= 8, checked


# ---------------------------------------------------------------------------------------------
# What a person looks at (docs/stack.md, "Where to look"), in Chromium


def _chromium(*args: str) -> str:
    """What headless Chromium made of a page (``--dump-dom``: the DOM after its scripts ran)."""
    done = subprocess.run(
        [require_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _artifacts() -> Path:
    folder = Path(
        os.environ.get("OTEL_VERL_TEST_ARTIFACTS") or Path(__file__).resolve().parents[2] / ".work" / "artifacts"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_the_report_from_jaeger_shows_the_run_steps_in_chromium(run: LiveRun, tmp_path: Path) -> None:
    require_chromium()
    _traces(run)  # every span the processes sent is in Jaeger
    page = tmp_path / "page.html"
    argv = ["report", "--jaeger", run.stack.url("jaeger"), "--run", run.run_id, "-o", str(page)]
    cli = subprocess.run([sys.executable, "-m", "otel_verl.cli", *argv], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    # every span the processes sent, and only this run's (the other driver's run is in Jaeger too)
    assert f"wrote {page}: {STEPS} steps, {len(run.spans)} spans of run {run.run_id}" in cli.stdout, cli.stdout
    dom = _chromium("--virtual-time-budget=5000", "--dump-dom", page.as_uri())
    steps = {s.attributes[semconv.ATTR_STEP]: s for s in run.spans if s.name == semconv.SPAN_STEP}
    rows = re.search(r'<table[^>]*id="stage-table".*?</table>', dom, re.S).group(0)
    assert [int(n) for n in re.findall(r'<tr data-step="(\d+)"', rows)] == sorted(steps) == list(range(1, STEPS + 1))
    for n, st in steps.items():  # each step's duration as the run's own span gives it
        assert re.search(rf'<tr data-step="{n}".*?data-seconds="{st.seconds!r}"', rows, re.S), (n, st.seconds)
    assert f"Jaeger at {run.stack.url('jaeger')}" in dom and "curves are not read from the stack" in dom
    shown = re.findall(r'<section class="timeline shown" data-step="(\d+)">', dom)
    assert len(shown) == 1 and int(shown[0]) in steps
    png = _artifacts() / f"live-stack-report-{run.driver}.png"
    png.unlink(missing_ok=True)
    _chromium("--virtual-time-budget=5000", f"--screenshot={png}", "--window-size=1400,1800", page.as_uri())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_prometheus_serves_its_web_ui_and_it_shows_the_run(run: LiveRun) -> None:
    require_chromium()
    selector = f'verl_training_step{{verl_run_id="{run.run_id}"}}'
    _until(f"{selector} in Prometheus", lambda: run.stack.prom("query", query=selector)["result"] or None)
    home = urllib.request.urlopen(f"{run.stack.url('prometheus')}/query", timeout=30).read().decode()
    assert "<title>Prometheus" in home and "<script" in home, home[:500]  # the UI, not the no-UI 404 page
    # the UI's table of the query: its script asked the API and drew the series with their labels
    params = urllib.parse.urlencode({"g0.expr": selector, "g0.tab": "table", "g0.show_tree": "0"})
    url = f"{run.stack.url('prometheus')}/query?{params}"
    dom = _chromium("--virtual-time-budget=15000", "--dump-dom", url)
    assert run.run_id in dom and "verl_training_step" in dom, dom[-3000:]
    png = _artifacts() / f"live-stack-prometheus-{run.driver}.png"
    png.unlink(missing_ok=True)
    _chromium("--virtual-time-budget=15000", f"--screenshot={png}", "--window-size=1400,700", url)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
