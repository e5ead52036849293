"""What a test needs from the machine, and the one rule for when it is missing.

``scripts/setup.sh`` installs every component the tests use (the CPU harness, Debian's
Prometheus tools, Chromium, the live stack's Go-built backends; Node.js comes with the machine).
Where one is missing a test stops with :func:`require`: on a workstation that is a skip naming
what is missing and how to get it; under CI (``CI`` set, as CI systems do) it is a failure, so
that a CI run can never pass with tests that did not run.

Skips that are not about a missing component (a GPU-only path on a CPU machine, another Python
or tool version) stay plain ``pytest.skip``.

Imported as ``support.components``.
"""

from __future__ import annotations

import functools
import importlib
import os
import shutil
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

# When this pytest session started (tests/conftest.py sets it at session start): the wait for the
# background backend build is bounded against it, so that it fits a CI job's time limit.
SESSION_START = time.monotonic()


def in_ci() -> bool:
    """Whether this runs under CI: ``CI`` is set to anything but an explicit no."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(component: str, why: str) -> NoReturn:
    """Stop the calling test because ``component`` is missing; ``why`` says what and how to get it.

    A skip on a workstation; under CI a failure: CI installs everything, so a missing component
    there is a broken set-up to fix, never a reason to pass."""
    message = f"missing {component}: {why}"
    if in_ci():
        pytest.fail(f"{message} (CI: a missing component fails the run instead of skipping)", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_tool(name: str, how: str) -> str:
    """The path of executable ``name`` on PATH; else :func:`require` (``how``: how to install it)."""
    path = shutil.which(name)
    if path is None:
        require(name, f"not on PATH; {how}")
    return path


def require_module(name: str, how: str) -> ModuleType:
    """Module ``name``, imported; else :func:`require` (``how``: how to install it)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        require(name, f"cannot be imported ({exc}); {how}")


VLLM_CPU_HOW = "`bash scripts/vllm_cpu.sh` builds it (`bash scripts/setup.sh` starts that in the background)"
# The wait for a background build of that venv ends this long after the session started (from
# empty caches it takes a few minutes beside the other tests; the tests that need it run late).
VLLM_CPU_DEADLINE_S = float(os.environ.get("OTEL_VERL_VLLM_CPU_DEADLINE_S", "2400"))
VLLM_CPU_CHECK_S = 60.0


@functools.cache  # a found venv stays found for the session (a failure is not cached)
def require_vllm_cpu() -> str:
    """The Python of the venv with verl's vLLM rollout on vLLM's CPU build (``scripts/vllm_cpu.sh``),
    or :func:`require`. Waits for a build that is still running (the script's own lock), until
    ``VLLM_CPU_DEADLINE_S`` after the session start."""
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "vllm_cpu.sh"
    # Past the deadline there is still time for the check itself (two Pythons read the inputs: a
    # few seconds on a busy machine), not for a build.
    left = max(VLLM_CPU_CHECK_S, SESSION_START + VLLM_CPU_DEADLINE_S - time.monotonic())
    try:
        done = subprocess.run(["bash", str(script), "--check"], capture_output=True, text=True, timeout=left)
    except subprocess.TimeoutExpired:
        require("the vLLM CPU venv", f"scripts/vllm_cpu.sh was still building at the deadline; {VLLM_CPU_HOW}")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        require("the vLLM CPU venv", f"{(done.stderr or done.stdout).strip()[-300:]}; {VLLM_CPU_HOW}")
    return str(Path(lines[-1]) / "bin" / "python")


VERL_RELEASE_HOW = "`bash scripts/setup.sh` installs it (the files of verl==VERSION, no dependencies)"


def require_verl_release(version: str) -> Path:
    """The folder holding an older verl release's files (``scripts/setup.sh``: beside the venv's
    verl, in ``<venv>/verl-releases/VERSION``; put first on ``PYTHONPATH`` it is the verl a run
    imports), or :func:`require`."""
    folder = Path(sys.prefix) / "verl-releases" / version
    if not (folder / f"verl-{version}.dist-info").is_dir():
        require(
            f"verl {version}",
            f"{folder} has no verl-{version}.dist-info; " + VERL_RELEASE_HOW.replace("VERSION", version),
        )
    return folder


HARNESS_HOW = "`bash scripts/setup.sh` installs it (pip install -e tests/harness)"


def require_harness() -> ModuleType:
    """``verl_cpu_harness`` (real verl runs on CPU), or :func:`require`."""
    return require_module("verl_cpu_harness", HARNESS_HOW)


CHROMIUM_HOW = "`bash scripts/setup.sh` installs the Debian package (apt-get install chromium)"


def require_chromium() -> str:
    """A headless-capable Chromium (the report pages are rendered in it), or :func:`require`."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    require("chromium", f"none of chromium, chromium-browser, google-chrome is on PATH; {CHROMIUM_HOW}")
