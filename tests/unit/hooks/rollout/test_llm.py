"""LLM call spans (``otel_verl.hooks.rollout.llm``) with verl's real ``LLMServerClient.generate`` /
``_acquire_server`` under real trajectories (``AgentLoopWorker``): ``gen_ai.*`` request and
response attributes, server id and load-balancer wait, the call histogram.
"""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import trace
from verl_cpu_harness.agent_loop import (
    PROMPT,
    FakeBalancer,
    FakeServer,
    by_name,
    hist,
    llm_calls,
    make_batch,
    make_worker,
)

from otel_verl import semconv
from otel_verl.hooks.rollout import engine_context


def test_every_trajectory_and_llm_call_gets_a_span_with_verl_outputs(captured):
    worker = make_worker()
    outputs = asyncio.run(worker.generate_sequences(make_batch()))
    assert len(outputs) == 4

    trajs = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    assert len(trajs) == 4
    seen = set()
    for t in trajs:
        a = t.attributes
        seen.add((a[semconv.ATTR_ROLLOUT_SAMPLE_INDEX], a[semconv.ATTR_ROLLOUT_INDEX]))
        n = 2 + a[semconv.ATTR_ROLLOUT_SAMPLE_INDEX]
        assert a[semconv.ATTR_ROLLOUT_SUBMIT_STEP] == 3
        assert a[semconv.ATTR_ROLLOUT_VALIDATE] is False
        assert a[semconv.GEN_AI_AGENT_NAME] == "otel_test_agent"
        assert a[semconv.ATTR_ROLLOUT_STATUS] == semconv.STATUS_OK
        assert a[semconv.ATTR_ROLLOUT_PROMPT_TOKENS] == len(PROMPT)
        assert a[semconv.ATTR_ROLLOUT_RESPONSE_TOKENS] == n
        assert a[semconv.ATTR_ROLLOUT_GENERATED_TOKENS] == n
        assert a[semconv.ATTR_ROLLOUT_NUM_TURNS] == 2
        assert a[semconv.ATTR_ROLLOUT_REWARD] == 0.25 * n
    assert seen == {(0, 0), (0, 1), (1, 0), (1, 1)}

    calls = llm_calls(captured)
    assert len(calls) == 4
    parents = {t.context.span_id: t for t in trajs}
    # the ids the engine gets once the server hook took the trace context off again
    engine_ids = [engine_context.detach(rid)[0] for rid in worker.llm_client._load_balancer.server.request_ids]
    for c in calls:
        traj = parents[c.parent.span_id]  # child of its trajectory
        a = c.attributes
        # the GenAI conventions' span: {gen_ai.operation.name} {gen_ai.request.model}, CLIENT
        assert c.name == "text_completion Qwen2.5-0.5B-Instruct"
        assert c.kind == trace.SpanKind.CLIENT
        assert c.instrumentation_scope.name == semconv.SCOPE
        assert a[semconv.GEN_AI_OPERATION_NAME] == "text_completion"
        assert a[semconv.GEN_AI_PROVIDER_NAME] == "vllm"
        assert a[semconv.GEN_AI_REQUEST_MODEL] == "Qwen2.5-0.5B-Instruct"  # the folder's name, not the user's path
        assert semconv.ATTR_ERROR_TYPE not in a
        assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == len(PROMPT)
        assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == traj.attributes[semconv.ATTR_ROLLOUT_RESPONSE_TOKENS]
        assert a[semconv.GEN_AI_REQUEST_MAX_TOKENS] == a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]
        assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("completed",)
        assert a[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 2
        assert a[semconv.GEN_AI_CONVERSATION_ID] == "req"  # the agent loop's id of the trajectory
        assert a[semconv.GEN_AI_RESPONSE_ID] in engine_ids  # the id the engine got for this call
        assert semconv.GEN_AI_REQUEST_TOP_K not in a  # top_k -1: no top-k sampling
        assert semconv.ATTR_SERVER_ADDRESS not in a  # "replica-0" is no address
        assert a[semconv.ATTR_ROLLOUT_PREEMPTIONS] == 0
        assert a[semconv.ATTR_ROLLOUT_WEIGHT_VERSION] == 3
        assert a[semconv.ATTR_ROLLOUT_SERVER_ID] == "replica-0"
        assert 0.02 <= a[semconv.ATTR_ROLLOUT_SERVER_WAIT] < (c.end_time - c.start_time) / 1e9
    assert sorted(c.attributes[semconv.GEN_AI_RESPONSE_ID] for c in calls) == sorted(engine_ids)  # one each

    # reward scoring makes no span here: the reward worker's span is the trajectory's child
    names = {s.name for s in captured.finished()}
    expected = {semconv.SPAN_ROLLOUT_TRAJECTORY, "text_completion Qwen2.5-0.5B-Instruct", semconv.SPAN_ROLLOUT_TAIL}
    assert names == expected, names
    assert not [s for s in captured.finished() if semconv.is_llm_call(s.name, s.attributes) != (s in calls)]

    (duration,) = hist(captured, semconv.M_ROLLOUT_TRAJECTORY_DURATION)
    assert duration.count == 4
    (tokens,) = hist(captured, semconv.M_ROLLOUT_RESPONSE_TOKENS)
    assert tokens.count == 4 and tokens.sum == 2 + 2 + 3 + 3
    assert tokens.attributes == {semconv.ATTR_ROLLOUT_VALIDATE: False, semconv.GEN_AI_AGENT_NAME: "otel_test_agent"}
    (llm,) = hist(captured, semconv.M_ROLLOUT_LLM_CALL_DURATION)
    assert llm.count == 4
    assert list(llm.explicit_bounds)[:3] == [0.005, 0.01, 0.025]


def test_the_reward_worker_call_carries_its_trajectorys_context(captured):
    """``_compute_score`` (wrapped) hands the reward-loop worker the trajectory's own context, the
    parent of ``verl.reward_worker.compute_score``, with the step; verl's per-sample kwargs stay as
    they were, and the score verl sets lands on the trajectory."""
    from types import SimpleNamespace

    from otel_verl import current_step, propagation
    from otel_verl.hooks.rollout import trajectory

    sample = {"data_source": "tiny_add"}
    received: list[dict] = []

    async def verl_compute_score(outputs, kwargs):
        received.append(kwargs)
        outputs[-1].reward_score = 0.75

    output = SimpleNamespace(prompt_ids=[1, 2], response_ids=[3], response_mask=[1], num_turns=2, reward_score=None)
    st = trajectory._trajectory_start((None, {"step": 5, "sample_index": 0}), {"agent_name": "a"}, None)
    asyncio.run(trajectory.compute_score_wrapper(verl_compute_score, None, ([output], sample), {}))
    trajectory._trajectory_end(st, None, None)

    (kwargs,) = received
    assert sample == {"data_source": "tiny_add"} and kwargs is not sample
    ctx = propagation.extract(kwargs[propagation.CARRIER_KEY])
    (traj,) = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    assert trace.get_current_span(ctx).get_span_context().span_id == traj.context.span_id
    assert current_step(ctx) == 5
    assert traj.attributes[semconv.ATTR_ROLLOUT_REWARD] == 0.75
    assert traj.attributes[semconv.ATTR_ROLLOUT_RESPONSE_TOKENS] == 1


@pytest.mark.parametrize(
    ("served", "path", "model"),
    [
        (None, "Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),  # a Hugging Face id: as verl hands it to the engine
        (None, "/data/ckpt/my-sft-run/", "my-sft-run"),
        (None, "~/models/llama", "llama"),
        (None, "./llama", "llama"),
        (None, "hdfs://nn:8020/user/me/models/qwen-7b", "qwen-7b"),
        (None, "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B/snapshots/a09a3545", "Qwen/Qwen2.5-7B"),
        ("/mnt/models/served-7b", "/data/ckpt/x", "served-7b"),  # verl serves it under the last part
        ("", "Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),
        (None, "", None),
        (None, "/", None),
        (None, 42, None),
        (None, "/" + "m" * 10_000, "m" * 256),  # bounded whatever the config holds
    ],
)
def test_the_model_is_the_one_verls_rollout_serves_by_name_never_the_users_folders(served, path, model):
    from omegaconf import OmegaConf

    from otel_verl.hooks.rollout.llm import model_name

    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "model": {"path": path},
                "rollout": {"name": "vllm", "prometheus": {"enable": True, "served_model_name": served}},
            }
        }
    )
    assert model_name(config) == model


