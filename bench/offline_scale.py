"""``summary`` and ``report`` on a run of 1,000 steps: time and peak memory, this tree vs an older one.

The run folder is made from a real run's files (``--source``, e.g. the CPU demo's
``.work/demo/telemetry``): its stored requests are written again, copy after copy, each copy's
steps numbered on from the last one's (``verl.step``, ``verl.rollout.submit_step``, the
``verl.training.step`` gauge), its times shifted past the last one's, its cumulative counters
going on from the last one's values and its trace and span ids changed (a different XOR per
copy), the processes kept: one long run of the same processes. The
copies are written line by line, so making the folder holds one line at a time.

Each tool then runs in a fresh process per variant, side by side in one run: this tree, and the
code it is compared with: ``--before REF`` (a commit, e.g. ``main``: its ``otel_verl`` taken out
with ``git archive REF otel_verl | tar -x`` into the run's scratch folder) or ``--before-src DIR``
(an ``otel_verl`` already there), first on the path. Measured per process: CPU seconds (user +
system, ``wait4``), wall seconds and the peak resident memory; a process whose memory passes
``--limit-mb`` is stopped and shown as such. The last table puts both side by side per tool.

``python bench/offline_scale.py --source DIR [--steps 1000] [--before REF | --before-src DIR]
[--limit-mb 3072] [--tools summary,report] [--keep DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _util import machine, table

ROOT = Path(__file__).resolve().parents[1]
STEP_KEYS = ("verl.step", "verl.rollout.submit_step")
STEP_GAUGE = "verl.training.step"
TOOLS = ("summary", "report")


def _steps_of(folder: Path) -> tuple[int, int, int]:
    """(highest step, first ns, last ns) of the source's spans and points."""
    top, lo, hi = 0, None, 0
    for path in folder.glob("*.jsonl"):
        for line in path.open(encoding="utf-8"):
            for key in ("startTimeUnixNano", "timeUnixNano", "endTimeUnixNano"):
                for part in line.split(f'"{key}":')[1:]:
                    value = int(part.split(",")[0].split("}")[0].strip().strip('"') or 0)
                    if value:
                        lo = value if lo is None else min(lo, value)
                        hi = max(hi, value)
            for key in STEP_KEYS:
                for part in line.split(f'"key":"{key}","value":{{"intValue":')[1:]:
                    top = max(top, int(part.split("}")[0].strip('"')))
    return top, lo or 0, hi


class Copy:
    """How the ``k``-th copy changes a stored request."""

    def __init__(self, k: int, steps: int, shift_ns: int, counters: dict[tuple, float] | None = None) -> None:
        self.k, self.steps, self.shift = k, steps, k * shift_ns
        self.counters = counters or {}  # a cumulative sum's last value in the source: copies go on from it
        self.xor = (k * 0x9E3779B97F4A7C15) & (2**64 - 1)

    def id(self, value: str) -> str:
        if not value:
            return value
        n = int(value, 16) ^ (self.xor if len(value) == 16 else self.xor << 64 | self.xor)
        return f"{n:0{len(value)}x}"

    def time(self, obj: dict[str, Any], *keys: str) -> None:
        for key in keys:
            if obj.get(key) not in (None, "0", 0):
                obj[key] = str(int(obj[key]) + self.shift)

    def attributes(self, items: list[dict[str, Any]] | None) -> None:
        for a in items or []:
            if a.get("key") in STEP_KEYS and "intValue" in a.get("value", {}):
                a["value"]["intValue"] = str(int(a["value"]["intValue"]) + self.k * self.steps)

    def request(self, batch: dict[str, Any]) -> None:
        for rs in batch.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for s in ss.get("spans", []):
                    s["traceId"], s["spanId"] = self.id(s["traceId"]), self.id(s["spanId"])
                    s["parentSpanId"] = self.id(s.get("parentSpanId", ""))
                    self.time(s, "startTimeUnixNano", "endTimeUnixNano")
                    self.attributes(s.get("attributes"))
                    for e in s.get("events", []):
                        self.time(e, "timeUnixNano")
                        self.attributes(e.get("attributes"))
                    for lk in s.get("links", []):
                        lk["traceId"], lk["spanId"] = self.id(lk.get("traceId", "")), self.id(lk.get("spanId", ""))
        for rm in batch.get("resourceMetrics", []):
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    for kind in ("gauge", "sum", "histogram"):
                        for p in m.get(kind, {}).get("dataPoints", []):
                            self.time(p, "timeUnixNano", "startTimeUnixNano")
                            self.attributes(p.get("attributes"))
                            grown = self.counters.get(_counter_key(m, kind, p))
                            if grown is not None:
                                _add(p, self.k * grown)
                            if m.get("name") == STEP_GAUGE:
                                _add(p, self.k * self.steps)
        for rl in batch.get("resourceLogs", []):
            for sl in rl.get("scopeLogs", []):
                for r in sl.get("logRecords", []):
                    self.time(r, "timeUnixNano", "observedTimeUnixNano")
                    r["traceId"], r["spanId"] = self.id(r.get("traceId", "")), self.id(r.get("spanId", ""))
                    self.attributes(r.get("attributes"))


