"""End-to-end: rollout trajectory / LLM-call spans and histograms from the real trainer on CPU.

Ground truth is verl's own console output for the same run (``response_length/{mean,max,min}``)
and the configuration: ``train_batch_size=4`` prompts x ``rollout.n=2`` = 8 trajectories per step.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest
from support.points import latest_count, latest_points
from support.shared_runs import CLUSTER_RANKS

from otel_verl import semconv
from otel_verl.instruments import catalog

pytestmark = pytest.mark.e2e

STEPS = 2
PER_STEP = 4 * 2  # train_batch_size x rollout.n


def _train_trajectories(run):
    trajs = [
        s
        for s in run.spans
        if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY and not s.attributes[semconv.ATTR_ROLLOUT_VALIDATE]
    ]
    by_step = defaultdict(list)
    for s in trajs:
        by_step[s.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP]].append(s)
    return by_step


def _check_rollout(run, n_gpus):
    assert run.returncode == 0, run.output[-4000:]
    by_step = _train_trajectories(run)
    assert sorted(by_step) == list(range(1, STEPS + 1))
    step_spans = {s.attributes[semconv.ATTR_STEP]: s for s in run.spans if s.name == semconv.SPAN_STEP}
    by_id = {s.span_id: s for s in run.spans}
    llm_calls = defaultdict(list)
    for s in run.spans:
        if semconv.is_llm_call(s.name, s.attributes):
            llm_calls[s.parent_id].append(s)
    for step, trajs in by_step.items():
        # every trajectory of the step has a span, each (sample, rollout) once
        assert len(trajs) == PER_STEP
        ids = {
            (t.attributes[semconv.ATTR_ROLLOUT_SAMPLE_INDEX], t.attributes[semconv.ATTR_ROLLOUT_INDEX]) for t in trajs
        }
        assert len(ids) == PER_STEP
        assert {t.attributes[semconv.ATTR_ROLLOUT_INDEX] for t in trajs} == {0, 1}
        # token counts equal verl's own response_length statistics for that step
        lengths = [t.attributes[semconv.ATTR_ROLLOUT_RESPONSE_TOKENS] for t in trajs]
        console = run.console[step]
        assert sum(lengths) / len(lengths) == pytest.approx(console["response_length/mean"], rel=1e-6)
        assert max(lengths) == console["response_length/max"]
        assert min(lengths) == console["response_length/min"]
        for t in trajs:
            assert t.status != "ERROR"
            assert t.attributes[semconv.ATTR_ROLLOUT_STATUS] == semconv.STATUS_OK
            assert t.attributes[semconv.GEN_AI_AGENT_NAME] == "single_turn_agent"
            assert t.attributes[semconv.ATTR_ROLLOUT_PROMPT_TOKENS] > 0
            assert t.attributes[semconv.ATTR_ROLLOUT_NUM_TURNS] >= 2
            assert isinstance(t.attributes[semconv.ATTR_ROLLOUT_REWARD], float)
            assert t.resource[semconv.RES_ROLE] == semconv.ROLE_AGENT_LOOP
            # v0: in the step's trace, under the driver's gen stage (a parent, so no link)
            assert t.trace_id == step_spans[step].trace_id
            assert t.links == []
            batch = by_id[t.parent_id]
            assert batch.name == semconv.SPAN_ROLLOUT_BATCH
            dispatch = by_id[batch.parent_id]  # the TaskRunner's side of the call to the workers
            assert dispatch.name == semconv.SPAN_ROLLOUT_DISPATCH
            assert by_id[dispatch.parent_id].name == "verl.gen"
            # single-turn agent: one LLM call whose output tokens are the response
            (call,) = llm_calls[t.span_id]
            assert (
                call.attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]
                == t.attributes[semconv.ATTR_ROLLOUT_RESPONSE_TOKENS]
            )
            assert (
                call.attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] == t.attributes[semconv.ATTR_ROLLOUT_PROMPT_TOKENS]
            )
            assert call.attributes[semconv.GEN_AI_PROVIDER_NAME] == "hfcpu"
            assert call.attributes[semconv.GEN_AI_OPERATION_NAME] == "text_completion"
            assert call.attributes[semconv.GEN_AI_REQUEST_MODEL] == "model"  # the harness's model folder, by name
            assert call.name == "text_completion model"  # the GenAI conventions' span name
            assert call.attributes[semconv.GEN_AI_CONVERSATION_ID] and call.attributes[semconv.GEN_AI_RESPONSE_ID]
            assert call.attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS]
            assert semconv.ATTR_ROLLOUT_SERVER_ID in call.attributes
            assert t.start_ns <= call.start_ns and call.end_ns <= t.end_ns
    # the histograms count every trajectory and call (train: 2 steps x 8)
    n_train = STEPS * PER_STEP
    assert latest_count(run, semconv.M_ROLLOUT_TRAJECTORY_DURATION, **{semconv.ATTR_ROLLOUT_VALIDATE: False}) == n_train
    assert latest_count(run, semconv.M_ROLLOUT_RESPONSE_TOKENS, **{semconv.ATTR_ROLLOUT_VALIDATE: False}) == n_train
    assert latest_count(run, semconv.M_ROLLOUT_LLM_CALL_DURATION, **{semconv.ATTR_ROLLOUT_VALIDATE: False}) == n_train
    _check_gen_ai_metrics(run, n_train)
    # validation (val_before_train) trajectories are flagged, not mixed into the steps
    val = [
        s
        for s in run.spans
        if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY and s.attributes[semconv.ATTR_ROLLOUT_VALIDATE]
    ]
    assert val
    # long tail: a ratio >= 1 per step, and the slowest trajectory named on the batch span
    ratios = [p.value for p in run.points if p.name == semconv.M_ROLLOUT_TAIL_RATIO]
    assert ratios and all(r >= 1.0 for r in ratios)
    batches = [
        s for s in run.spans if s.name == semconv.SPAN_ROLLOUT_BATCH and not s.attributes[semconv.ATTR_ROLLOUT_VALIDATE]
    ]
    assert len(batches) == STEPS  # num_workers=1
    for b in batches:
        (attrs,) = b.event_attributes(semconv.EVENT_SLOWEST_TRAJECTORY)
        slowest = by_id[attrs[semconv.ATTR_ROLLOUT_SLOWEST_SPAN_ID]]
        same_step = [t for t in by_step[b.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP]]]
        assert slowest.seconds == pytest.approx(max(t.seconds for t in same_step), abs=0.05)
        assert attrs[semconv.ATTR_ROLLOUT_TAIL_RATIO] >= 1.0
        assert attrs[semconv.ATTR_ROLLOUT_TRAJECTORIES] == PER_STEP
    return by_step


def _check_gen_ai_metrics(run, n_train):
    """The GenAI conventions' client metrics count the same calls as verl.rollout.llm_call.duration
    (training and validation), with the conventions' attributes and buckets and nothing per call,
    and the token usage is the LLM-call spans' (every call of this run has its span)."""
    identity = set(semconv.RES_SERIES_IDENTITY)  # otel-verl's run identity on every point
    gen_ai = {
        semconv.GEN_AI_OPERATION_NAME: "text_completion",
        semconv.GEN_AI_PROVIDER_NAME: "hfcpu",
        semconv.GEN_AI_REQUEST_MODEL: "model",
    }
    calls = [s for s in run.spans if semconv.is_llm_call(s.name, s.attributes)]
    n_calls = latest_count(run, semconv.M_ROLLOUT_LLM_CALL_DURATION)
    assert n_calls > n_train  # validation's calls too
    assert len(calls) == n_calls
    durations = latest_points(run, semconv.M_GEN_AI_CLIENT_OPERATION_DURATION)
    assert durations
    for p in durations:
        assert {k: v for k, v in p.attributes.items() if k not in identity} == gen_ai  # no error.type: none failed
        assert p.bounds == list(catalog.GEN_AI_DURATION_BUCKETS)
    assert sum(p.count for p in durations) == n_calls
    for token_type, attr in (
        ("input", semconv.GEN_AI_USAGE_INPUT_TOKENS),
        ("output", semconv.GEN_AI_USAGE_OUTPUT_TOKENS),
    ):
        usage = latest_points(run, semconv.M_GEN_AI_CLIENT_TOKEN_USAGE, **{semconv.GEN_AI_TOKEN_TYPE: token_type})
        assert usage
        for p in usage:
            assert {k: v for k, v in p.attributes.items() if k not in identity} == {
                **gen_ai,
                semconv.GEN_AI_TOKEN_TYPE: token_type,
            }
            assert p.bounds == list(catalog.GEN_AI_TOKEN_BUCKETS)
        assert sum(p.count for p in usage) == n_calls
        assert sum(p.value for p in usage) == sum(c.attributes[attr] for c in calls)