def test_a_config_without_a_model_leaves_the_attribute_out(captured):
    from omegaconf import OmegaConf

    worker = make_worker()
    worker.llm_client.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm"}}})
    asyncio.run(worker.generate_sequences(make_batch(prompts=1, n=1)))
    (call,) = llm_calls(captured)
    assert call.name == "text_completion"  # the conventions' name without a model: the operation alone
    assert semconv.GEN_AI_REQUEST_MODEL not in call.attributes
    assert call.attributes[semconv.GEN_AI_PROVIDER_NAME] == "vllm"


def test_a_failed_engine_call_carries_its_error_type(captured):
    """The GenAI conventions require ``error.type`` on a call that ended in an error; verl gets the error."""
    worker = make_worker()
    server = FakeServer()

    async def broken(**kwargs):
        raise ConnectionResetError("engine gone")

    server.generate.remote = broken
    worker.llm_client._load_balancer = FakeBalancer(server)
    with pytest.raises(ConnectionResetError, match="engine gone"):
        asyncio.run(worker.generate_sequences(make_batch(prompts=1, n=1)))
    (call,) = llm_calls(captured)
    assert call.attributes[semconv.ATTR_ERROR_TYPE] == "ConnectionResetError"
    assert call.attributes[semconv.ATTR_ROLLOUT_STATUS] == semconv.STATUS_ERROR
    assert call.attributes[semconv.GEN_AI_REQUEST_MODEL] == "Qwen2.5-0.5B-Instruct"


