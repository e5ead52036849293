"""What saying what the v1 wait waits for costs the TaskRunner's thread per poll (``hooks/waiting_for``),
next to verl's own work per poll (``ReplayBuffer._sync_metadata_from_transfer_queue`` on a prepared
TransferQueue answer, the RPC itself left out), on verl's real ``ReplayBuffer``:

* every poll: the counts (four ``len``) and the picture the stall doctor reads;
* at most every few poll intervals: naming the oldest groups in flight (a bounded scan), and the
  span event with them;
* in the agent-loop workers: the running status's start stamp, and the replica check on every LLM
  call (one put's own work on a group's first call; the TransferQueue RPC itself left out).

    PYTHONPATH=$PWD .venv/bin/python bench/wait_for_cost.py
"""

from __future__ import annotations

import statistics
import uuid
from types import SimpleNamespace

from _util import interleaved, machine, per_call_ns, table

from otel_verl.hooks import poll_lag, waiting_for
from otel_verl.process.state import PROCESS


def _answer(in_flight: int, finished: int, n: int = 2) -> dict:
    """A TransferQueue ``kv_list`` answer: prompts in flight (stamped running) and finished, n trajectories each."""
    items: dict[str, dict] = {}
    for i in range(in_flight + finished):
        uid = str(uuid.UUID(int=i + 1))
        running = i < in_flight
        tag = {"is_prompt": True, "global_steps": 3, "status": "running" if running else "finished"}
        tag[poll_lag.STARTED_AT] = 1000.0 + i
        items[uid] = tag
        for s in range(n if not running else 0):
            items[f"{uid}_{s}_0"] = {"status": "success", "global_steps": 3, "prompt_len": 10, "response_len": 20}
    return {"train": items}


def _buffer(rb, answer: dict):
    rb.tq = SimpleNamespace(kv_list=lambda *a, **k: answer)
    buffer = rb.ReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
    )
    buffer._sync_metadata_from_transfer_queue()
    return buffer


def main() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from verl.trainer.ppo.v1 import replay_buffer as rb

    trainer = type("Trainer", (), {})()  # the TaskRunner's trainer (held weakly)
    PROCESS.trainer = trainer
    waiting_for.clock = lambda: 1000.0  # a wait that never grows: the per-poll path names nothing
    span = TracerProvider().get_tracer("bench").start_span("verl.wait")
    rows = []
    for in_flight, finished in ((512, 0), (4096, 512), (100_000, 0)):
        answer = _answer(in_flight, finished)
        buffer = _buffer(rb, answer)
        poll_lag.begin()
        poll_lag._open.listing = answer  # what the kv_list hook keeps while a sample is open
        n = 20 if in_flight > 10_000 else 200

        def verl_poll(buffer=buffer, n=n) -> float:
            return per_call_ns(buffer._sync_metadata_from_transfer_queue, max(2, n // 20))

        def per_poll(buffer=buffer, n=n) -> float:
            return per_call_ns(lambda: waiting_for._polled(buffer, ("train", 0.0), {}), n * 50)

        def naming(buffer=buffer, n=n, counts=(0, in_flight, finished, 0)) -> float:
            def name_and_event() -> None:
                oldest, scanned = waiting_for._oldest(buffer, "train")
                picture = waiting_for.Waiting("train", counts, 512, 990.0, 1000.0, 2.0, 5, oldest, scanned, 1000.0)
                span.add_event("verl.wait.still_waiting", attributes=picture.attributes(1000.0, 1100.0))

            return per_call_ns(name_and_event, n)

        got = interleaved({"verl": verl_poll, "poll": per_poll, "name": naming}, rounds=5)
        rows.append(
            (
                f"{in_flight:,} running, {finished:,} finished",
                f"{got['verl'] / 1e3:,.0f} us",
                f"{got['poll'] / 1e3:.1f} us",
                f"{got['name'] / 1e3:,.0f} us",
                f"{got['poll'] / got['verl']:.4%}",
            )
        )
    print(f"# bench/wait_for_cost.py  ({machine()}; median of 5 interleaved rounds)")
    print(
        table(
            (
                "replay buffer",
                "verl's own poll (metadata sync)",
                "added every poll",
                "naming + event (rate-limited)",
                "every-poll / verl",
            ),
            rows,
        )
    )
    stamp = statistics.median(
        per_call_ns(lambda: poll_lag._stamped({"status": "running"}, poll_lag.STARTED_AT), 100_000) for _ in range(5)
    )
    print(f"agent-loop worker, per prompt group: the running status's start stamp {stamp / 1e3:.2f} us")
    said, first = _replica_costs()
    print(
        f"agent-loop worker, per LLM call: the replica check once its group's replica was said {said / 1e3:.2f} us; "
        f"per prompt group, its first call: the replica put's own work {first / 1e3:.2f} us "
        "(plus one TransferQueue put, verl makes two per group: its running and terminal statuses)"
    )


def _replica_costs(n: int = 20_000) -> tuple[float, float]:
    """ns per ``poll_lag.note_replica`` in an event loop: a call whose group said its replica already
    (every call after a group's first), and a group's first call with a put that does nothing."""
    import asyncio
    import time

    async def put(**kwargs) -> None:
        return None

    async def said() -> float:
        poll_lag.GROUP.set(poll_lag._Running("uid", "train", put))
        await poll_lag.note_replica("10.0.0.4:8000")  # the first: sends
        start = time.perf_counter_ns()
        for _ in range(n):
            await poll_lag.note_replica("10.0.0.4:8000")
        return (time.perf_counter_ns() - start) / n

    async def first() -> float:
        groups = [poll_lag._Running(f"uid-{i}", "train", put) for i in range(n)]
        start = time.perf_counter_ns()
        for g in groups:
            poll_lag.GROUP.set(g)
            await poll_lag.note_replica("10.0.0.4:8000")
        return (time.perf_counter_ns() - start) / n

    runs = [(asyncio.run(said()), asyncio.run(first())) for _ in range(5)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


if __name__ == "__main__":
    main()
