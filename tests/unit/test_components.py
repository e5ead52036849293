"""``support.components``: a missing component skips a test on a workstation and fails it under CI.

The rule is checked on itself and on a real call site: the Alertmanager config test run in a
child pytest whose PATH has no ``amtool``, with and without ``CI=true``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import components

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("value", "ci"), [("true", True), ("1", True), ("", False), ("false", False), ("0", False)])
def test_ci_is_any_value_but_an_explicit_no(monkeypatch, value, ci):
    monkeypatch.setenv("CI", value)
    assert components.in_ci() is ci


def test_without_ci_a_missing_component_skips_naming_it(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="missing frobnicator: not on PATH; apt-get install it"):
        components.require_tool("frobnicator", "apt-get install it")


def test_under_ci_a_missing_component_fails(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing no_such_module_here"):
        components.require_module("no_such_module_here", "pip install it")
    assert Path(components.require_tool("sh", "-")).name == "sh"  # one that is there: its path


def _child_pytest(env_ci: str | None) -> subprocess.CompletedProcess:
    """tests/ops/test_alertmanager.py in a child pytest that cannot find amtool."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = str(Path(sys.executable).parent)  # this venv's tools only: no amtool
    env["PYTHONPATH"] = str(REPO)
    if env_ci is not None:
        env["CI"] = env_ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests/ops/test_alertmanager.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_real_site_skips_locally_and_fails_the_run_under_ci():
    local = _child_pytest(None)
    assert local.returncode == 0, local.stdout[-3000:]
    assert "skipped" in local.stdout and "missing amtool" in local.stdout, local.stdout[-3000:]
    ci = _child_pytest("true")
    assert ci.returncode == 1, ci.stdout[-3000:]
    assert "failed" in ci.stdout and "missing amtool" in ci.stdout, ci.stdout[-3000:]
    assert "skipped" not in ci.stdout.rsplit("\n", 3)[-2], ci.stdout[-3000:]
