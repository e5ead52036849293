"""A synthetic training loop through verl's own step code, with otel-verl on, for memory soaks.

Each step drives verl's code the way the TaskRunner does: ``marked_timer("step")`` around 10
``marked_timer`` stages (-> ``verl.utils.profiler.performance._timer``, wrapped by otel-verl), three
of them with a driver worker-group call (``verl.wg.*`` client span through otel-verl's
``func_generator`` proxy) and ``Tracking.log`` of 100 numeric keys (gauges, stage histogram,
step-boundary metric export). Cases: ``dead`` (OTLP/gRPC exporters to a port that refuses
connections, the on-disk spool off), ``file`` (the ``otlp_json_file`` exporters), ``off`` (the same
loop without otel-verl).

``python -m verl_cpu_harness.soak CASE --steps N --every K``, in the environment ``env(CASE, folder)``
gives, prints one JSON line per sample: RSS and the length of every otel-verl/SDK queue. Shared by
``bench/soak_memory.py`` (the long soak) and ``tests/unit/process/test_memory_bound.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import time

STAGES = (
    "gen",
    "reward",
    "old_log_prob",
    "ref",
    "values",
    "adv",
    "update_critic",
    "update_actor",
    "update_weights",
    "testing",
)
WG_CALLS = {  # stage -> driver worker-group method called inside it
    "old_log_prob": "actor_rollout_compute_log_prob",
    "ref": "actor_rollout_compute_ref_log_prob",
    "update_actor": "actor_rollout_update_actor",
}
KEYS = 100


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(case: str, folder: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_VERL_RUN_ID": f"soak-{case}", "OTEL_VERL_SHUTDOWN_TIMEOUT": "2"})
    if case == "dead":
        env.update(
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_LOGS_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{_refused_port()}",
                # the in-memory queues' bound: without the on-disk spool, which would take every batch
                "OTEL_VERL_SPOOL": "off",
                "OTEL_VERL_FILE_DIR": folder,
            }
        )
    elif case == "file":
        env.update(
            {
                "OTEL_TRACES_EXPORTER": "otlp_json_file",
                "OTEL_METRICS_EXPORTER": "otlp_json_file",
                "OTEL_LOGS_EXPORTER": "otlp_json_file",
                "OTEL_VERL_FILE_DIR": folder,
            }
        )
    elif case != "off":
        raise SystemExit(f"unknown case {case!r}")
    return env


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _queues(tel) -> dict[str, int]:
    """Lengths (and bounds) of the queues between the training thread and the exporters."""
    out: dict[str, int] = {}
    if tel is None:
        return out
    active = tel.trees.inner if tel.trees is not None else tel.tracer_provider._active_span_processor  # noqa: SLF001
    for i, proc in enumerate(active._span_processors):  # noqa: SLF001
        bp = getattr(proc, "_batch_processor", None)
        if bp is not None:
            out[f"spans{i}"], out[f"spans{i}_max"] = len(bp._queue), bp._max_queue_size  # noqa: SLF001
    lp = tel.logger_provider
    for i, proc in enumerate(getattr(getattr(lp, "_multi_log_record_processor", None), "_log_record_processors", ())):
        bp = getattr(proc, "_batch_processor", None)
        if bp is not None:
            out[f"logs{i}"], out[f"logs{i}_max"] = len(bp._queue), bp._max_queue_size  # noqa: SLF001
    for i, reader in enumerate(tel._step_readers):  # noqa: SLF001
        out[f"metrics{i}"], out[f"metrics{i}_max"] = reader.pending, reader.capacity
        out[f"metrics{i}_dropped"] = reader.dropped
    return out


def child(case: str, steps: int, every: int) -> int:
    """Run one case in this process; one JSON line per sample on stdout."""
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)  # dead-endpoint retries
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.profiler import marked_timer
    from verl.utils.tracking import Tracking

    from otel_verl import VerlInstrumentor, semconv
    from otel_verl.hooks.workers import _TracedWorkerGroupMethod
    from otel_verl.process.state import PROCESS

    trainer = RayPPOTrainer.__new__(RayPPOTrainer)
    trainer.global_steps, trainer.train_dataloader = 0, list(range(100))
    tracking = Tracking(project_name="bench", experiment_name="soak", default_backend=[])
    if case == "off":
        calls = {m: (lambda *a, **k: None) for m in WG_CALLS.values()}
        tel = None
    else:
        VerlInstrumentor().instrument()
        PROCESS.identify(role=semconv.ROLE_TASKRUNNER, project="bench", experiment="soak")
        PROCESS.trainer = trainer
        calls = {m: _TracedWorkerGroupMethod(lambda *a, **k: None, m) for m in WG_CALLS.values()}
        tel = PROCESS.telemetry
    generic = KEYS - len(STAGES) - 1 - 3
    start = time.monotonic()
    worst = {k: 0 for k in _queues(tel)}
    for step in range(1, steps + 1):
        trainer.global_steps = step
        timing: dict[str, float] = {}
        with marked_timer("step", timing):
            for stage in STAGES:
                with marked_timer(stage, timing):
                    if stage in WG_CALLS:
                        calls[WG_CALLS[stage]]()
        data = {f"actor/key_{i:03d}": step * 1e-3 + i for i in range(generic)}
        data.update({f"timing_s/{k}": v for k, v in timing.items()})
        data.update({"actor/kl_loss": 0.01, "critic/score/mean": 0.5, "perf/throughput": 1234.0})
        tracking.log(data=data, step=step)
        queues = _queues(tel)
        for k, v in queues.items():
            worst[k] = max(worst.get(k, 0), v)
        if step % every == 0 or step == 1:
            sample = {"step": step, "rss_mib": round(_rss_mib(), 2), "s": round(time.monotonic() - start, 2)}
            print(json.dumps({**sample, "queues": queues, "worst": worst}), flush=True)
    if tel is not None:
        tel.flush(2.0)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("case", choices=("dead", "file", "off"))
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=1000)
    ns = parser.parse_args(argv)
    return child(ns.case, ns.steps, ns.every)


if __name__ == "__main__":
    sys.exit(main())