def test_v0_rollout_spans_match_verl(verl_runs):
    run = verl_runs.get("v0", "grpo", steps=STEPS)
    _check_rollout(run, 1)


def test_v0_rollout_spans_two_ranks(cluster_run):
    """(``cluster_run``: a job on a running Ray cluster, tests/e2e/conftest.py.)"""
    run = cluster_run
    by_step = _check_rollout(run, CLUSTER_RANKS)
    # two rollout replicas behind the load balancer: calls may go to either
    servers = {
        s.attributes[semconv.ATTR_ROLLOUT_SERVER_ID] for s in run.spans if semconv.is_llm_call(s.name, s.attributes)
    }
    assert servers
    assert by_step
    # each step's trace holds the TaskRunner's spans and worker spans of BOTH data-parallel ranks
    steps = {s.attributes[semconv.ATTR_STEP]: s for s in run.spans if s.name == semconv.SPAN_STEP}
    assert sorted(steps) == list(range(1, STEPS + 1))
    for step in steps.values():
        members = [s for s in run.spans if s.trace_id == step.trace_id]
        roles = {s.resource.get(semconv.RES_ROLE) for s in members}
        assert {semconv.ROLE_TASKRUNNER, semconv.ROLE_WORKER, semconv.ROLE_AGENT_LOOP} <= roles
        workers = [s for s in members if s.resource.get(semconv.RES_ROLE) == semconv.ROLE_WORKER]
        ranks = defaultdict(set)
        for w in workers:
            assert w.name.startswith(semconv.SPAN_WORKER_PREFIX)
            assert w.attributes[semconv.RES_RANK] == w.resource[semconv.RES_RANK]
            ranks[w.resource[semconv.RES_RANK]].add(w.name)
        assert sorted(ranks) == list(range(CLUSTER_RANKS))
        for names in ranks.values():  # both ranks did the step's compute and update
            assert {"verl.worker.compute_log_prob", "verl.worker.update_actor"} <= names
        assert len({w.resource["process.pid"] for w in workers}) == CLUSTER_RANKS
    _check_process_metrics(run, worker_ranks=set(range(CLUSTER_RANKS)))


