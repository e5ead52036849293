"""``otel-verl``: command-line tools around a run's telemetry.

``otel-verl summary DIR`` prints what a run wrote with the ``otlp_json_file`` exporters
(``OTEL_VERL_FILE_DIR``): the processes that reported, one line per step trace with its
stage spans and worker spans, and the main training metrics per step.

``otel-verl report DIR [-o OUT.html]`` renders the same files as one self-contained HTML page
(stage breakdown per step, step timeline with the slowest trajectory, rollout latency, training
curves; see ``otel_verl.report``).

``otel-verl replay DIR --endpoint URL`` sends the stored OTLP JSON to an OTLP/HTTP endpoint
(see ``otel_verl.replay``).

``otel-verl doctor`` prints what the instrumentation would do here (verl version and supported
range, entry points, exporters and endpoint reachability, which hooks apply); exit code 1 on a
problem (see ``otel_verl.doctor``).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

from otel_verl import semconv
from otel_verl.files import read_metric_points, read_spans

_MAIN_METRICS = (
    (semconv.M_TRAINING_STEP, None),
    (semconv.M_REWARD, (semconv.ATTR_REWARD_SOURCE, "score")),
    (semconv.M_KL, (semconv.ATTR_KL_SOURCE, "kl_loss")),
    (semconv.M_KL, (semconv.ATTR_KL_SOURCE, "ppo_kl")),
    ("verl.actor.entropy", None),
    ("verl.actor.grad_norm", None),
    (semconv.M_THROUGHPUT, None),
    ("verl.perf.time_per_step", None),
)


def summary(folder: Path, out=sys.stdout) -> int:
    spans = read_spans(folder)
    points = read_metric_points(folder)
    if not spans and not points:
        print(f"no telemetry files in {folder}", file=out)
        return 1
    procs = Counter(
        (s.resource.get(semconv.RES_ROLE), s.resource.get(semconv.RES_RANK), s.resource.get("process.pid"))
        for s in spans
    )
    run_ids = {s.resource.get(semconv.RES_RUN_ID) for s in spans}
    print(f"run {', '.join(sorted(map(str, run_ids)))}: {len(spans)} spans from {len(procs)} processes", file=out)
    for (role, rank, pid), n in sorted(procs.items(), key=lambda kv: str(kv[0])):
        print(f"  {role}{'' if rank is None else f' rank {rank}'} (pid {pid}): {n} spans", file=out)

    by_trace: dict[str, list] = defaultdict(list)
    for s in spans:
        by_trace[s.trace_id].append(s)
    print("\nstep traces:", file=out)
    steps = sorted(
        (s for s in spans if s.name == semconv.SPAN_STEP), key=lambda s: s.attributes.get(semconv.ATTR_STEP, 0)
    )
    for step in steps:
        members = by_trace[step.trace_id]
        stages = sorted((s for s in members if semconv.ATTR_STAGE in s.attributes), key=lambda s: s.start_ns)
        workers = [s for s in members if s.name.startswith(semconv.SPAN_WORKER_PREFIX)]
        ranks = sorted({s.attributes.get(semconv.RES_RANK) for s in workers}, key=str)
        stage_txt = " ".join(f"{s.attributes[semconv.ATTR_STAGE]}={s.seconds:.2f}s" for s in stages)
        print(
            f"  step {step.attributes.get(semconv.ATTR_STEP)} ({step.seconds:.2f}s, trace {step.trace_id[:8]}): "
            f"{stage_txt}; {len(workers)} worker spans from ranks {ranks}",
            file=out,
        )
    trajectories = [s for s in spans if s.name == semconv.SPAN_ROLLOUT_TRAJECTORY]
    if trajectories:
        slowest = max(trajectories, key=lambda s: s.seconds)
        print(
            f"\nrollout: {len(trajectories)} trajectory spans; slowest {slowest.seconds:.2f}s "
            f"(submitted at step {slowest.attributes.get(semconv.ATTR_ROLLOUT_SUBMIT_STEP)}, "
            f"trace {slowest.trace_id[:8]})",
            file=out,
        )

    print("\nmetrics (values exported at each step):", file=out)
    for name, attr in _MAIN_METRICS:
        values = [
            p.value
            for p in sorted(points, key=lambda p: p.time_ns)
            if p.name == name and (attr is None or p.attributes.get(attr[0]) == attr[1])
        ]
        if values:
            label = name if attr is None else f"{name}{{{attr[0]}={attr[1]}}}"
            print(f"  {label}: {', '.join(f'{v:.6g}' for v in _dedupe(values))}", file=out)
    return 0


def report(folder: Path, output: Path | None = None, out=None) -> int:
    from otel_verl.report import NoTelemetry, write_report

    out = out or sys.stdout
    try:
        path, rep = write_report(folder, output)
    except NoTelemetry as exc:
        print(str(exc), file=out)
        return 1
    except OSError as exc:  # e.g. a read-only run folder: pass -o
        print(f"cannot write the report: {exc}", file=out)
        return 1
    print(
        f"wrote {path}: {len(rep.steps)} steps, {rep.spans} spans, {rep.points} metric points"
        + (f" (default timeline: step {rep.default_step}, the slowest)" if rep.default_step is not None else ""),
        file=out,
    )
    for note in rep.notes:
        print(f"  note: {note}", file=out)
    return 0


def _dedupe(values: list) -> list:
    out: list = []
    for v in values:
        if not out or out[-1] != v:
            out.append(v)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="otel-verl", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_sum = sub.add_parser("summary", help="summarise a run's OTLP JSON files")
    p_sum.add_argument("folder", type=Path)
    p_rep = sub.add_parser("report", help="render a run's OTLP JSON files as one self-contained HTML page")
    p_rep.add_argument("folder", type=Path)
    p_rep.add_argument("-o", "--output", type=Path, help="HTML file to write (default: FOLDER/report.html)")
    p_play = sub.add_parser("replay", help="send a run's OTLP JSON files to an OTLP/HTTP endpoint")
    p_play.add_argument("folder", type=Path)
    p_play.add_argument(
        "--endpoint", help="OTLP/HTTP base URL, e.g. http://collector:4318 (default: OTEL_EXPORTER_OTLP_*ENDPOINT)"
    )
    p_play.add_argument("--headers", help="k=v,k2=v2 (default: OTEL_EXPORTER_OTLP_*HEADERS)")
    p_play.add_argument("--timeout", type=float, default=10.0, help="seconds per request (default 10)")
    sub.add_parser("doctor", help="check what the instrumentation would do in this environment")
    ns = parser.parse_args(argv)
    if ns.cmd == "summary":
        return summary(ns.folder)
    if ns.cmd == "report":
        return report(ns.folder, ns.output)
    if ns.cmd == "replay":
        from otel_verl.replay import replay

        return replay(ns.folder, endpoint=ns.endpoint, headers=ns.headers, timeout=ns.timeout)
    if ns.cmd == "doctor":
        from otel_verl.doctor import doctor

        return doctor()
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