def _add(point: dict[str, Any], grown: float) -> None:
    """``grown`` added to a point's value, written as the exporter writes it (``asInt``: int64 digits)."""
    if "asDouble" in point:
        point["asDouble"] = float(point["asDouble"]) + grown
    if "asInt" in point:
        point["asInt"] = str(int(point["asInt"]) + round(grown))


def _counter_key(metric: dict[str, Any], kind: str, point: dict[str, Any]) -> tuple | None:
    """A cumulative sum's series in one file (one process), or None for another point."""
    if kind != "sum" or metric["sum"].get("aggregationTemporality") not in (2, "AGGREGATION_TEMPORALITY_CUMULATIVE"):
        return None
    return metric.get("name"), json.dumps(point.get("attributes"), sort_keys=True)


def _counters(path: Path) -> dict[tuple, float]:
    """Each cumulative sum's last value in ``path``: a copy's counters go on from the previous copy's."""
    last: dict[tuple, float] = {}
    for line in path.open(encoding="utf-8"):
        try:
            batch = json.loads(line)
        except ValueError:
            continue
        for rm in batch.get("resourceMetrics", []):
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    for p in m.get("sum", {}).get("dataPoints", []):
                        key = _counter_key(m, "sum", p)
                        value = p.get("asDouble", p.get("asInt"))
                        if key is not None and value is not None:
                            last[key] = max(last.get(key, 0.0), float(value))
    return last