def _gen_spans(run):
    """The first ``verl.gen`` span of each step (what a v1 dispatch links to)."""
    gens = {}
    for s in sorted(run.spans, key=lambda s: s.start_ns):
        if s.name == semconv.SPAN_GEN:
            gens.setdefault(s.attributes[semconv.ATTR_STEP], s)
    return gens


def test_v1_trajectories_carry_submit_step_and_link_to_the_submitting_gen_span(verl_runs):
    run = verl_runs.get("v1", "grpo", steps=STEPS)
    assert run.returncode == 0, run.output[-4000:]
    by_step = _train_trajectories(run)
    # v1 submits ahead; every trajectory consumed by steps 1..2 was submitted at a step <= 2
    assert sum(len(v) for v in by_step.values()) >= STEPS * PER_STEP
    step_spans = {s.attributes[semconv.ATTR_STEP]: s for s in run.spans if s.name == semconv.SPAN_STEP}
    gens = _gen_spans(run)
    assert sorted(gens) == sorted(step_spans) == list(range(1, STEPS + 1))
    by_id = {s.span_id: s for s in run.spans}
    for submit_step, trajs in by_step.items():
        gen = gens[submit_step]
        assert gen.trace_id == step_spans[submit_step].trace_id
        assert gen.parent_id == step_spans[submit_step].span_id
        assert gen.resource[semconv.RES_ROLE] == semconv.ROLE_TASKRUNNER
        for t in trajs:
            assert t.parent_id == ""  # a root: the rollout outlives the dispatch call
            assert t.trace_id != gen.trace_id
            assert t.attributes[semconv.ATTR_ROLLOUT_STATUS] == semconv.STATUS_OK
            assert t.attributes[semconv.ATTR_ROLLOUT_RESPONSE_TOKENS] > 0
            # exactly one link: the gen stage span of the step that submitted it (id fixed at dispatch,
            # before that stage started), in that step's trace
            (link,) = t.links
            assert link.trace_id == step_spans[submit_step].trace_id
            assert link.span_id == gen.span_id
            assert link.attributes == {semconv.ATTR_STEP: submit_step}
            # the stage it links to waited for this rollout: it ended after the trajectory did
            assert gen.end_ns >= t.end_ns
    # the per-step tail spans link there too
    tails = [
        s for s in run.spans if s.name == semconv.SPAN_ROLLOUT_TAIL and not s.attributes[semconv.ATTR_ROLLOUT_VALIDATE]
    ]
    assert tails
    for tail in tails:
        (link,) = tail.links
        assert link.span_id == gens[tail.attributes[semconv.ATTR_ROLLOUT_SUBMIT_STEP]].span_id
    # validation rollouts link to the span that dispatched them (initial validation, final testing stage)
    val = [
        s
        for s in run.spans
        if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY and s.attributes[semconv.ATTR_ROLLOUT_VALIDATE]
    ]
    assert val
    for t in val:
        (link,) = t.links
        assert by_id[link.span_id].name in (semconv.SPAN_VALIDATION, semconv.SPAN_STAGE_PREFIX + "testing")
    counted = latest_count(run, semconv.M_ROLLOUT_TRAJECTORY_DURATION, **{semconv.ATTR_ROLLOUT_VALIDATE: False})
    assert counted == sum(len(v) for v in by_step.values())
    _check_process_metrics(run, worker_ranks={0})


