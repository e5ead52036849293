"""Start-up cost per process: what ``opentelemetry-instrument`` and otel-verl add to each process of a job.

``opentelemetry-instrument`` puts its ``sitecustomize`` on ``PYTHONPATH`` and every Python process
of the job inherits it (Ray's daemons, idle workers, verl's actors), so each one runs
auto-instrumentation's ``initialize()`` (imports, entry-point scans, every instrumentor) before
its own code. Two parts, side by side:

* **isolated** (always): fresh interpreters, alternating, CPU from ``RUSAGE_CHILDREN``: a plain
  interpreter, the same with the job's ``sitecustomize`` and otel-verl off (the library's own
  cost), with otel-verl on (a Ray child's environment), and ``import verl`` with and without it
  (verl's processes pay the rest there, once);
* **job** (``--job``): one real 2-step CPU run (test harness) whose processes run a measuring
  ``sitecustomize`` in front of the real one: it records each process's CPU in the real one and,
  in processes that import verl, the CPU between the start of ``import verl`` and verl's first
  own module (otel-verl's lazy activation). Processes are named by their Ray title seen during the
  run (``ray::TaskRunner``, ``ray::IDLE``, ``dashboard.py``...). Run twice: otel-verl on, and
  off (``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=verl,system_metrics``: the library alone).

The isolated part also runs the ``sitecustomize`` of the job's Ray workers
(``otel_verl.process.worker_bootstrap``: no distro, no configurator), bare and with every
instrumentation ``opentelemetry-bootstrap -a install`` picks (``verl_cpu_harness.bootstrap_site``);
the ``sitecustomize`` cases above are the launcher's (with ``opentelemetry-distro`` installed, its
configurator builds the SDK's providers there).

Usage: ``python bench/startup_cost.py [--rounds 7] [--job [--no-isolated]] [--driver v0] [--otel-verl-src DIR]``
(``--otel-verl-src``: put another copy of ``otel_verl`` first on the path, e.g. an older tree).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from _util import machine, table

ROOT = Path(__file__).resolve().parents[1]

# Recorded in every process of the job: CPU of the real sitecustomize, then of otel-verl's work at
# ``import verl`` (from find_spec("verl") to the first find_spec of a verl submodule).
MEASURING_SITECUSTOMIZE = r"""
import os, sys, time, json
_t0 = time.process_time()
_w0 = time.perf_counter()
_here = os.path.dirname(os.path.abspath(__file__))
_out = os.environ.get("_STARTUP_COST_OUT")
_real = os.environ.get("_STARTUP_COST_REAL_SC")
def _write(suffix, data):
    try:
        # Ray starts a job's workers as setup_worker.py, which execs default_worker.py: same pid
        with open(os.path.join(_out, f"{os.getpid()}.{time.monotonic_ns()}{suffix}.json"), "w") as f:
            json.dump(data, f)
    except OSError:
        pass
try:
    # run the real one only where Python would find it (otel-verl leaves it out of Ray's daemons)
    if _real and os.path.dirname(_real) in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        with open(_real) as f:
            exec(compile(f.read(), _real, "exec"), {"__name__": "sitecustomize", "__file__": _real})
finally:
    _cpu, _wall = time.process_time() - _t0, time.perf_counter() - _w0
    # initialize() puts its own folder first again: keep this one first for the children
    _parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != _here]
    os.environ["PYTHONPATH"] = os.pathsep.join([_here, *_parts])
    if _out:
        try:
            with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
                _argv = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            _argv = ""
        _write("", {"pid": os.getpid(), "argv": _argv, "cpu": _cpu, "wall": _wall})

class _VerlImportClock:
    started = None
    def find_spec(self, name, path=None, target=None):
        if name == "verl" and self.started is None:
            self.started = (time.process_time(), time.perf_counter())
        elif self.started is not None and name.startswith("verl."):
            sys.meta_path.remove(self)
            cpu, wall = time.process_time() - self.started[0], time.perf_counter() - self.started[1]
            _write(".verl", {"cpu": cpu, "wall": wall})
        return None

if _out and "verl" not in sys.modules:
    sys.meta_path.insert(0, _VerlImportClock())