def _one_call(captured, sampling_params, server_id):
    """verl's real ``LLMServerClient.generate`` inside a trajectory, as an agent loop calls it."""
    from otel_verl.hooks.rollout import trajectory

    worker = make_worker()
    worker.llm_client._load_balancer = FakeBalancer(FakeServer(), server_id)
    st = trajectory._trajectory_start((None, {"step": 5, "sample_index": 0}), {"agent_name": "a"}, None)

    async def agent_turn():
        return await worker.llm_client.generate("conv-1", prompt_ids=PROMPT, sampling_params=sampling_params)

    asyncio.run(agent_turn())
    trajectory._trajectory_end(st, None, None)
    (call,) = llm_calls(captured)
    return call


def test_the_sampling_settings_and_the_replicas_address_are_the_conventions_attributes(captured):
    params = {"max_tokens": 3, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "seed": 7, "repetition_penalty": 1.0}
    call = _one_call(captured, params, "[fd00::1]:8001")  # verl's id of a vLLM replica: its HTTP address
    a = call.attributes
    assert call.name == "text_completion Qwen2.5-0.5B-Instruct" and call.kind == trace.SpanKind.CLIENT
    assert a[semconv.GEN_AI_REQUEST_TOP_K] == 20.0 and isinstance(a[semconv.GEN_AI_REQUEST_TOP_K], float)
    assert a[semconv.GEN_AI_REQUEST_SEED] == 7
    assert (a[semconv.GEN_AI_REQUEST_TEMPERATURE], a[semconv.GEN_AI_REQUEST_TOP_P]) == (0.7, 0.9)
    assert a[semconv.ATTR_SERVER_ADDRESS] == "fd00::1" and a[semconv.ATTR_SERVER_PORT] == 8001
    assert a[semconv.ATTR_ROLLOUT_SERVER_ID] == "[fd00::1]:8001"
    assert a[semconv.GEN_AI_CONVERSATION_ID] == "conv-1" and a[semconv.ATTR_ROLLOUT_SUBMIT_STEP] == 5
    assert not [k for k in a if "prompt" in k or "message" in k or "content" in k]  # never the text


def test_settings_that_are_off_or_not_numbers_are_left_out(captured):
    call = _one_call(captured, {"max_tokens": 3, "top_k": -1, "seed": True, "temperature": "hot"}, "replica-0")
    for key in (semconv.GEN_AI_REQUEST_TOP_K, semconv.GEN_AI_REQUEST_SEED, semconv.GEN_AI_REQUEST_TEMPERATURE):
        assert key not in call.attributes
    assert semconv.ATTR_SERVER_ADDRESS not in call.attributes and semconv.ATTR_SERVER_PORT not in call.attributes


@pytest.mark.parametrize(
    ("server_id", "endpoint"),
    [
        ("10.0.0.7:8000", ("10.0.0.7", 8000)),
        ("node-3.cluster.local:40123", ("node-3.cluster.local", 40123)),
        ("[fd00::1]:8001", ("fd00::1", 8001)),
        ("replica-0", None),  # a custom balancer's name, the CPU harness's actor name
        ("fd00::1:8001", None),  # an IPv6 address without brackets: which part is the port?
        ("10.0.0.7:0", None),
        ("10.0.0.7:65536", None),
        ("10.0.0.7:", None),
        (":8000", None),
        ("user@10.0.0.7:8000", None),
        ("10.0.0.7:8000\n", None),
        ("a" * 100_000 + ":8000", None),
    ],
)
def test_the_server_address_is_read_only_from_an_id_that_is_an_address(server_id, endpoint):
    from otel_verl.hooks.rollout.llm import server_endpoint

    assert server_endpoint(server_id) == endpoint


