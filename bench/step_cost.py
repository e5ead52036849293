"""otel-verl's own CPU per step for the values verl logs, against the SDK's floor for the same data.

Per step a dict like a real run's TaskRunner logs (``KEYS``: the 94 keys of the CPU demo's step 1,
numpy scalars where verl logs them, padded with generic keys to ``--keys``, 140 by default as in a
GPU run) goes each way, in one process, alternating in short rounds (``--rounds`` times ``--steps``
steps: on a loaded machine only cases measured close together compare):

* **sdk**: the floor. One synchronous gauge per key (the name otel-verl gives it), set with the
  attributes otel-verl's exported points carry (the run's identity), then the SDK's own
  ``PeriodicExportingMetricReader`` collects (``force_flush``, in the calling thread) and the SDK's
  OTLP/HTTP exporter encodes the batch into a null sink.
* **otel-verl**: the same dict through otel-verl's ``Tracking.log`` hook (``hooks.tracking``),
  with the pipeline a run builds (``build_own``: the step metric reader, the on-disk spool in front
  of the same OTLP/HTTP exporter and null sink; traces and logs off), until the step's batch is
  encoded.
* two diagnostics: **otel-verl, no hand-over**, the same work all in the calling thread (the hook's
  recording, the collection, the identity stamp, the export; what the queues and threads between
  them cost is the difference), and **sdk, values alone**, the floor without the identity on its
  points (what those attributes cost the SDK).

The null sink: the exporter's HTTP client answers 200 at once (``_client.export``), so what is
measured is recording, collecting, encoding and otel-verl's own hand-overs, not a network.
Measured: the process's CPU time (every thread: ``time.process_time``) per step; per case the
median over the rounds and the ratio to the floor of the same round (median, range); each of
otel-verl's threads (``pthread_getcpuclockid``). Points and bytes per request are counted in the
warm-up: otel-verl's batches hold more points than the floor's (its named instruments, stage
histograms and self-metrics) and a description per metric.

``--before REF``: the same in child processes, ``--runs`` per tree, alternating, for this tree and
for ``REF``'s ``otel_verl`` (``git archive``), each child measuring its own floor.

``PYTHONPATH=$PWD .venv/bin/python bench/step_cost.py [--steps 25] [--rounds 20] [--keys 140]
[--before REF [--runs 3]]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _util import machine, table

ROOT = Path(__file__).resolve().parents[1]
FLOAT_KEYS = (
    "global_seqlen/min",
    "global_seqlen/max",
    "global_seqlen/minmax_diff",
    "global_seqlen/balanced_min",
    "global_seqlen/balanced_max",
    "global_seqlen/mean",
    "actor/entropy",
    "training/rollout_probs_diff_valid",
    "training/rollout_probs_diff_max",
    "training/rollout_probs_diff_mean",
    "training/rollout_probs_diff_std",
    "training/rollout_actor_probs_pearson_corr",
    "rollout_corr/training_ppl",
    "rollout_corr/training_log_ppl",
    "rollout_corr/kl",
    "rollout_corr/k3_kl",
    "rollout_corr/rollout_ppl",
    "rollout_corr/rollout_log_ppl",
    "rollout_corr/log_ppl_diff",
    "rollout_corr/log_ppl_abs_diff",
    "rollout_corr/log_ppl_diff_max",
    "rollout_corr/log_ppl_diff_min",
    "rollout_corr/ppl_ratio",
    "rollout_corr/chi2_token",
    "rollout_corr/chi2_seq",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/pg_clipfrac_lower",
    "actor/pg_loss",
    "actor/kl_loss",
    "actor/kl_coef",
    "actor/loss",
    "actor/grad_norm",
    "actor/lr",
    "actor/perf/max_memory_allocated_gb",
    "actor/perf/max_memory_reserved_gb",
    "actor/perf/cpu_memory_used_gb",
    "perf/mfu/actor",
    "training/global_step",
    "training/epoch",
    "critic/score/mean",
    "critic/score/max",
    "critic/score/min",
    "critic/rewards/mean",
    "critic/rewards/max",
    "critic/rewards/min",
    "critic/advantages/mean",
    "critic/advantages/max",
    "critic/advantages/min",
    "critic/returns/mean",
    "critic/returns/max",
    "critic/returns/min",
    "response_length/mean",
    "response_length/max",
    "response_length/min",
    "response_length/clip_ratio",
    "response_length_non_aborted/mean",
    "response_length_non_aborted/max",
    "response_length_non_aborted/min",
    "response_length_non_aborted/clip_ratio",
    "response/aborted_ratio",
    "prompt_length/mean",
    "prompt_length/max",
    "prompt_length/min",
    "prompt_length/clip_ratio",
    "timing_s/gen",
    "timing_s/old_log_prob",
    "timing_s/ref",
    "timing_s/adv",
    "timing_s/update_actor",
    "timing_s/update_weights",
    "timing_s/step",
    "timing_per_token_ms/adv",
    "timing_per_token_ms/gen",
    "timing_per_token_ms/ref",
    "timing_per_token_ms/update_actor",
    "perf/total_num_tokens",
    "perf/time_per_step",
    "perf/throughput",
)
NP_INT_KEYS = (
    "num_turns/min",
    "num_turns/max",
    "training/num_turns/max",
    "training/num_turns/min",
    "training/off_policy/trajectory_spans/max",
    "training/off_policy/trajectory_spans/min",
    "training/off_policy/trajectory_staleness/max",
    "training/off_policy/trajectory_staleness/min",
    "training/off_policy/trajectory_staleness_worst/max",
    "training/off_policy/trajectory_staleness_worst/min",
)
NP_FLOAT_KEYS = (
    "num_turns/mean",
    "training/num_turns/mean",
    "training/off_policy/trajectory_spans/mean",
    "training/off_policy/trajectory_staleness/mean",
    "training/off_policy/trajectory_staleness_worst/mean",
)
BATCH_KEYS = 140  # a GPU run's TaskRunner logs about this many a step


def keys(n: int) -> list[str]:
    """The real keys, padded with generic ones to ``n``."""
    real = [*FLOAT_KEYS, *NP_INT_KEYS, *NP_FLOAT_KEYS]
    return real[:n] + [f"actor/extra/key_{i:03d}" for i in range(max(0, n - len(real)))]


def payloads(names: list[str], steps: int, first: int) -> list[dict[str, Any]]:
    """One dict per step, values moving step to step, numpy scalars where verl logs them."""
    import numpy as np

    out = []
    for step in range(first, first + steps):
        data: dict[str, Any] = {}
        for i, key in enumerate(names):
            value = (i + 1) * 0.5 + step * 1e-3
            data[key] = (
                np.int64(step + i) if key in NP_INT_KEYS else np.float64(value) if key in NP_FLOAT_KEYS else value
            )
        out.append(data)
    return out


class Sink:
    """The OTLP/HTTP exporter's client answering 200 at once; counts requests, bytes and points."""

    def __init__(self, exporter: Any) -> None:
        from opentelemetry.exporter.otlp.common import http

        self.ok = http._ExportResult(True, 200, "OK", None)  # noqa: SLF001 - a bench's null sink
        self.requests = self.bytes = self.points = 0
        self.count_points = False
        exporter._client.export = self.export  # noqa: SLF001

    def export(self, data: bytes) -> Any:
        self.requests += 1
        self.bytes += len(data)
        if self.count_points:  # warm-up only: parsing is not part of what is measured
            from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

            request = ExportMetricsServiceRequest.FromString(data)
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        self.points += len(getattr(m, kind).data_points) if kind else 0
        return self.ok