"""


def _autoinstr_dir() -> str:
    import opentelemetry.instrumentation.auto_instrumentation as auto

    return os.path.dirname(os.path.abspath(auto.__file__))


def _base_env() -> dict[str, str]:
    # PYTHONDONTWRITEBYTECODE would make every process compile otel-verl's sources again
    drop = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k not in drop}


def _otel_env(folder: Path, src: str | None, site: str | None = None, extra: str | None = None) -> dict[str, str]:
    path = [site or _autoinstr_dir(), *([src] if src else []), *([extra] if extra else [])]
    return {
        **_base_env(),
        "PYTHONPATH": os.pathsep.join(path),
        "OTEL_TRACES_EXPORTER": "otlp_json_file",
        "OTEL_METRICS_EXPORTER": "otlp_json_file",
        "OTEL_LOGS_EXPORTER": "otlp_json_file",
        "OTEL_VERL_FILE_DIR": str(folder),
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
        "OTEL_SERVICE_NAME": "startup-cost",
    }


def _child_cpu(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


def isolated(rounds: int, src: str | None) -> str:
    py = sys.executable
    folder = Path(tempfile.mkdtemp(prefix="startup_cost_"))
    on = {
        **_otel_env(folder, src),
        "OTEL_VERL_RUN_ID": "bench",
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "system_metrics",
    }
    lib = {**on, "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "verl,system_metrics"}
    plain = {**_base_env(), "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "verl"}  # verl.plugins stays off too
    # what the job's Ray workers run instead (otel_verl.process.worker_bootstrap: no distro or
    # configurator), bare and with every instrumentation opentelemetry-bootstrap picks
    from verl_cpu_harness import bootstrap_site

    from otel_verl.process.worker_bootstrap import SITE_DIR

    boot, _ = bootstrap_site.build()
    worker = {**_otel_env(folder, src, SITE_DIR), **{k: on[k] for k in ("OTEL_VERL_RUN_ID",)}}
    worker["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "system_metrics"
    worker_boot = {**worker, "PYTHONPATH": os.pathsep.join([worker["PYTHONPATH"], str(boot)])}
    cases = {
        "python -c pass, plain": ([py, "-c", "pass"], plain),
        "python -c pass, sitecustomize, otel-verl off": ([py, "-c", "pass"], lib),
        "python -c pass, sitecustomize, otel-verl on": ([py, "-c", "pass"], on),
        "python -c 'import verl', plain": ([py, "-c", "import verl"], plain),
        "python -c 'import verl', sitecustomize, otel-verl off": ([py, "-c", "import verl"], lib),
        "python -c 'import verl', sitecustomize, otel-verl on": ([py, "-c", "import verl"], on),
        "python -c pass, worker sitecustomize": ([py, "-c", "pass"], worker),
        "python -c pass, worker sitecustomize, bootstrap's set": ([py, "-c", "pass"], worker_boot),
        "python -c 'import verl', worker sitecustomize": ([py, "-c", "import verl"], worker),
        "python -c 'import verl', worker sitecustomize, bootstrap's set": ([py, "-c", "import verl"], worker_boot),
    }
    samples: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for _ in range(rounds):
        for name, (cmd, env) in cases.items():
            samples[name].append(_child_cpu(cmd, env))
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in samples.items()}
    rows = []
    for name, (cpu, wall) in med.items():
        ref = med["python -c pass, plain" if "pass" in name else "python -c 'import verl', plain"]
        rows.append(
            [name, f"{cpu * 1000:.0f}", f"{(cpu - ref[0]) * 1000:+.0f}", f"{cpu / ref[0]:.2f}x", f"{wall * 1000:.0f}"]
        )
    head = f"# isolated: fresh interpreters, {rounds} alternating rounds, medians"
    return head + "\n" + table(["process", "CPU ms", "added CPU ms", "ratio", "wall ms"], rows)


def _kind(titles: list[str], argv: str) -> str:
    for title in titles:
        if title.startswith("ray::") and not title.startswith("ray::IDLE"):
            name = title.split()[0].split(".")[0]  # ray::TaskRunner.run -> ray::TaskRunner
            return "ray::" + name.rsplit(":", 1)[-1]  # ray::agent_loop_worker_0_ab12:AgentLoopWorker
    if titles and titles[-1].startswith("ray::IDLE") or "default_worker.py" in argv:
        return "ray::IDLE (never ran a task)"
    for word in argv.split():
        if word.endswith(".py") or word.startswith("verl.") or word.startswith("multiprocessing."):
            return Path(word).name.split(";")[0]
    return argv.split()[0] if argv else "?"


def _watch(out: Path, stop: threading.Event, titles: dict[int, list[str]]) -> None:
    """Ray renames its workers (``ray::TaskRunner``...): keep every title each recorded pid had."""
    while not stop.wait(0.3):
        for record in out.glob("*[0-9].json"):
            pid = int(record.stem.split(".")[0])
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            seen = titles.setdefault(pid, [])
            if title and (not seen or seen[-1] != title):
                seen.append(title)


def job(driver: str, off: bool, src: str | None, root: Path) -> tuple[dict[str, list[dict]], float, int]:
    from verl_cpu_harness import run_verl

    workdir = root / ("off" if off else "on")
    out = workdir / "startup"
    out.mkdir(parents=True, exist_ok=True)
    measure = workdir / "measure"
    measure.mkdir(exist_ok=True)
    (measure / "sitecustomize.py").write_text(MEASURING_SITECUSTOMIZE)
    env = _otel_env(workdir / "telemetry", src)
    # what opentelemetry-instrument does (its folder and the cwd first), with the measuring one in front
    env["PYTHONPATH"] = os.pathsep.join([str(measure), _autoinstr_dir(), str(workdir), *([src] if src else [])])
    env.update(
        {"_STARTUP_COST_OUT": str(out), "_STARTUP_COST_REAL_SC": os.path.join(_autoinstr_dir(), "sitecustomize.py")}
    )
    if off:
        env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "verl,system_metrics"
    titles: dict[int, list[str]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(out, stop, titles), daemon=True)
    watcher.start()
    result = run_verl(workdir, driver=driver, algo="grpo", steps=2, env=env, stream=None, timeout=900)
    stop.set()
    watcher.join()
    kinds: dict[str, list[dict]] = defaultdict(list)
    verl = {int(p.name.split(".")[0]): json.loads(p.read_text()) for p in out.glob("*.verl.json")}
    for record in sorted(out.glob("*[0-9].json")):
        data = json.loads(record.read_text())
        setup = "setup_worker.py" in data["argv"]  # then exec'd as the worker below, same pid
        data["verl"] = None if setup else verl.get(data["pid"])
        kind = "setup_worker.py" if setup else _kind(titles.get(data["pid"], []), data["argv"])
        kinds[kind].append(data)
    return kinds, result.wall_s, result.returncode


def _sum(records: list[dict], key: str, part: str) -> float:
    if part == "verl":
        return sum(r["verl"][key] for r in records if r["verl"])
    return sum(r[key] for r in records)


def job_table(on: dict[str, list[dict]], off: dict[str, list[dict]]) -> str:
    rows = []
    total = defaultdict(float)
    for kind in sorted(set(on) | set(off), key=lambda k: -_sum(on.get(k, []), "cpu", "site")):
        a, b = on.get(kind, []), off.get(kind, [])
        site_on, site_off = _sum(a, "cpu", "site"), _sum(b, "cpu", "site")
        verl_on, verl_off = _sum(a, "cpu", "verl"), _sum(b, "cpu", "verl")
        per = site_on / len(a) * 1000 if a else 0.0
        rows.append(
            [kind, f"{len(a)}/{len(b)}", f"{per:.0f}", f"{site_on * 1000:.0f}", f"{site_off * 1000:.0f}",
             f"{verl_on * 1000:.0f}", f"{verl_off * 1000:.0f}"]
        )  # fmt: skip
        for key, value in (("site_on", site_on), ("site_off", site_off), ("verl_on", verl_on), ("verl_off", verl_off)):
            total[key] += value
    rows.append(
        ["all processes", "", "", f"{total['site_on'] * 1000:.0f}", f"{total['site_off'] * 1000:.0f}",
         f"{total['verl_on'] * 1000:.0f}", f"{total['verl_off'] * 1000:.0f}"]
    )  # fmt: skip
    header = ["process", "count on/off", "sitecustomize ms each (on)", "sitecustomize ms, on", "off (library only)",
              "at import verl ms, on", "off"]  # fmt: skip
    added = total["site_on"] + total["verl_on"]
    lib = total["site_off"] + total["verl_off"]
    wall_on = sum(_sum(v, "wall", "site") + _sum(v, "wall", "verl") for v in on.values())
    wall_off = sum(_sum(v, "wall", "site") + _sum(v, "wall", "verl") for v in off.values())
    return (
        table(header, rows)
        + f"\nadded to the job's start, CPU: {added:.2f} s with otel-verl, {lib:.2f} s with opentelemetry-instrument"
        f" alone (otel-verl off); a plain run pays none of it.\nthe same as wall time summed over processes (an upper"
        f" bound of what the job's start waits for; they overlap): {wall_on:.2f} s with otel-verl, {wall_off:.2f} s off"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--job", action="store_true", help="also one real 2-step run per variant (~2 min each)")
    parser.add_argument("--no-isolated", dest="isolated", action="store_false", help="only the job part")
    parser.add_argument("--driver", default="v0")
    parser.add_argument("--otel-verl-src", default=None, help="a folder holding another otel_verl package")
    ns = parser.parse_args(argv)
    src = str(Path(ns.otel_verl_src).resolve()) if ns.otel_verl_src else None
    where = f"; otel_verl from {src}" if src else ""
    print(f"# bench/startup_cost.py  ({machine()}; load {os.getloadavg()[0]:.1f}{where})")
    if ns.isolated:
        print(isolated(ns.rounds, src))
    if ns.job:
        root = Path(tempfile.mkdtemp(prefix="startup_cost_job_"))
        on, wall_on, rc_on = job(ns.driver, False, src, root)
        off, wall_off, rc_off = job(ns.driver, True, src, root)
        runs = f"on: rc {rc_on}, wall {wall_on:.1f} s; off: rc {rc_off}, wall {wall_off:.1f} s"
        print(f"# job: {ns.driver} grpo, 2 steps; {runs}")
        print(job_table(on, off))
    return 0


if __name__ == "__main__":
    sys.exit(main())