MB = 1024 * 1024


def _check_process_metrics(run, worker_ranks):
    """``process.*`` (opentelemetry-instrumentation-system-metrics) from the TaskRunner, every worker
    rank and the agent-loop worker, each labelled with its process's role (and rank), values sane."""
    by_process = defaultdict(lambda: defaultdict(list))
    for p in run.points:
        if p.name.startswith("process."):
            by_process[(p.resource.get(semconv.RES_ROLE), p.resource.get(semconv.RES_RANK))][p.name].append(p)
    expected = {(semconv.ROLE_TASKRUNNER, None), (semconv.ROLE_AGENT_LOOP, None)}
    expected |= {(semconv.ROLE_WORKER, rank) for rank in worker_ranks}
    assert expected <= set(by_process), sorted(by_process, key=str)
    for who in expected:
        names = by_process[who]
        assert set(semconv.SYSTEM_METRICS_CONFIG) <= set(names), (who, sorted(names))
        pids = {p.resource["process.pid"] for points in names.values() for p in points}
        assert len(pids) == 1, (who, pids)  # one process each, its own resource
        last = {name: max(points, key=lambda p: p.time_ns) for name, points in names.items()}
        memory = last["process.memory.usage"].value
        assert 10 * MB < memory < 64 * 1024 * MB, (who, memory)  # a Python process with torch: 10 MB .. 64 GB
        assert last["process.memory.virtual"].value >= memory
        cpu = {
            p.attributes["type"]: p.value
            for p in names["process.cpu.time"]
            if p.time_ns == last["process.cpu.time"].time_ns
        }
        assert cpu["user"] > 0.1 and cpu["system"] >= 0, (who, cpu)  # seconds: each process did work
        assert cpu["user"] + cpu["system"] < run.wall_s * (os.cpu_count() or 1) + 5  # bounded by the run
        assert 1 <= last["process.thread.count"].value < 10_000
        assert all(p.value >= 0 for p in names["process.cpu.utilization"])
