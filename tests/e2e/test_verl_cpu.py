"""End-to-end: the real verl trainer (both drivers, GRPO and PPO) under opentelemetry-instrument.

What a user gets is checked against what verl itself printed for the same run:
one trace per step with a span for every stage verl timed (durations equal to
``timing_s/<stage>``), worker spans from the ranks inside that trace, and every logged
metric exported with the value verl logged for that step.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

import numpy as np
import pytest
from support import compat
from support.shared_runs import switched_off_run

from otel_verl import semconv
from otel_verl.hooks import stages as stages_module

pytestmark = pytest.mark.e2e

STEPS = 2
CONFIGS = [("v0", "grpo"), ("v0", "ppo"), ("v1", "grpo"), ("v1", "ppo")]
CORE_STAGES = {"gen", "old_log_prob", "adv", "update_actor", "update_weights"}
PPO_STAGES = {"ref", "values", "update_critic"}


@pytest.fixture(scope="module", params=CONFIGS, ids=[f"{d}-{a}" for d, a in CONFIGS])
def run(request, verl_runs):
    driver, algo = request.param
    result = verl_runs.get(driver, algo, steps=STEPS)
    assert result.returncode == 0, result.output[-4000:]
    return result


def _same(exported: float, logged: float) -> bool:
    """Equal, allowing for verl printing float32 values in float32 precision."""
    if exported == logged:
        return True
    return bool(np.float32(exported) == np.float32(logged))


def _step_traces(run):
    steps = {s.attributes[semconv.ATTR_STEP]: s for s in run.spans if s.name == semconv.SPAN_STEP}
    by_trace = defaultdict(list)
    for s in run.spans:
        by_trace[s.trace_id].append(s)
    return steps, by_trace


def test_one_trace_per_step_with_every_stage_verl_timed(run):
    steps, by_trace = _step_traces(run)
    assert sorted(steps) == list(range(1, STEPS + 1))
    assert len({s.trace_id for s in steps.values()}) == STEPS
    for n, step in steps.items():
        assert step.parent_id == ""
        assert step.attributes[semconv.ATTR_DRIVER] == run.driver
        assert step.attributes[semconv.ATTR_EPOCH] == 0
        stages = {
            s.attributes[semconv.ATTR_STAGE]: s for s in by_trace[step.trace_id] if semconv.ATTR_STAGE in s.attributes
        }
        timed = {k.split("/", 1)[1] for k in run.console[n] if k.startswith("timing_s/") and k.count("/") == 1}
        timed.discard("step")
        # v0's profiler stages time nothing with the profiler off (as here): no spans for them
        profiler = stages_module.PROFILER_STAGES & timed
        timed -= profiler
        assert not [s for s in run.spans if s.attributes.get(semconv.ATTR_STAGE) in profiler]
        expected = CORE_STAGES | (PPO_STAGES if run.algo == "ppo" else set())
        assert expected <= timed, "the harness config no longer runs these stages"
        assert timed <= set(stages), f"step {n}: verl timed {sorted(timed)}, spans {sorted(stages)}"
        for name in timed:
            logged = run.console[n][f"timing_s/{name}"]
            assert abs(stages[name].seconds - logged) <= max(0.005, 0.05 * logged), (name, stages[name].seconds, logged)
        assert abs(step.seconds - run.console[n]["timing_s/step"]) <= max(0.005, 0.05 * run.console[n]["timing_s/step"])


def test_worker_ranks_report_into_the_step_trace(run):
    steps, by_trace = _step_traces(run)
    roles = {s.resource.get(semconv.RES_ROLE) for s in run.spans}
    pids = {s.resource.get("process.pid") for s in run.spans}
    assert {semconv.ROLE_TASKRUNNER, semconv.ROLE_WORKER} <= roles and len(pids) >= 2
    for step in steps.values():
        members = {s.span_id: s for s in by_trace[step.trace_id]}
        workers = [s for s in members.values() if s.name.startswith(semconv.SPAN_WORKER_PREFIX)]
        assert {"verl.worker.compute_log_prob", "verl.worker.update_actor"} <= {s.name for s in workers}
        for w in workers:
            assert w.resource[semconv.RES_ROLE] == semconv.ROLE_WORKER
            assert w.attributes[semconv.RES_RANK] == 0
            # walk up to the step root through the driver's stage span
            node, hops = w, 0
            while node.parent_id and hops < 10:
                node, hops = members[node.parent_id], hops + 1
            assert node.span_id == step.span_id


def test_process_identity_and_run_id(run):
    runner = [s for s in run.spans if s.resource.get(semconv.RES_ROLE) == semconv.ROLE_TASKRUNNER]
    assert runner[0].resource["service.name"] == "verl-e2e"
    assert runner[0].resource[semconv.RES_PROJECT] == "verl_cpu_harness"
    assert runner[0].resource[semconv.RES_EXPERIMENT] == f"{run.driver}_{run.algo}"
    assert len({s.resource[semconv.RES_RUN_ID] for s in run.spans}) == 1  # one run id across processes
    # every process, not only the TaskRunner, is labelled with the run's names (dashboards filter on them)
    assert {(s.resource.get(semconv.RES_PROJECT), s.resource.get(semconv.RES_EXPERIMENT)) for s in run.spans} == {
        ("verl_cpu_harness", f"{run.driver}_{run.algo}")
    }
    names = {s.name for s in run.spans}
    assert {semconv.SPAN_INIT, semconv.SPAN_VALIDATION} <= names


def test_the_launchers_distro_providers_write_files_of_their_own_not_the_console(run):
    """``opentelemetry-instrument`` with ``otlp_json_file``: the global providers opentelemetry-distro
    built in the launcher (its system metrics: the instrumentation is installed, as
    ``opentelemetry-bootstrap -a install`` does) write ``distro-metrics-launcher-<pid>.jsonl``, beside
    the run's files, and no OTLP JSON reaches the user's console."""
    assert '"resourceMetrics"' not in run.output and '"resourceSpans"' not in run.output
    (path,) = run.telemetry_dir.glob(f"{semconv.DISTRO_FILE_PREFIX}metrics-{semconv.ROLE_LAUNCHER}-*.jsonl")
    batches = [json.loads(line) for line in path.read_text().splitlines()]
    scopes = [s for b in batches for rm in b["resourceMetrics"] for s in rm["scopeMetrics"]]
    names = {m["name"] for s in scopes for m in s["metrics"]}
    assert "system.cpu.time" in names


def _exports_by_step(run):
    """Group metric points by collection (one per step boundary) and key them by step."""
    batches = defaultdict(dict)
    for p in run.points:
        if p.resource.get(semconv.RES_ROLE) != semconv.ROLE_TASKRUNNER:
            continue
        key = p.name if not p.attributes else (p.name, tuple(sorted(p.attributes.items())))
        batches[p.time_ns][key] = p
    by_step = {}
    for t in sorted(batches):
        step_point = batches[t].get(semconv.M_TRAINING_STEP)
        if step_point is not None:
            by_step.setdefault(int(step_point.value), batches[t])  # the first export after the step
    return by_step


def test_every_logged_metric_is_exported_with_the_logged_value(run):
    by_step = _exports_by_step(run)
    assert sorted(by_step) == list(range(1, STEPS + 1))
    for n in range(1, STEPS + 1):
        logged = run.console[n]
        exported = by_step[n]
        checked = 0
        for key, value in logged.items():
            if not math.isfinite(value):
                continue
            # verl's step number is carried by verl.training.step, not forwarded a second time
            name = semconv.M_TRAINING_STEP if key == semconv.STEP_KEY else semconv.metric_name(key)
            point = exported.get(name)
            assert point is not None, f"step {n}: {key} not exported"
            assert _same(point.value, value), (key, point.value, value)
            checked += 1
        assert checked >= 50  # verl logs ~100 keys per step

        # the named instruments users alert on
        assert _same(
            exported[(semconv.M_REWARD, ((semconv.ATTR_REWARD_SOURCE, "score"),))].value, logged["critic/score/mean"]
        )
        assert _same(exported[semconv.M_THROUGHPUT].value, logged["perf/throughput"])
        kl_key = "actor/kl_loss" if run.algo == "ppo" else "actor/ppo_kl"
        source = semconv.KL_KEYS[kl_key]
        assert _same(exported[(semconv.M_KL, ((semconv.ATTR_KL_SOURCE, source),))].value, logged[kl_key])
        # verl's rollout/training comparison (the rollout returns log-probs by default): a healthy run
        # (test_mismatch_e2e.py: one that is not)
        corr = logged[semconv.PROBS_CORRELATION_KEY]
        assert corr > 0.9 and _same(exported[semconv.M_ROLLOUT_PROBS_CORRELATION].value, corr), corr
        if run.driver == "v1":  # synchronous: 0
            lower = (
                semconv.M_OFF_POLICY_STALENESS,
                ((semconv.ATTR_STALENESS_BOUND, "lower"), (semconv.ATTR_STAT, "mean")),
            )
            assert exported[lower].value == logged["training/off_policy/trajectory_staleness/mean"] == 0
        assert exported[semconv.M_TRAINING_STEPS].value == n
        assert exported[semconv.M_LAST_STEP_TIMESTAMP].value > 1.7e9


def test_stage_duration_histogram_matches_verl_timing(run):
    last = _exports_by_step(run)[STEPS]
    hist = {
        dict(k[1])[semconv.ATTR_STAGE]: p
        for k, p in last.items()
        if isinstance(k, tuple) and k[0] == semconv.M_STAGE_DURATION
    }
    total = {
        stage: sum(run.console[n].get(f"timing_s/{stage}", 0.0) for n in range(1, STEPS + 1))
        for stage in ("gen", "update_actor", "step")
    }
    for stage, seconds in total.items():
        assert hist[stage].count == STEPS
        assert hist[stage].value == pytest.approx(seconds, rel=1e-6, abs=1e-6)
    # exactly verl's stage timers: not the agent loop's per-sample figures under the same prefix
    stages = {semconv.stage_of(k) for n in range(1, STEPS + 1) for k in run.console[n]} - {None}
    assert set(hist) == stages, set(hist) ^ stages
    assert not [s for s in hist if s.startswith("agent_loop")]


def _stage_exemplars(run) -> list[tuple[str, float, str, str]]:
    """(stage, value, trace id, span id) of every exemplar of the run's stage-duration histogram."""
    out = []
    for path in run.telemetry_dir.glob("metrics-*.jsonl"):
        for line in path.read_text().splitlines():
            for rm in json.loads(line).get("resourceMetrics", []):
                for sm in rm["scopeMetrics"]:
                    for m in sm["metrics"]:
                        if m["name"] != semconv.M_STAGE_DURATION:
                            continue
                        for p in m["histogram"]["dataPoints"]:
                            # any value type: the points carry the run's identity too (verl.rank an int)
                            attrs = {a["key"]: next(iter(a["value"].values())) for a in p.get("attributes", [])}
                            for e in p.get("exemplars", []):
                                value = e["asDouble"]
                                out.append((attrs[semconv.ATTR_STAGE], value, e["traceId"], e["spanId"]))
    return out