def otel_verl_side(spool_dir: str) -> tuple[Callable[[dict[str, Any], int], None], Sink, Any]:
    """otel-verl's pipeline as a run builds it, fed through its Tracking.log hook."""
    os.environ.update(
        {
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_VERL_SPOOL_DIR": spool_dir,
        }
    )
    from otel_verl import semconv
    from otel_verl.hooks import tracking
    from otel_verl.process.state import PROCESS

    PROCESS.identify(role=semconv.ROLE_TASKRUNNER, project="bench", experiment="step-cost")
    tel = PROCESS.telemetry
    (reader,) = tel._step_readers  # noqa: SLF001
    exporter = reader._exporter  # noqa: SLF001
    sink = Sink(getattr(exporter, "inner", exporter))

    def verl_log(data: Any, step: int) -> None:  # verl's Tracking.log with no backend
        return None

    def step(data: dict[str, Any], n: int) -> None:
        tracking._log_wrapper(verl_log, None, (), {"data": data, "step": n})  # noqa: SLF001
        settle(tel)  # a step ends long before the next: its export is done by then

    return step, sink, tel


def inline_side(tel: Any) -> Callable[[dict[str, Any], int], None]:
    """otel-verl's same work with no hand-over: the hook's background work, the collection, the identity
    stamp, the export and the span flush request, all in the calling thread (a diagnostic: what the
    queues and threads between them cost)."""
    from otel_verl.hooks import tracking
    from otel_verl.process.state import PROCESS

    training = PROCESS.instruments.training
    readers = tel._step_readers  # noqa: SLF001

    def step(data: dict[str, Any], n: int) -> None:
        saved = [(r._worker.put, r._exporter) for r in readers]  # noqa: SLF001
        flusher_put = tel._flusher.put  # noqa: SLF001
        try:
            for r in readers:
                r._worker.put, r._exporter = r._export, getattr(r._exporter, "inner", r._exporter)  # noqa: SLF001
            tel._flusher.put = tel._force_flush_spans  # noqa: SLF001
            tracking._record_now(tel, training, dict(data), True, {})  # noqa: SLF001
        finally:
            for r, (put, exporter) in zip(readers, saved, strict=True):
                r._worker.put, r._exporter = put, exporter  # noqa: SLF001
            tel._flusher.put = flusher_put  # noqa: SLF001

    return step