@pytest.mark.parametrize(
    ("name", "attributes", "found"),
    [
        (
            "text_completion Qwen/Qwen3-8B",
            {"gen_ai.operation.name": "text_completion", "verl.rollout.submit_step": 1},
            True,
        ),
        ("text_completion", {"gen_ai.operation.name": "text_completion", "verl.rollout.submit_step": 1}, True),
        ("verl.rollout.llm_call", {}, True),  # as older otel-verl named it: its files still read
        ("text_completion gpt-4", {"gen_ai.operation.name": "text_completion"}, False),  # a user's own client
        ("execute_tool search", {"gen_ai.operation.name": "execute_tool", "verl.rollout.submit_step": 1}, False),
        ("verl.rollout.trajectory", {"verl.rollout.submit_step": 1, "gen_ai.agent.name": "a"}, False),
        ("llm_request", {"gen_ai.response.model": "m", "gen_ai.request.id": "x"}, False),  # the engine's span
        ("text_completion m", None, False),
    ],
)
def test_llm_calls_are_found_by_what_they_carry_new_and_old(name, attributes, found):
    assert semconv.is_llm_call(name, attributes) is found


# -- the GenAI conventions' client metrics (gen-ai-metrics.md), beside verl.rollout.llm_call.duration

MODEL = "Qwen2.5-0.5B-Instruct"
GEN_AI = {semconv.GEN_AI_OPERATION_NAME: "text_completion", semconv.GEN_AI_PROVIDER_NAME: "vllm"}
GEN_AI |= {semconv.GEN_AI_REQUEST_MODEL: MODEL}
# the conventions' advice, as the SDK exports it when the instrument was created with it
DURATION_BOUNDS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
TOKEN_BOUNDS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]


def _metrics(captured) -> dict[str, object]:
    """metric name -> the SDK's exported metric (name, unit, description, points), one collection."""
    data = captured.reader.get_metrics_data()  # records the queued values first (``deferred``)
    return {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


def _usage(metric) -> dict[str, object]:
    points = {p.attributes[semconv.GEN_AI_TOKEN_TYPE]: p for p in metric.data.data_points}
    assert len(points) == len(metric.data.data_points)
    return points


def test_every_call_feeds_the_genai_client_metrics_with_the_conventions_attributes_and_buckets(captured):
    worker = make_worker()
    asyncio.run(worker.generate_sequences(make_batch()))  # 4 calls, responses of 2, 2, 3, 3 tokens
    calls = llm_calls(captured)
    metrics = _metrics(captured)

    op = metrics[semconv.M_GEN_AI_CLIENT_OPERATION_DURATION]
    assert (op.unit, op.description) == ("s", "GenAI operation duration.")
    (duration,) = op.data.data_points  # no per-call value on the points: one series
    assert dict(duration.attributes) == GEN_AI
    assert list(duration.explicit_bounds) == DURATION_BOUNDS
    assert duration.count == len(calls) == 4
    # the same seconds as otel-verl's own histogram of the calls, and as the spans
    (own,) = metrics[semconv.M_ROLLOUT_LLM_CALL_DURATION].data.data_points
    assert duration.sum == pytest.approx(own.sum)
    assert duration.sum == pytest.approx(sum(c.end_time - c.start_time for c in calls) / 1e9, abs=0.02)

    usage = metrics[semconv.M_GEN_AI_CLIENT_TOKEN_USAGE]
    assert usage.unit == "{token}"
    points = _usage(usage)
    assert sorted(points) == ["input", "output"]
    for token_type, point in points.items():
        assert dict(point.attributes) == {**GEN_AI, semconv.GEN_AI_TOKEN_TYPE: token_type}
        assert list(point.explicit_bounds) == TOKEN_BOUNDS
        assert point.count == 4
    assert points["input"].sum == sum(c.attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] for c in calls) == 4 * len(PROMPT)
    assert points["output"].sum == sum(c.attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] for c in calls) == 10
    assert (points["output"].min, points["output"].max) == (2, 3)


