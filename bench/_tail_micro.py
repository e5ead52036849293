"""One process of ``bench/tail_cost.py --micro``: ``python bench/_tail_micro.py 0|1`` (1: with otel-verl).

verl's real ``AgentLoopWorker``, ``LLMServerClient`` and ``RewardLoopWorker`` with the rollout unit
tests' stand-ins for the Ray boundary (a server that answers at once; the reward call's data and
reply pickled, as Ray does), ``MICRO_STEPS`` steps of ``PROMPTS`` x ``N`` trajectories. Prints, as
its last line, the median over the steps after the first of the event loop thread's CPU, the
other threads' CPU and otel-verl's hook functions' CPU (``otel_verl._hook_clock``, on the event
loop here: both the agent-loop and the reward worker's side), in microseconds per trajectory:
``{"loop": ..., "others": ..., "hooks": ...}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import statistics
import sys
import tempfile
import time

from tail_cost import MICRO_STEPS, PROMPTS, N

INSTRUMENTED = sys.argv[1:] == ["1"]
os.environ.update(
    {
        "OTEL_TRACES_EXPORTER": "otlp_json_file",
        "OTEL_METRICS_EXPORTER": "otlp_json_file",  # collected at each step's end, as in a run
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",  # only those step exports
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_VERL_FILE_DIR": tempfile.mkdtemp(prefix="bench_tail_micro_"),
        "OTEL_VERL_PROCESS_METRICS": "false",
    }
)
if INSTRUMENTED:
    from otel_verl import VerlInstrumentor

    VerlInstrumentor().instrument()

import numpy as np  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput, register  # noqa: E402
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: E402
from verl_cpu_harness import agent_loop as rh  # noqa: E402


@register("bench_scored_agent")
class Scored(rh.EchoAgentLoop):
    """One 4-token LLM turn; the reward comes from the reward loop."""

    async def run(self, sampling_params, **kwargs):
        out = await self.server_manager.generate("req", prompt_ids=rh.PROMPT, sampling_params={"max_tokens": 4})
        return AgentLoopOutput(
            prompt_ids=rh.PROMPT,
            response_ids=out.token_ids,
            response_mask=[1] * len(out.token_ids),
            num_turns=2,
            reward_score=None,
            metrics=AgentLoopMetrics(),
        )


class Manager:
    async def run_single(self, data):
        return {"reward_score": 1.0, "reward_extra_info": {"acc": 1.0}}


class Instant(rh.FakeBalancer):
    def __init__(self, server):
        super().__init__(server)

        async def acquire_server(request_id):
            return "replica-0", server

        self.acquire_server = rh._Remote(acquire_server)


def main() -> None:
    reward = RewardLoopWorker.__new__(RewardLoopWorker)
    reward.config = OmegaConf.create({"reward": {"custom_reward_function": {"path": "user.py"}}})
    reward.reward_manager = Manager()

    async def score(data):
        reply = await reward.compute_score(pickle.loads(pickle.dumps(data)))
        return pickle.loads(pickle.dumps(reply))

    worker = rh.make_worker()
    worker.llm_client._load_balancer = Instant(rh.FakeServer())
    worker.reward_loop_worker_handles = [type("H", (), {"compute_score": rh._Remote(score)})()]
    worker.mm_processor_kwargs = None
    loop_us, others_us, hooks_us = [], [], []
    for step in range(1, MICRO_STEPS + 1):
        agents = np.array(["bench_scored_agent"] * PROMPTS * N, dtype=object)
        batch = rh.make_batch(step=step, prompts=PROMPTS, n=N, agent_name=agents)
        cpu, thread, hooks = time.process_time(), time.thread_time(), _hooks_ns()
        asyncio.run(worker.generate_sequences(batch))
        if INSTRUMENTED:
            from otel_verl.process.state import PROCESS

            PROCESS.telemetry.flush(30.0)  # this step's spans exported: the exporter's CPU is in it
        thread = time.thread_time() - thread
        cpu = time.process_time() - cpu
        hooks = _hooks_ns() - hooks
        if step > 1:
            loop_us.append(1e6 * thread / (PROMPTS * N))
            others_us.append(1e6 * (cpu - thread) / (PROMPTS * N))
            hooks_us.append(hooks / 1e3 / (PROMPTS * N))
    out = {"loop": statistics.median(loop_us), "others": statistics.median(others_us)}
    out["hooks"] = statistics.median(hooks_us)
    print(json.dumps(out))


def _hooks_ns() -> int:
    """CPU of otel-verl's hook functions on this process's threads so far (``otel_verl._hook_clock``)."""
    if not INSTRUMENTED:
        return 0
    from otel_verl import _hook_clock

    return _hook_clock.totals_ns()[0]


if __name__ == "__main__":
    main()