def settle(tel: Any) -> None:
    """Wait (no CPU) until the step handed over is exported, whatever the queues in between."""
    tel.drain(60)
    for reader in tel._step_readers:  # noqa: SLF001
        worker = getattr(reader, "_worker", None)
        if worker is not None:
            worker.drain(60)


def sdk_side(
    resource: Any, names: list[str], identity: bool = True
) -> tuple[Callable[[dict[str, Any], int], None], Sink]:
    """The same values on SDK gauges, collected and encoded by the SDK's own reader and exporter;
    ``identity``: with the attributes otel-verl puts on every point (else the values alone)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    from otel_verl import semconv
    from otel_verl.process import point_identity

    exporter = OTLPMetricExporter(endpoint="http://127.0.0.1:9/v1/metrics")
    sink = Sink(exporter)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=float("inf"))
    provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    meter = provider.get_meter(semconv.SCOPE)
    gauges = {k: meter.create_gauge(semconv.metric_name(k)) for k in names}
    attributes = point_identity.identity_of(resource.attributes) if identity else None  # otel-verl's points carry them

    def step(data: dict[str, Any], n: int) -> None:
        for key, value in data.items():
            gauges[key].set(float(value), attributes)
        reader.force_flush()

    return step, sink


def _thread_cpu() -> dict[str, int]:
    """CPU ns so far of each live thread, by name."""
    out: dict[str, int] = {}
    for t in threading.enumerate():
        try:
            ns = time.clock_gettime_ns(time.pthread_getcpuclockid(t.ident))  # type: ignore[arg-type]
        except (OSError, TypeError, ProcessLookupError):
            continue
        out[t.name] = out.get(t.name, 0) + ns
    return out


CASES = {
    "sdk": "sdk (floor)",
    "otel-verl": "otel-verl",
    "inline": "otel-verl, no hand-over (diagnostic)",
    "bare": "sdk, values alone (no identity on points)",
}


def measure(ns: argparse.Namespace) -> dict[str, Any]:
    """This process: every case, alternating, ``ns.rounds`` rounds; CPU per step and otel-verl's threads."""
    import logging

    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
    names = keys(ns.keys)
    with tempfile.TemporaryDirectory(prefix="step-cost-") as spool_dir:
        ov_step, ov_sink, tel = otel_verl_side(spool_dir)
        resource = tel.meter_provider._sdk_config.resource  # noqa: SLF001
        sides = {
            "sdk": sdk_side(resource, names),
            "otel-verl": (ov_step, ov_sink),
            "inline": (inline_side(tel), ov_sink),
            "bare": sdk_side(resource, names, identity=False),
        }
        points: dict[str, float] = {}
        nbytes: dict[str, float] = {}
        for name, (step, sink) in sides.items():  # warm-up: instruments, threads; points and bytes per step
            sink.count_points, counted, sent = True, sink.points, sink.bytes
            for i, data in enumerate(payloads(names, 10, 1)):
                step(data, i + 1)
            sink.count_points = False
            points[name], nbytes[name] = (sink.points - counted) / 10, (sink.bytes - sent) / 10
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        threads: dict[str, list[float]] = {}
        first = 11
        for _ in range(ns.rounds):
            data = payloads(names, ns.steps, first)
            for name, (step, sink) in sides.items():
                requests = sink.requests
                before_threads, start = _thread_cpu(), time.process_time_ns()
                for i, values in enumerate(data):
                    step(values, first + i)
                used = time.process_time_ns() - start
                after_threads = _thread_cpu()
                assert sink.requests - requests == ns.steps, (name, sink.requests - requests)  # one per step
                cpu[name].append(used / ns.steps / 1000)
                if name == "otel-verl":
                    for thread, t_ns in after_threads.items():
                        threads.setdefault(thread, []).append((t_ns - before_threads.get(thread, 0)) / ns.steps / 1000)
            first += ns.steps
        parts = _parts(tel, names)
        tel.shutdown(5)
    return {
        "parts": parts,
        "cpu_us": cpu,
        "points": points,
        "bytes": nbytes,
        "threads": {t: statistics.median(v) for t, v in threads.items() if statistics.median(v) >= 1},
    }


