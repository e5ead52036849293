"""Shared stand-ins of the rollout tests: verl's real agent-loop worker and LLM client, with only
the Ray boundary (load balancer and server handles) and the agent loop itself (a registered test
agent, ``otel_test_agent``) replaced. Used by the rollout hooks' unit tests and by the rollout
micro-benchmarks in ``bench/``.
"""

from __future__ import annotations

import asyncio

import numpy as np
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorker,
    register,
)
from verl.protocol import DataProto
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

from otel_verl import semconv

PROMPT = [11, 12, 13]


@register("otel_test_agent")
class EchoAgentLoop:
    """One LLM turn; response length = 2 + sample index (so lengths differ per trajectory)."""

    def __init__(self, server_manager, **kwargs):
        self.server_manager = server_manager

    async def run(self, sampling_params, **kwargs):
        n = 2 + int(kwargs["index"])
        out = await self.server_manager.generate(
            "req", prompt_ids=PROMPT, sampling_params={**sampling_params, "max_tokens": n}
        )
        if kwargs.get("fail"):
            raise RuntimeError("agent failed")
        return AgentLoopOutput(
            prompt_ids=PROMPT,
            response_ids=out.token_ids,
            response_mask=[1] * len(out.token_ids),
            num_turns=2,
            reward_score=0.25 * n,
            metrics=AgentLoopMetrics(),
        )


class _Remote:
    def __init__(self, fn):
        self.remote = fn


class FakeServer:
    def __init__(self, delays=None):
        self.delays = delays or {}
        self.request_ids: list[str] = []  # the ids the engine got, one per call

        async def generate(*, request_id, prompt_ids, sampling_params, image_data=None, video_data=None, **kw):
            self.request_ids.append(request_id)
            n = sampling_params["max_tokens"]
            await asyncio.sleep(self.delays.get(n, 0.0))
            return TokenOutput(
                token_ids=[7] * n,
                stop_reason="completed",
                num_preempted=0,
                extra_fields={"global_steps": 3, "num_cached_tokens": 2},
            )

        self.generate = _Remote(generate)


class FakeBalancer:
    def __init__(self, server, server_id="replica-0"):
        self.server = server

        async def fields():
            return []

        async def acquire_server(request_id):
            await asyncio.sleep(0.02)  # queueing in the load balancer
            return server_id, server

        self.require_acquire_fields = _Remote(fields)
        self.require_release_fields = _Remote(fields)
        self.acquire_server = _Remote(acquire_server)
        self.release_server = _Remote(lambda **kw: None)


CONFIG = OmegaConf.create(
    {
        "data": {},
        "actor_rollout_ref": {
            "model": {"path": "/home/someone/ckpt/Qwen2.5-0.5B-Instruct/"},
            "rollout": {
                "name": "vllm",
                "temperature": 1.0,
                "top_p": 1.0,
                "top_k": -1,
                "calculate_log_probs": False,
                "val_kwargs": {"top_p": 1.0, "top_k": -1, "temperature": 0},
                "agent": {"default_agent_loop": "otel_test_agent"},
            },
        },
    }
)


class StubbedWorker(AgentLoopWorker):
    """The real worker with verl's padding/postprocessing (tokenizer work) left out."""

    async def _agent_loop_postprocess(self, output, validate, **kwargs):
        await self._compute_score([output], kwargs=kwargs)
        return output

    def _postprocess(self, outputs, input_non_tensor_batch, validate):
        return outputs


def make_worker(delays=None):
    client = LLMServerClient.__new__(LLMServerClient)
    LLMServerClient.__init__(client, CONFIG, FakeBalancer(FakeServer(delays)))
    worker = StubbedWorker.__new__(StubbedWorker)
    worker.config = CONFIG
    worker.rollout_config = CONFIG.actor_rollout_ref.rollout
    worker.llm_client = client
    worker.tokenizer = worker.processor = worker.hf_model_type = worker.dataset_cls = None
    worker.tools = []
    worker.reward_loop_worker_handles = None
    return worker


def make_batch(step=3, validate=False, prompts=2, n=2, **extra):
    index = np.repeat(np.arange(prompts), n)
    non_tensor = {"index": index, "raw_prompt": np.array(["p"] * len(index), dtype=object)}
    non_tensor.update(extra)
    return DataProto(non_tensor_batch=non_tensor, meta_info={"global_steps": step, "validate": validate})


def by_name(captured, name):
    return [s for s in captured.finished() if s.name == name]


def llm_calls(captured):
    """The LLM-call spans, found as every reader finds them (``semconv.is_llm_call``)."""
    return [s for s in captured.finished() if semconv.is_llm_call(s.name, s.attributes)]


def hist(captured, name):
    return captured.metric_points().get(name, [])
