"""What otel-verl says it costs: ``otel_verl.overhead.cpu_time`` of a run, per process and per step.

Reads a run's metric files (``OTEL_VERL_FILE_DIR`` of an instrumented run with the
``otlp_json_file`` exporters, e.g. ``tests/conftest.py``'s ``run_instrumented``) and prints, per
process, otel-verl's own CPU per training step next to the process's whole CPU
(``process.cpu.time``) in the same window, by component; then the run's line from
``otel-verl summary``. The window runs from each process's first to its last export inside the
training steps (so start-up, the pipeline build on the first hook call, is left out); "lifetime
share" is the same ratio over the process's whole life up to its last export.

Usage: ``python bench/self_cost.py RUN_DIR [RUN_DIR ...]``
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from _util import table

from otel_verl import semconv
from otel_verl.offline.otlp_files import read_metric_points
from otel_verl.offline.report.model import build
from otel_verl.offline.run_facts import INSTANCE


def per_process(folder: Path) -> list[list[object]]:
    rep = build(folder)
    if not rep.steps:
        return []
    lo, hi = rep.steps[0].span.start_ns, rep.steps[-1].span.end_ns + 2 * 10**9  # the last step's export
    steps = len(rep.steps)
    # (process, name) -> time -> summed value of that export (components / user+system added up)
    sums: dict[tuple[str, str], dict[int, float]] = defaultdict(lambda: defaultdict(float))
    parts: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    roles: dict[str, str] = {}
    for p in read_metric_points(folder):
        if p.name not in (semconv.M_OVERHEAD_CPU_TIME, "process.cpu.time") or p.value is None:
            continue
        who = str(p.resource.get(INSTANCE))
        rank = p.resource.get(semconv.RES_RANK)
        roles[who] = f"{p.resource.get(semconv.RES_ROLE)}{'' if rank is None else f' {rank}'}"
        sums[(who, p.name)][p.time_ns] += p.value
        if p.name == semconv.M_OVERHEAD_CPU_TIME:
            parts[who][str(p.attributes.get(semconv.ATTR_OVERHEAD_COMPONENT))][p.time_ns] = p.value
    rows = []
    for who in sorted(roles, key=roles.get):
        own = sums.get((who, semconv.M_OVERHEAD_CPU_TIME), {})
        times = sorted(t for t in own if t <= hi)
        inside = [t for t in times if t >= lo]
        first = max([t for t in times if t < lo], default=inside[0] if inside else None)
        if first is None or not inside or inside[-1] == first:
            continue
        last = inside[-1]
        cpu = sums.get((who, "process.cpu.time"), {})
        used = cpu[last] - cpu[first] if first in cpu and last in cpu else None
        spent = own[last] - own[first]
        by = {c: v[last] - v[first] for c, v in parts[who].items() if first in v and last in v}
        top = ", ".join(f"{c} {1000 * v / steps:.1f}" for c, v in sorted(by.items(), key=lambda kv: -kv[1]) if v > 0)
        # over the process's whole life so far (both counters start with the process): what a
        # sampling profiler attached from the start sees (bench/e2e_profile.py)
        end = max(own)
        life = cpu.get(end)
        rows.append(
            [
                roles[who],
                f"{1000 * spent / steps:.1f}",
                "" if used is None else f"{used / steps:.3f}",
                "" if not used else f"{100 * spent / used:.1f}%",
                "" if not life else f"{100 * own[end] / life:.1f}%",
                top,
            ]
        )
    return rows


def main(argv: list[str]) -> int:
    for arg in argv:
        folder = Path(arg)
        rep = build(folder)
        print(f"# {folder}: {len(rep.steps)} steps, driver {rep.meta.get('driver', '?')}")
        header = ["process", "otel-verl ms/step", "process CPU-s/step", "share", "lifetime share"]
        header.append("by component, ms/step")
        print(table(header, per_process(folder)))
        print(rep.overhead_line() or "(no otel_verl.overhead.cpu_time)")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
