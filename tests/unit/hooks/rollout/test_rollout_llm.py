"""LLM call spans (``otel_verl.hooks.rollout.llm``) with verl's real ``LLMServerClient.generate`` /
``_acquire_server`` under real trajectories (``AgentLoopWorker``): ``gen_ai.*`` request and
response attributes, server id and load-balancer wait, the call histogram.
"""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import trace
from rollout_helpers import PROMPT, FakeBalancer, FakeServer, by_name, hist, make_batch, make_worker

from otel_verl import semconv


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

    calls = by_name(captured, semconv.SPAN_ROLLOUT_LLM_CALL)
    assert len(calls) == 4
    parents = {t.context.span_id: t for t in trajs}
    for c in calls:
        traj = parents[c.parent.span_id]  # child of its trajectory
        a = c.attributes
        assert c.kind == trace.SpanKind.CLIENT
        assert a[semconv.GEN_AI_OPERATION_NAME] == "text_completion"
        assert a[semconv.GEN_AI_PROVIDER_NAME] == "vllm"
        assert a[semconv.GEN_AI_REQUEST_MODEL] == "Qwen2.5-0.5B-Instruct"  # the folder's name, not the user's path
        assert semconv.ATTR_ERROR_TYPE not in a
        assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == len(PROMPT)
        assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == traj.attributes[semconv.ATTR_ROLLOUT_RESPONSE_TOKENS]
        assert a[semconv.GEN_AI_REQUEST_MAX_TOKENS] == a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]
        assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("completed",)
        assert a[semconv.ATTR_ROLLOUT_CACHED_TOKENS] == 2
        assert a[semconv.ATTR_ROLLOUT_PREEMPTIONS] == 0
        assert a[semconv.ATTR_ROLLOUT_WEIGHT_VERSION] == 3
        assert a[semconv.ATTR_ROLLOUT_SERVER_ID] == "replica-0"
        assert 0.02 <= a[semconv.ATTR_ROLLOUT_SERVER_WAIT] < (c.end_time - c.start_time) / 1e9

    # reward scoring makes no span here: the reward worker's span is the trajectory's child
    names = {s.name for s in captured.finished()}
    assert names == {semconv.SPAN_ROLLOUT_TRAJECTORY, semconv.SPAN_ROLLOUT_LLM_CALL, semconv.SPAN_ROLLOUT_TAIL}, names

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
    (call,) = by_name(captured, semconv.SPAN_ROLLOUT_LLM_CALL)
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
    (call,) = by_name(captured, semconv.SPAN_ROLLOUT_LLM_CALL)
    assert call.attributes[semconv.ATTR_ERROR_TYPE] == "ConnectionResetError"
    assert call.attributes[semconv.ATTR_ROLLOUT_STATUS] == semconv.STATUS_ERROR
    assert call.attributes[semconv.GEN_AI_REQUEST_MODEL] == "Qwen2.5-0.5B-Instruct"