def _parts(tel: Any, names: list[str], rounds: int = 15, n: int = 20) -> dict[str, float]:
    """CPU us of two parts of otel-verl's work alone, median of ``rounds`` x ``n`` calls: the identity
    stamp of one step's batch (``point_identity.stamped``) and the recording of one step's values
    (``TrainingMetrics.record_log``, on a meter of its own)."""
    from opentelemetry.sdk.metrics import MeterProvider

    from otel_verl.instruments.training import TrainingMetrics
    from otel_verl.process import point_identity

    (reader,) = tel._step_readers  # noqa: SLF001
    batches: list[Any] = []
    put, reader._worker.put = reader._worker.put, batches.append  # noqa: SLF001
    try:
        reader.collect()
    finally:
        reader._worker.put = put  # noqa: SLF001
    (batch,) = batches
    training = TrainingMetrics(MeterProvider(shutdown_on_exit=False).get_meter("bench"))
    data = payloads(names, 1, 1)[0]
    training.record_log(data)
    work = {"stamp": lambda: point_identity.stamped(batch), "record": lambda: training.record_log(data)}
    samples: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(rounds):
        for name, fn in work.items():
            start = time.process_time_ns()
            for _ in range(n):
                fn()
            samples[name].append((time.process_time_ns() - start) / n / 1000)
    return {name: statistics.median(values) for name, values in samples.items()}


