"""The package's import structure: no cycles, and every module imports on its own.

Every ``import`` in ``otel_verl/`` counts, also those inside functions (a lazy import that
breaks a cycle at run time is still a cycle in the design).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "otel_verl"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    """The otel_verl modules ``name`` imports (``from pkg import sub`` counts as ``pkg.sub``)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in MODULES and t != name}
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycle() -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(GRAPH):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_is_read_from_every_module():
    assert len(MODULES) > 30
    assert "otel_verl.process.state" in GRAPH["otel_verl.hooks.spans"]  # a known edge


def test_no_import_cycle_in_the_package():
    cycle = _cycle()
    assert cycle is None, " -> ".join(cycle or [])


def test_a_cycle_would_be_found(monkeypatch):
    monkeypatch.setitem(GRAPH, "otel_verl.config", GRAPH["otel_verl.config"] | {"otel_verl.instrumentor"})
    assert _cycle() is not None


@pytest.mark.parametrize("chunk", [0, 1])
def test_every_module_imports_in_a_fresh_interpreter(chunk):
    names = sorted(MODULES)[chunk::2]

    def load(name: str) -> tuple[str, int, str]:
        proc = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=120)
        return name, proc.returncode, proc.stderr[-500:]

    with ThreadPoolExecutor(max_workers=2) as pool:
        failed = [r for r in pool.map(load, names) if r[1] != 0]
    assert not failed, failed


def _importers(of: str, among: str) -> set[str]:
    return {n for n in GRAPH if n.startswith(among) and any(m == of or m.startswith(of + ".") for m in GRAPH[n])}


def test_the_shared_rooms_import_none_of_their_users():
    """The pipeline knows no rollout hook (the engine's histograms come in through
    ``step_reader.add_producer``); the job board is neither the stall doctor's nor the guard's, and
    the stall doctor imports no hook (a wait's hook registers what it says: ``add_wait_note``)."""
    assert not _importers("otel_verl.hooks.rollout", "otel_verl.process")
    assert not _importers("otel_verl.stall", "otel_verl.job_board")
    assert not _importers("otel_verl.hooks", "otel_verl.job_board")
    assert not _importers("otel_verl.stall", "otel_verl.hooks.guard")
    assert not _importers("otel_verl.hooks", "otel_verl.stall")
    # the pipeline and the instruments sit below every hook: the hook table is said through
    # ``PROCESS.on_built``, goodput is an instrument's arithmetic (``instruments.goodput``)
    assert not _importers("otel_verl.hooks", "otel_verl.process")
    assert not _importers("otel_verl.hooks", "otel_verl.instruments")


def _reachable(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += GRAPH[name]
    return seen


def test_the_documentation_text_is_off_every_process_runtime_path():
    """What a verl process may import (from the instrumentor, lazy imports included) holds no reference
    documentation: the metrics' sources and the spans', events' and attributes' text are in
    ``telemetry_catalog``, read by ``scripts/gen_docs.py`` only."""
    runtime = _reachable("otel_verl.instrumentor")
    assert "otel_verl.hooks.spans" in runtime and "otel_verl.instruments.catalog" in runtime  # it is the runtime
    assert "otel_verl.telemetry_catalog" not in runtime
    from otel_verl import telemetry_catalog

    texts = [d.doc for d in (*telemetry_catalog.SPANS, *telemetry_catalog.EVENTS, *telemetry_catalog.ATTRIBUTES)]
    texts += list(telemetry_catalog.SOURCES.values())
    starts = {t[:60] for t in texts if len(t) >= 30}  # a sentence or its start, as a module would spell it
    for name in runtime:
        code = MODULES[name].read_text(encoding="utf-8")
        assert not [t for t in starts if t in code], name


def test_the_offline_reader_learns_of_a_fact_only_from_the_list_of_facts():
    """The run reader (``offline.run_reader`` with ``folds``, ``exports``, ``values``) imports no
    fact, not even through another module: a fact reaches it as a fold, from the one list of them
    (``offline.facts.folds``), which only the run's model reads. The run's model sits beside its two
    renderers: the summary reaches nothing of the report's page, the report nothing of the summary's text."""
    fact_modules = {n for n in MODULES if n.startswith("otel_verl.offline.facts")}
    assert {"otel_verl.offline.facts", "otel_verl.offline.facts.spool"} <= fact_modules
    reader = _reachable("otel_verl.offline.run_reader")
    assert "otel_verl.offline.folds" in reader and "otel_verl.offline.exports" in reader  # it is the reader
    assert not reader & fact_modules
    assert {n for n in GRAPH if "otel_verl.offline.facts" in GRAPH[n]} == {"otel_verl.offline.run.model"}
    summary, report = _reachable("otel_verl.offline.summary"), _reachable("otel_verl.offline.report")
    assert {"otel_verl.offline.run.model", "otel_verl.offline.run.text"} <= summary
    assert not summary & {"otel_verl.offline.report", "otel_verl.offline.run.page", "otel_verl.offline.run.charts"}
    assert "otel_verl.offline.run.page" in report and "otel_verl.offline.run.text" not in report