def test_each_stage_exemplar_is_that_steps_stage_span(run):
    """The click from a slow step or stage to its trace: each exemplar of verl.stage.duration names the
    span of that stage (``step``: the step's root span) in the step whose timing_s value it is (verl's
    own figure, from its console)."""
    spans = {(s.trace_id, s.span_id): s for s in run.spans}
    exemplars = _stage_exemplars(run)
    assert {stage for stage, *_ in exemplars} >= {"step", "gen", "update_actor"}
    for stage, value, trace_id, span_id in exemplars:
        span = spans[(trace_id, span_id)]
        assert span.name == (semconv.SPAN_STEP if stage == "step" else semconv.SPAN_STAGE_PREFIX + stage)
        step = span.attributes[semconv.ATTR_STEP]
        assert run.console[step][f"timing_s/{stage}"] == pytest.approx(value, rel=1e-9), (stage, step)


def test_disabled_switch_leaves_no_telemetry(verl_runs):
    """Even on the job's error path (``switched_off_run``: a worker killed in step 2)."""
    off = switched_off_run(verl_runs)
    assert "killing this worker in compute_log_prob call 2" in off.output  # the job ran to its fault
    assert 1 in off.console  # verl itself ran and logged
    assert off.spans == [] and off.points == []
    assert not list(off.telemetry_dir.glob("*.jsonl"))  # no log file either


def test_compatibility_cell(run):
    """This run is its cell of the compatibility matrix (docs/generated/compatibility.md)."""
    compat.check(run, f"0.9.1-{run.driver}-hf")