def _rows(label: str, results: list[dict[str, Any]]) -> list[list[str]]:
    """One row per case: median CPU per step over every round, the ratio to the floor (median and
    range of the rounds' ratios, each round's cases measured back to back)."""
    cpu = {case: [x for r in results for x in r["cpu_us"][case]] for case in CASES}
    rows = []
    for case, title in CASES.items():
        ratios = [c / s for c, s in zip(cpu[case], cpu["sdk"], strict=True)]
        ratio = "1.00x" if case == "sdk" else f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}..{max(ratios):.2f})"
        last = results[-1]
        rows.append(
            [
                label,
                title,
                f"{statistics.median(cpu[case]):.0f}",
                ratio,
                f"{last['points'][case]:.0f}",
                f"{last['bytes'][case]:.0f}",
            ]
        )
    against_bare = [c / s for c, s in zip(cpu["otel-verl"], cpu["bare"], strict=True)]
    spread = f"({min(against_bare):.2f}..{max(against_bare):.2f})"
    rows.append(
        [label, "otel-verl against sdk, values alone", "", f"{statistics.median(against_bare):.2f}x {spread}", "", ""]
    )
    return rows


def _before_tree(ref: str, scratch: Path) -> Path:
    """``ref``'s ``otel_verl`` in ``scratch`` (``git archive``)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "otel_verl"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(scratch)], input=archive.stdout, check=True)
    return scratch


def _child(src: Path, ns: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT / "bench")])}
    args = [sys.executable, str(Path(__file__).resolve()), "--child", f"--steps={ns.steps}", f"--keys={ns.keys}"]
    out = subprocess.run([*args, f"--rounds={ns.rounds}"], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=25, help="steps per case and round")
    parser.add_argument("--rounds", type=int, default=20, help="rounds per process (cases alternating)")
    parser.add_argument("--runs", type=int, default=3, help="with --before: processes per tree, alternating")
    parser.add_argument("--keys", type=int, default=BATCH_KEYS, help="values verl logs per step")
    parser.add_argument("--before", metavar="REF", help="also measure REF's otel_verl (child processes, alternating)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.child:
        print(json.dumps(measure(ns)))
        return 0
    load = os.getloadavg()
    header = ["tree", "case", "CPU us per step", "ratio to the floor (range)", "points", "bytes"]
    if ns.before is None:
        result = measure(ns)
        rows, threads = _rows("this", [result]), {"this": [result]}
    else:
        with tempfile.TemporaryDirectory(prefix="step-cost-before-") as scratch:
            before = _before_tree(ns.before, Path(scratch))
            threads = {f"before ({ns.before})": [], "this": []}
            for _ in range(ns.runs):
                threads[f"before ({ns.before})"].append(_child(before, ns))
                threads["this"].append(_child(ROOT, ns))
        rows = [row for label, results in threads.items() for row in _rows(label, results)]
    print(
        f"# bench/step_cost.py  ({machine()}; load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} -> "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {ns.keys} keys, {ns.steps} steps x {ns.rounds} rounds"
        f"{f' x {ns.runs} processes per tree' if ns.before else ''})"
    )
    print(table(header, rows))
    names = sorted({t for results in threads.values() for r in results for t in r["threads"]})
    per_thread = [
        [t, *(f"{statistics.median(r['threads'].get(t, 0.0) for r in results):.0f}" for results in threads.values())]
        for t in names
    ]
    print("otel-verl's parts alone, CPU us per call (median of the processes):")
    parts = {
        "identity stamp of one step's batch (point_identity.stamped)": "stamp",
        "recording one step's values (TrainingMetrics.record_log)": "record",
    }
    print(
        table(
            ["part", *threads],
            [
                [title, *(f"{statistics.median(r['parts'][key] for r in results):.0f}" for results in threads.values())]
                for title, key in parts.items()
            ],
        )
    )
    print("otel-verl's case, CPU us per step by thread (median of the rounds):")
    print(table(["thread", *threads], sorted(per_thread, key=lambda row: -float(row[-1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
