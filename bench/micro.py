"""Micro-benchmarks of what otel-verl adds to verl's training thread (prints a table).

* a stage span through our ``_timer`` wrapper (``simple_timer("gen", timing)`` inside an open
  step span, instrumented minus uninstrumented) vs a bare SDK span with the same processor;
* ``Tracking.log`` of 100 numeric keys forwarded (instrumented minus uninstrumented, verl with
  no logger backend), with a no-op exporter and with OTLP/gRPC to a refused endpoint;
* ``StepMetricReader.mark_step`` alone (the in-thread collect of 100 gauges + stage histograms).

All cases run in one process, alternating, median of ``--rounds`` rounds.
Usage: ``python bench/micro.py [--rounds 15] [--n 2000]``
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import time
from collections.abc import Sequence

from _util import interleaved, machine, per_call_ns, table
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_verl import VerlInstrumentor
from otel_verl.process.state import PROCESS
from otel_verl.process.step_reader import StepMetricReader
from otel_verl.process.telemetry import Telemetry


class NoopSpanExporter(SpanExporter):
    def export(self, spans: Sequence) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class NoopMetricExporter(MetricExporter):
    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        pass


def _dead_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def make_telemetry(kind: str) -> Telemetry:
    if kind == "noop":
        span_exp, metric_exp = NoopSpanExporter(), NoopMetricExporter()
    else:  # OTLP/gRPC to a port nobody listens on
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        endpoint = _dead_endpoint()
        span_exp = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=2)
        metric_exp = OTLPMetricExporter(endpoint=endpoint, insecure=True, timeout=2)
    tp = TracerProvider(shutdown_on_exit=False)
    tp.add_span_processor(BatchSpanProcessor(span_exp))
    reader = StepMetricReader(metric_exp, export_interval_millis=600_000)
    mp = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    return Telemetry(tp, mp, [reader], owned=True)


def bench_kind(kind: str, ns: argparse.Namespace, trainer, tracking, payload) -> list[list[str]]:
    from verl.utils.profiler import simple_timer

    rows: list[list[str]] = []
    tel = make_telemetry(kind)
    bare_tracer = tel.tracer_provider.get_tracer("bench")
    instrumentor = VerlInstrumentor()
    timing: dict[str, float] = {}
    parent = bare_tracer.start_span("verl.step")
    parent_ctx = trace.set_span_in_context(parent)

    def in_step(fn):
        def run() -> float:
            token = otel_context.attach(parent_ctx)
            try:
                return fn()
            finally:
                otel_context.detach(token)

        return run

    def stage_once() -> None:
        with simple_timer("gen", timing):
            pass

    attrs = {"verl.driver": "v0", "verl.step": 3, "verl.epoch": 1, "verl.stage": "gen"}

    def bare_once() -> None:
        with bare_tracer.start_as_current_span("verl.gen", attributes=attrs):
            pass

    def log_once() -> None:
        tracking.log(data=payload, step=3)

    def toggled(on: bool, fn, n: int):
        def sample() -> float:
            if on:
                instrumentor.instrument(skip_dep_check=True)
                PROCESS._telemetry, PROCESS._metrics, PROCESS.trainer = tel, None, trainer  # noqa: SLF001
            else:
                instrumentor.uninstrument()
            try:
                return in_step(lambda: per_call_ns(fn, n))()
            finally:
                tel.drain(60)  # background recording must not spill into the next case's timing
                if on:
                    instrumentor.uninstrument()

        return sample

    def log_with_background(n: int):
        # what one Tracking.log costs in all: the call plus the off-thread recording and collect
        def sample() -> float:
            instrumentor.instrument(skip_dep_check=True)
            PROCESS._telemetry, PROCESS._metrics, PROCESS.trainer = tel, None, trainer  # noqa: SLF001
            try:

                def run() -> float:
                    start = time.perf_counter_ns()
                    for _ in range(n):
                        log_once()
                    tel.drain(60)
                    return (time.perf_counter_ns() - start) / n

                return in_step(run)()
            finally:
                instrumentor.uninstrument()

        return sample

    mark_n = max(ns.n // 20, 50)
    instrumentor.instrument(skip_dep_check=True)
    PROCESS._telemetry, PROCESS._metrics, PROCESS.trainer = tel, None, trainer  # noqa: SLF001
    tracking.log(data=payload, step=1)  # create the 100 gauges once
    stage_once()
    instrumentor.uninstrument()
    res = interleaved(
        {
            "timer_off": toggled(False, stage_once, ns.n),
            "timer_on": toggled(True, stage_once, ns.n),
            "bare_span": in_step(lambda: per_call_ns(bare_once, ns.n)),
            "log_off": toggled(False, log_once, mark_n),
            "log_on": toggled(True, log_once, mark_n),
            "log_all": log_with_background(mark_n),
            "mark_step": lambda: per_call_ns(tel.mark_step, mark_n),
        },
        ns.rounds,
    )
    added_span = res["timer_on"] - res["timer_off"]
    added_log = res["log_on"] - res["log_off"]
    rows += [
        [kind, "verl simple_timer, not instrumented", f"{res['timer_off'] / 1e3:.1f} us", ""],
        [kind, "verl simple_timer, instrumented", f"{res['timer_on'] / 1e3:.1f} us", ""],
        [
            kind,
            "added by our _timer wrapper (stage span)",
            f"{added_span / 1e3:.1f} us",
            f"{added_span / res['bare_span']:.2f}x bare span (target <= 1.2x)",
        ],
        [kind, "bare SDK span, same processor (with, 4 attrs)", f"{res['bare_span'] / 1e3:.1f} us", "1.00x"],
        [kind, "Tracking.log 100 keys, not instrumented", f"{res['log_off'] / 1e6:.3f} ms", ""],
        [kind, "Tracking.log 100 keys, instrumented", f"{res['log_on'] / 1e6:.3f} ms", ""],
        [kind, "added per Tracking.log call (100 keys)", f"{added_log / 1e6:.3f} ms", "target well under 5 ms"],
        [
            kind,
            "same, incl. the background recording + collect",
            f"{(res['log_all'] - res['log_off']) / 1e6:.3f} ms",
            "off the training thread",
        ],
        [
            kind,
            "StepMetricReader.mark_step (100 values)",
            f"{res['mark_step'] / 1e6:.3f} ms",
            "part of the line above",
        ],
    ]
    parent.end()
    PROCESS._telemetry, PROCESS._metrics, PROCESS.trainer = None, None, None  # noqa: SLF001
    tel.shutdown(2)

    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--n", type=int, default=2000, help="calls per sample for the span cases")
    ns = parser.parse_args(argv)
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)  # dead-endpoint export errors

    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.tracking import Tracking

    trainer = RayPPOTrainer.__new__(RayPPOTrainer)
    trainer.global_steps, trainer.train_dataloader = 3, [0, 1]
    tracking = Tracking(project_name="bench", experiment_name="micro", default_backend=[])
    # like a real step: generic keys, the stage timings (they feed the stage histogram) and named ones
    stages = ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "step", "testing")
    payload = {f"actor/key_{i:03d}": float(i) * 0.5 for i in range(100 - 3 - len(stages))}
    payload.update({f"timing_s/{stage}": 0.25 for stage in stages})
    payload.update({"actor/kl_loss": 0.01, "critic/score/mean": 0.5, "perf/throughput": 1234.0})
    assert len(payload) == 100

    rows = []
    for kind in ("noop", "otlp-dead"):
        rows += bench_kind(kind, ns, trainer, tracking, payload)

    print(f"# bench/micro.py  ({machine()}; rounds={ns.rounds}, n={ns.n})")
    print(table(["exporter", "case", "median per call", "ratio / target"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
