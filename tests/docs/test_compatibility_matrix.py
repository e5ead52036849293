"""The compatibility matrix in the docs is what CI runs: ``docs/generated/compatibility.md`` is
rendered from ``support.compat`` (``OTEL_VERL_WRITE_DOCS=1`` rewrites it), and every cell names a
test that exists and checks its run against that cell (``compat.check(run, <key>)``)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from support import compat

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "generated" / "compatibility.md"


def test_the_page_is_rendered_from_the_cells():
    text = compat.render()
    if os.environ.get("OTEL_VERL_WRITE_DOCS") == "1":
        PAGE.write_text(text, encoding="utf-8")
    assert PAGE.read_text(encoding="utf-8") == text, "run: OTEL_VERL_WRITE_DOCS=1 pytest tests/docs"


def _checked_keys(path: Path, function: str) -> set[str]:
    """The cell keys (a string, or an f-string's constant tail) ``function`` in ``path`` passes to ``compat.check``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and ast.unparse(call.func) == "compat.check" and len(call.args) == 2:
                    found.add(ast.unparse(call.args[1]))
    return found


@pytest.mark.parametrize("cell", compat.CELLS, ids=[c.key for c in compat.CELLS])
def test_each_cell_is_checked_by_the_test_it_names(cell):
    path, function = cell.test.split("::")
    keys = _checked_keys(REPO / path, function)
    assert keys, f"{cell.test} does not call compat.check"
    literal = repr(cell.key)
    templated = [k for k in keys if k.startswith("f")]
    # a literal key, or an f-string whose constant parts are those of this key (the driver filled in)
    assert literal in keys or any(
        all(part in cell.key for part in k[2:-1].replace("{run.driver}", "\0").split("\0") if part) for k in templated
    ), (cell.key, keys)


def test_keys_are_unique():
    keys = [c.key for c in compat.CELLS]
    assert len(keys) == len(set(keys))