def make_run(source: Path, out: Path, steps: int) -> tuple[int, int]:
    """``out``: ``source``'s run repeated until it has ``steps`` steps; (copies, bytes written)."""
    per_copy, lo, hi = _steps_of(source)
    per_copy = max(per_copy, 1)
    copies = -(-steps // per_copy)
    shift = hi - lo + 10**9
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for path in sorted(source.glob("*.jsonl")):
        counters = _counters(path)
        with (out / path.name).open("w", encoding="utf-8") as f:
            for k in range(copies):
                copy = Copy(k, per_copy, shift, counters)
                for line in path.open(encoding="utf-8"):
                    if not line.strip():
                        continue
                    try:
                        batch = json.loads(line)
                    except ValueError:
                        continue
                    copy.request(batch)
                    text = json.dumps(batch, separators=(",", ":")) + "\n"
                    written += len(text)
                    f.write(text)
    return copies, written


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_tool(tool: str, folder: Path, src: Path | None, limit_mb: int, out_dir: Path) -> dict[str, Any]:
    """One tool in a fresh process: CPU and wall seconds, peak memory (MiB), whether it was stopped."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in (src, ROOT) if p is not None))
    target = out_dir / f"report-{time.monotonic_ns()}.html"
    args = [sys.executable, "-m", "otel_verl.cli", tool, str(folder)] + (
        ["-o", str(target)] if tool == "report" else []
    )
    start = time.monotonic()
    # cwd: not a checkout, whose otel_verl would come before PYTHONPATH's for ``-m``
    proc = subprocess.Popen(
        args, env=env, cwd=out_dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    stopped = threading.Event()

    def watch() -> None:
        while proc.poll() is None:
            if _rss_kb(proc.pid) > limit_mb * 1024:
                stopped.set()
                os.killpg(proc.pid, signal.SIGKILL)
                return
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")[-400:] if proc.stderr else ""
    return {
        "cpu": usage.ru_utime + usage.ru_stime,
        "wall": time.monotonic() - start,
        "peak_mb": usage.ru_maxrss / 1024,
        "stopped": stopped.is_set(),
        "rc": proc.returncode,
        "err": err if proc.returncode and not stopped.is_set() else "",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, required=True, help="a real run's telemetry folder")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--before-src", type=Path, default=None, help="an older otel_verl's parent folder")
    ap.add_argument("--before", default=None, help="a git commit whose otel_verl is compared (e.g. main)")
    ap.add_argument("--limit-mb", type=int, default=3072, help="stop a tool whose memory passes this")
    ap.add_argument("--tools", default=",".join(TOOLS), help="summary,report (default: both)")
    ap.add_argument("--keep", type=Path, default=None, help="make the run folder here and keep it")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="offline-scale-"))
    folder = args.keep or work / "run"
    try:
        if not any(folder.glob("traces-*.jsonl")):
            t0 = time.monotonic()
            copies, written = make_run(args.source, folder, args.steps)
            print(f"made {folder}: {copies} copies, {written / 2**20:.0f} MiB in {time.monotonic() - t0:.0f} s")
        before, label = args.before_src, "before"
        if args.before:
            before, label = work / "before", f"before ({args.before})"
            before.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.before, "otel_verl"], check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
        print(f"# offline_scale.py, {machine()}, load average {os.getloadavg()[0]:.1f}")
        variants = [("after (this tree)", None)] + ([(label, before)] if before else [])
        rows = []
        results: dict[tuple[str, str], dict[str, Any]] = {}
        for name, src in variants:  # which otel_verl each variant runs
            code = "import otel_verl, sys; print(otel_verl.__file__)"
            where = subprocess.run(
                [sys.executable, "-c", code],
                env=dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in (src, ROOT) if p is not None)),
                cwd=work,
                capture_output=True,
                text=True,
            ).stdout.strip()
            print(f"{name}: {where}")
        for tool in args.tools.split(","):
            for name, src in variants:
                r = results[(tool, name)] = run_tool(tool, folder, src, args.limit_mb, work)
                peak = f"> {args.limit_mb} (stopped)" if r["stopped"] else f"{r['peak_mb']:.0f}"
                rc = "stopped" if r["stopped"] else r["rc"]
                rows.append((tool, name, f"{r['cpu']:.1f}", f"{r['wall']:.1f}", peak, rc))
                print(" ".join(map(str, rows[-1])), r["err"], flush=True)
        print(table(("tool", "variant", "CPU s", "wall s", "peak MiB", "rc"), rows))
        if len(variants) == 2:
            (new, _), (old, _) = variants
            side = []
            for tool in args.tools.split(","):
                a, b = results[(tool, old)], results[(tool, new)]
                side.append(
                    (tool, f"{a['cpu']:.1f}", f"{b['cpu']:.1f}", f"{a['cpu'] / max(b['cpu'], 1e-9):.1f}x")
                    + (f"{a['peak_mb']:.0f}", f"{b['peak_mb']:.0f}")
                )
            print(table(("tool", f"CPU s {old}", "CPU s this tree", "less", "peak MiB before", "peak MiB now"), side))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
