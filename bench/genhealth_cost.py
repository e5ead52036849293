"""CPU per trajectory of the generation-health check (``otel_verl.hooks.rollout.health``) on the
agent-loop worker's event loop, at 1,024 trajectories per worker per step, side by side in one run.

verl's real ``AgentLoopWorker``, ``LLMServerClient`` and ``RewardLoopWorker`` with the rollout unit
tests' stand-ins for the Ray boundary (as ``bench/tail_cost.py --micro``: ``_tail_micro``), otel-verl
instrumented with its file exporters. Each step is 64 prompts x 16 = 1,024 trajectories whose
responses have ``L`` token ids (random ids from a 150k vocabulary, or a 7-token loop); after a
warm-up step, ``--rounds`` steps per response kind. Per trajectory (medians over the steps): the
check's own CPU where it runs on the event loop (``health.measure`` timed with the thread's CPU
clock, the clock's own cost taken off), otel-verl's hooks' CPU there (``otel_verl._hook_clock``,
the check included) and the event loop thread's whole CPU (``time.thread_time``: verl's work and
ours), with the check's share of each; and the check alone, 2,000 calls on one response.

``python bench/genhealth_cost.py [--rounds 3] [--lengths 16,1024,8192] [--shapes random,loop]``

``--guard``: instead, the guard's measure in the TaskRunner (``hooks.guard.generation``: at most
``SCAN`` responses of the training batch per step) on v0 batches of ``B`` responses x ``L`` tokens
(a quarter of them loops), side by side with verl's own ``compute_advantage`` (GRPO, 16 per group)
on the same batch, the call the measure follows: CPU ms per step on the training thread.
``python bench/genhealth_cost.py --guard [--rounds 5] [--batches 1024,4096] [--lengths 1024,4096]``
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import random
import statistics
import time

import _tail_micro as tm  # sets the exporters' environment, as the micro benchmark runs
from _util import interleaved, machine, table

from otel_verl import VerlInstrumentor

VerlInstrumentor().instrument()  # before verl's modules load, as in a run

import numpy as np  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput, register  # noqa: E402
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: E402
from verl_cpu_harness import agent_loop as rh  # noqa: E402

from otel_verl import _hook_clock  # noqa: E402
from otel_verl.hooks.rollout import health  # noqa: E402
from otel_verl.process.state import PROCESS  # noqa: E402

PROMPTS, N = 64, 16  # 1,024 trajectories per step
RESPONSE: list[int] = []  # what every trajectory of the step answers


@register("bench_health_agent")
class Responding(rh.EchoAgentLoop):
    """One 4-token LLM call; the response is ``RESPONSE`` (each trajectory its own list, as verl's)."""

    async def run(self, sampling_params, **kwargs):
        await self.server_manager.generate("req", prompt_ids=rh.PROMPT, sampling_params={"max_tokens": 4})
        return AgentLoopOutput(
            prompt_ids=rh.PROMPT,
            response_ids=list(RESPONSE),
            response_mask=[1] * len(RESPONSE),
            num_turns=2,
            reward_score=None,
            metrics=AgentLoopMetrics(),
        )


def _responses(length: int, shape: str) -> list[int]:
    if shape == "loop":
        return ([101, 102, 103, 104, 105, 106, 107] * (length // 7 + 1))[:length]
    rng = random.Random(length)
    return [rng.randrange(150_000) for _ in range(length)]


def _guard_batch(batch: int, length: int):
    """A v0 batch after the reward: right-padded responses of random lengths up to ``length``, a
    quarter loops at the limit, GRPO groups of 16 (``uid``), a reward on each response's last token."""
    import torch
    from verl import DataProto

    gen = torch.Generator().manual_seed(batch + length)
    responses = torch.randint(1, 150_000, (batch, length), generator=gen)
    lengths = torch.randint(length // 4, length + 1, (batch,), generator=gen)
    loops = torch.arange(batch) % 4 == 3
    lengths[loops] = length
    responses[loops] = torch.tensor(_responses(length, "loop"))
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).long()
    responses *= mask
    rewards = torch.zeros(batch, length)
    rewards[torch.arange(batch), lengths - 1] = torch.rand(batch, generator=gen)
    prompts = torch.ones(batch, 64, dtype=torch.long)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "attention_mask": torch.cat([prompts, mask], dim=1),
            "response_mask": mask,
            "token_level_rewards": rewards,
        },
        non_tensors={"uid": np.array([str(i // 16) for i in range(batch)], dtype=object)},
    )


def guard_main(args: argparse.Namespace) -> None:
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    from otel_verl.hooks.guard import generation

    rows = []
    for batch in (int(x) for x in args.batches.split(",")):
        for length in (int(x) for x in args.lengths.split(",")):
            data = _guard_batch(batch, length)
            limits = health.Limits(length, frozenset({0}))

            def verl_step(data=data) -> float:
                t = time.thread_time()
                ray_trainer.compute_advantage(data, adv_estimator=AdvantageEstimator.GRPO, num_repeat=16)
                return 1e3 * (time.thread_time() - t)

            def guard_step(data=data, limits=limits) -> float:
                t = time.thread_time()
                found = generation.padded_shares(data.batch["responses"], data.batch["attention_mask"], limits)
                assert found is not None
                return 1e3 * (time.thread_time() - t)

            verl_step(), guard_step()  # warm-up
            got = interleaved({"verl": verl_step, "guard": guard_step}, args.rounds)
            measured = min(batch, generation.SCAN)
            rows.append(
                [batch, length, measured, f"{got['guard']:.1f}", f"{1e3 * got['guard'] / measured:.0f}"]
                + [f"{got['verl']:.1f}", f"{got['guard'] / got['verl']:.1%}"]
            )
    print(machine())
    print(f"CPU ms per step on the training thread, median of {args.rounds} interleaved rounds")
    print(
        table(
            [
                "responses",
                "tokens",
                "measured",
                "guard's measure",
                "us per measured",
                "verl's compute_advantage",
                "measure / verl's",
            ],
            rows,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lengths", default="16,1024,8192")
    parser.add_argument("--shapes", default="random,loop")
    parser.add_argument("--guard", action="store_true", help="the guard's per-step measure in the TaskRunner")
    parser.add_argument("--batches", default="1024,4096", help="--guard: responses per batch")
    args = parser.parse_args()
    if args.guard:
        return guard_main(args)
    lengths = [int(x) for x in args.lengths.split(",")]

    reward = RewardLoopWorker.__new__(RewardLoopWorker)
    reward.config = OmegaConf.create({"reward": {"custom_reward_function": {"path": "user.py"}}})
    reward.reward_manager = tm.Manager()

    async def score(data):  # the reward call's data and reply pickled, as Ray does
        return pickle.loads(pickle.dumps(await reward.compute_score(pickle.loads(pickle.dumps(data)))))

    worker = rh.make_worker()
    worker.llm_client._load_balancer = tm.Instant(rh.FakeServer())
    worker.reward_loop_worker_handles = [type("H", (), {"compute_score": rh._Remote(score)})()]
    worker.mm_processor_kwargs = None
    worker.rollout_config = OmegaConf.merge(
        worker.rollout_config, {"response_length": max(lengths)}
    )  # the length limit is read from here
    real_measure = health.measure
    spent = [0.0]

    def timed(ids, limits):  # the check's own CPU on the event loop, in the real path
        t = time.thread_time()
        try:
            return real_measure(ids, limits)
        finally:
            spent[0] += time.thread_time() - t

    # what the two clock reads cost, to take off the figure above
    t = time.thread_time()
    for _ in range(100_000):
        time.thread_time() - time.thread_time()
    clock_us = 1e6 * (time.thread_time() - t) / 100_000 / 2  # about one read per measured interval

    step = [0]

    def run_step() -> tuple[float, float, float]:
        step[0] += 1
        agents = np.array(["bench_health_agent"] * PROMPTS * N, dtype=object)
        batch = rh.make_batch(step=step[0], prompts=PROMPTS, n=N, agent_name=agents)
        spent[0] = 0.0
        thread, hooks = time.thread_time(), _hook_clock.totals_ns()[0]
        asyncio.run(worker.generate_sequences(batch))
        thread = time.thread_time() - thread
        hooks = _hook_clock.totals_ns()[0] - hooks
        PROCESS.telemetry.flush(30.0)
        n = PROMPTS * N
        return 1e6 * spent[0] / n - clock_us, hooks / 1e3 / n, 1e6 * thread / n

    health.measure = timed
    rows = []
    for shape in args.shapes.split(","):
        for length in lengths:
            RESPONSE[:] = _responses(length, shape)
            run_step()  # warm-up
            steps = [run_step() for _ in range(args.rounds)]
            check, hooks, loop = (statistics.median(v) for v in zip(*steps, strict=True))
            ids = list(RESPONSE)
            limits = health.Limits(max(lengths), frozenset({0}))
            t = time.thread_time()
            for _ in range(2000):
                real_measure(ids, limits)
            alone = 1e6 * (time.thread_time() - t) / 2000
            rows.append(
                [shape, length, f"{alone:.1f}", f"{check:.1f}", f"{hooks:.0f}", f"{check / hooks:.1%}", f"{loop:.0f}"]
                + [f"{check / loop:.2%}"]
            )
    health.measure = real_measure
    print(machine())
    print(f"{PROMPTS * N} trajectories per step, median of {args.rounds} steps, us of CPU per trajectory")
    print(
        table(
            [
                "response",
                "tokens",
                "check alone",
                "check in the run",
                "otel-verl hooks (check included)",
                "check / hooks",
                "event loop",
                "check / event loop",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
