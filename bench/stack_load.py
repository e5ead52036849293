"""Load through the real Collector: one simulated large step into Jaeger and Prometheus (prints a table).

A real run's OTLP JSON files (``OTEL_VERL_FILE_DIR`` of an instrumented job) are the template. From
them one large training step is built with fresh ids and replayed over OTLP gRPC (the protocol and
batch size the SDK uses: ``TraceService/Export`` with at most 512 spans a request, one
``MetricsService/Export`` per process at the step boundary) into the Collector of
``otel-verl stack up`` (the configs of ``collector/``, on free ports, data under a temporary folder):

* traces: the run's last ``verl.step`` trace once, then its rollout traces (``verl.rollout.trajectory``
  with its LLM-call (``text_completion <model>``), reward and ``reward_worker.compute_score`` children,
  and ``verl.rollout.tail``)
  copied with fresh trace and span ids (parents and links re-pointed) until ``--spans`` rollout spans;
* metrics: every series of every process (its latest point), each process replicated ``--ranks``
  times (fresh ``service.instance.id``, ``verl.rank`` = the replica) so that series fan out;
* every copy under a fresh ``verl.run.id`` and ``service.name``, timestamps moved to now.

Each simulated process sends from its own thread and gRPC channel, as its own BatchSpanProcessor
would. Measured: spans/s accepted (every Export answered OK, over the send wall time); drain time
from the last answer until the Collector's exporters sent everything, until Jaeger's query API
returns every span (``/api/traces?traceID=...``, each trace fetched by id: exact, no search limit),
and until Prometheus holds every series (``count({verl_run_id="<fresh>"})``); the Collector's own
counters (``/metrics`` of its telemetry port: receiver refused/failed, exporter send/enqueue failed,
processor items in vs out, queue size) and its memory (``VmHWM`` of /proc, the peak RSS, and the
peak of ``otelcol_process_memory_rss``/``..._heap_alloc_bytes`` sampled every 0.2 s) against
``memory_limiter`` in ``collector/otelcol-config.yaml``.

Usage (repository root): ``.venv/bin/python bench/stack_load.py [--spans 20000] [--ranks 6]
[--run-dir DIR] [--json]``. Without ``--run-dir`` it takes ``.work/demo/telemetry``
(``examples/cpu_demo.sh``'s output), else runs a real 2-step instrumented job first
(``verl_cpu_harness.instrumented.run_instrumented``, 1-2 min). ``tests/ops/test_stack_load.py`` runs the
same at test size.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from verl_cpu_harness.stack_load import (
    DEMO_DIR,
    MUST_BE_ZERO,
    build_load,
    load_template,
    report,
    run_load,
    running_stack,
)

from otel_verl import stack
from otel_verl.offline.otlp_files import signal_files

REPO = Path(__file__).resolve().parents[1]


def template_folder(run_dir: str | None) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    """The run whose files are the template: ``--run-dir``, the demo's, or a fresh real 2-step run."""
    if run_dir:
        return Path(run_dir), None
    if signal_files(DEMO_DIR, "traces") and signal_files(DEMO_DIR, "metrics"):
        return DEMO_DIR, None
    from verl_cpu_harness.instrumented import run_instrumented  # the e2e tests' real instrumented run

    tmp = tempfile.TemporaryDirectory(prefix="stack-load-run-")
    print("no run given and no .work/demo/telemetry: running a real 2-step v1 GRPO job first", file=sys.stderr)
    run = run_instrumented(Path(tmp.name), "v1", "grpo", steps=2)
    if run.returncode != 0:
        raise SystemExit(f"the template run failed (rc {run.returncode}):\n{run.output[-3000:]}")
    return run.telemetry_dir, tmp


def main(argv: list[str] | None = None) -> int:
    from _util import machine, table

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spans", type=int, default=20_000, help="rollout spans in the simulated step (default 20000)")
    ap.add_argument("--ranks", type=int, default=6, help="replicas of every process of the run (default 6)")
    ap.add_argument("--run-dir", help="a run's OTEL_VERL_FILE_DIR (default: .work/demo/telemetry or a fresh run)")
    ap.add_argument("--timeout", type=float, default=300.0, help="bound of each drain wait, seconds")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = ap.parse_args(argv)
    folder, tmp = template_folder(args.run_dir)
    try:
        template = load_template(folder)
        load = build_load(template, args.spans, args.ranks)
        bin_dir = stack.binaries.default_backends_dir() if stack.binaries.default_backends_dir().is_dir() else None
        stack.binaries.find_binaries(bin_dir)  # a clear message when the backends are not built
        with tempfile.TemporaryDirectory(prefix="stack-load-") as data, running_stack(Path(data), bin_dir) as info:
            result = run_load(info, load, args.timeout)
    finally:
        if tmp is not None:
            tmp.cleanup()
    print(
        f"# bench/stack_load.py  ({machine()}; template {folder}, {len(template.processes)} processes, "
        f"{sum(len(p.spans) for p in template.processes.values())} spans; build {load.build_s:.1f} s)"
    )
    print(table(["figure", "value"], report(result)))
    for e in result.sent.errors[:5]:
        print(f"  error: {e}")
    if args.json:
        r = result
        print(
            json.dumps(
                {
                    "spans": load.spans,
                    "rollout_spans": load.rollout_spans,
                    "otlp_series": load.otlp_series,
                    "prom_series": load.prom_series,
                    "spans_per_s": round(r.spans_per_s),
                    "send_s": round(r.sent.wall_s, 3),
                    "collector_drain_s": round(r.collector_drain_s, 3),
                    "jaeger_drain_s": round(r.jaeger_drain_s, 3),
                    "prometheus_drain_s": round(r.prometheus_drain_s, 3),
                    "spans_in_jaeger": len(r.spans_in_jaeger & load.span_ids),
                    "series_in_prometheus": r.series_in_prometheus,
                    "hwm_mib": round(r.hwm_bytes / 2**20, 1),
                    "peak": r.peak,
                    "counters": r.counters,
                    "loadavg": [r.load_before, r.load_after],
                }
            )
        )
    ok = (
        not result.sent.errors
        and not result.sent.rejected
        and load.span_ids <= result.spans_in_jaeger
        and result.series_in_prometheus == load.prom_series
        and all(result.counters[k] == 0 for k in MUST_BE_ZERO)
        and result.hwm_bytes < result.limit_mib * 2**20
    )
    print("ok: nothing dropped, memory under the limit" if ok else "NOT OK: see the rows above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
