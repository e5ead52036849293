"""``scripts/setup.sh``: a progress line per phase saying what it downloads, and the test-only
Debian packages only for the test set-up (``SETUP_TEST_TOOLS=0``: the demo), on its dry path."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = ("bash", "cut", "du", "dirname", "id", "mktemp", "grep", "rm", "sleep", "cat")


def _dry(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """setup.sh's dry run with a PATH that has no promtool, amtool or chromium (and no Go)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in TOOLS:
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    full = {
        "PATH": str(bin_dir),
        "HOME": str(tmp_path),
        "SETUP_DRY_RUN": "1",
        "SETUP_BACKENDS": "0",
        "SETUP_VLLM_CPU": "0",
        **env,
    }
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "setup.sh")], env=full, capture_output=True, text=True, timeout=60, cwd=REPO
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the apt path is taken as root only")
def test_the_test_set_up_installs_the_test_tools_and_the_demo_does_not(tmp_path):
    tests = _dry(tmp_path)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert (
        "setup:   would run: apt-get update && apt-get install prometheus prometheus-alertmanager chromium"
        in tests.stdout
    )
    demo = _dry(tmp_path, SETUP_TEST_TOOLS="0")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "apt-get" not in demo.stdout + demo.stderr
    assert "setup: phase 4/4: skipped: the test-only Debian packages (SETUP_TEST_TOOLS=0)" in demo.stdout
    demo_script = (REPO / "examples" / "cpu_demo.sh").read_text()
    assert "SETUP_TEST_TOOLS=0" in demo_script  # the demo's own set-up leaves them out


def test_each_phase_says_what_it_installs_and_nothing_changes(tmp_path):
    run = _dry(tmp_path, SETUP_TEST_TOOLS="0")
    lines = run.stdout.splitlines()
    phases = [line for line in lines if line.startswith("setup: phase ")]
    assert [p.split(":")[1].strip() for p in phases] == ["phase 1/4", "phase 2/4", "phase 3/4", "phase 4/4"]
    assert "torch 2.13.0" in phases[1] and "4.5 GB installed" in phases[1]
    assert "verl 0.9.1" in phases[2] and "6 GB" in phases[2]
    assert "setup:   would run: pip install -q torch==2.13.0" in lines
    assert lines[-1] == "setup: dry run: nothing changed"