def test_the_genai_metrics_count_calls_whose_trajectory_is_not_recorded(captured, monkeypatch):
    from otel_verl.config import settings

    monkeypatch.setenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP", "0")
    settings.cache_clear()
    try:
        asyncio.run(make_worker().generate_sequences(make_batch(validate=True)))
    finally:
        monkeypatch.delenv("OTEL_VERL_ROLLOUT_SPANS_PER_STEP")
        settings.cache_clear()
    assert not llm_calls(captured)
    metrics = _metrics(captured)
    (duration,) = metrics[semconv.M_GEN_AI_CLIENT_OPERATION_DURATION].data.data_points
    assert (dict(duration.attributes), duration.count) == (GEN_AI, 4)  # validation calls too: an LLM call is one
    points = _usage(metrics[semconv.M_GEN_AI_CLIENT_TOKEN_USAGE])
    assert (points["input"].sum, points["output"].sum) == (4 * len(PROMPT), 10)


def test_the_genai_metrics_leave_the_calls_own_values_and_the_replica_on_the_span(captured):
    """Bounded series: no conversation or response id, no sampling setting, and no ``server.address``
    (every agent-loop worker calls every replica: it would multiply the series by the replicas)."""
    call = _one_call(captured, {"max_tokens": 3, "temperature": 0.7, "seed": 7}, "10.0.0.7:8000")
    assert call.attributes[semconv.ATTR_SERVER_ADDRESS] == "10.0.0.7"  # the span has it
    metrics = _metrics(captured)
    (duration,) = metrics[semconv.M_GEN_AI_CLIENT_OPERATION_DURATION].data.data_points
    assert dict(duration.attributes) == GEN_AI
    for point in metrics[semconv.M_GEN_AI_CLIENT_TOKEN_USAGE].data.data_points:
        assert set(point.attributes) == {*GEN_AI, semconv.GEN_AI_TOKEN_TYPE}


@pytest.mark.parametrize(
    ("error", "error_type"),
    [
        (ConnectionResetError("engine gone"), "ConnectionResetError"),
        (asyncio.CancelledError(), "asyncio.exceptions.CancelledError"),  # verl's abort of a replica's requests
    ],
)
def test_a_failed_call_has_its_error_type_on_the_duration_and_reports_no_tokens(captured, error, error_type):
    """The conventions require ``error.type`` on an operation that ended in an error; a call that
    returned nothing has no usage to report (the successful ones still do)."""
    worker = make_worker()
    server = FakeServer()
    answered = server.generate.remote

    async def flaky(**kwargs):
        if kwargs["sampling_params"]["max_tokens"] == 3:  # sample 1's calls fail
            raise error
        return await answered(**kwargs)

    server.generate.remote = flaky
    worker.llm_client._load_balancer = FakeBalancer(server)
    with pytest.raises(type(error)):
        asyncio.run(worker.generate_sequences(make_batch(prompts=2, n=1)))
    metrics = _metrics(captured)
    by_error = {
        p.attributes.get(semconv.ATTR_ERROR_TYPE): p
        for p in metrics[semconv.M_GEN_AI_CLIENT_OPERATION_DURATION].data.data_points
    }
    assert sorted(by_error, key=str) == sorted([None, error_type], key=str)
    assert by_error[None].count == 1 and dict(by_error[None].attributes) == GEN_AI
    assert by_error[error_type].count == 1
    assert dict(by_error[error_type].attributes) == {**GEN_AI, semconv.ATTR_ERROR_TYPE: error_type}
    (failed,) = [c for c in llm_calls(captured) if semconv.ATTR_ERROR_TYPE in c.attributes]
    assert failed.attributes[semconv.ATTR_ERROR_TYPE] == error_type  # the span says the same
    points = _usage(metrics[semconv.M_GEN_AI_CLIENT_TOKEN_USAGE])
    assert (points["input"].count, points["output"].count) == (1, 1)  # the call that returned
    assert points["output"].sum == 2


def test_the_genai_duration_carries_the_exemplar_of_its_trajectory(captured):
    worker = make_worker()
    asyncio.run(worker.generate_sequences(make_batch(prompts=1, n=1)))
    (traj,) = by_name(captured, semconv.SPAN_ROLLOUT_TRAJECTORY)
    (duration,) = _metrics(captured)[semconv.M_GEN_AI_CLIENT_OPERATION_DURATION].data.data_points
    (exemplar,) = duration.exemplars
    assert (exemplar.trace_id, exemplar.span_id) == (traj.context.trace_id, traj.context.span_id)
