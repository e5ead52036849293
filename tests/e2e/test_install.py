"""The install ways README's GPU section gives, done as a user would (slow: builds and installs).

``python -m build`` makes the sdist and, from it, the wheel; the wheel goes into a fresh venv with
its declared dependencies (from pip's cache or PyPI), and ``otel-verl doctor`` runs from there.
verl is not in that venv (a multi-GB install), so doctor must say exactly that, and find the
entry points that make ``opentelemetry-instrument`` and verl load otel-verl. Then the same venv
takes otel-verl from a git URL (``git+file://`` of this clone's HEAD).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
from components import require_tool

from otel_verl.package import _instruments
from otel_verl.version import __version__

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600


def _run(args: list, **kwargs) -> subprocess.CompletedProcess:
    # No PYTHONPATH and no OTEL_* of the test session: the venv must stand on its own.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("OTEL_")}
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=TIMEOUT_S, env=env, **kwargs)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict[str, float]]:
    """(venv, dist folder, seconds per phase)."""
    tmp = tmp_path_factory.mktemp("install")
    venv, dist, took = tmp / "venv", tmp / "dist", {}
    start = time.monotonic()
    made = _run([sys.executable, "-m", "venv", venv])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    # `build` comes with the test extra; where it is missing, the fresh venv gets its own.
    builder = sys.executable
    if importlib.util.find_spec("build") is None:
        got = _run([python, "-m", "pip", "install", "-q", "build"])
        assert got.returncode == 0, got.stdout + got.stderr
        builder = python
    took["venv"] = time.monotonic() - start
    start = time.monotonic()
    built = _run([builder, "-m", "build", "--outdir", dist, REPO])
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    took["build"] = time.monotonic() - start
    start = time.monotonic()
    wheel = dist / f"otel_verl-{__version__}-py3-none-any.whl"
    got = _run([python, "-m", "pip", "install", "-q", wheel])
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    took["install"] = time.monotonic() - start
    return venv, dist, took


def test_build_makes_a_complete_wheel_and_sdist(installed):
    _, dist, took = installed
    wheel = zipfile.ZipFile(dist / f"otel_verl-{__version__}-py3-none-any.whl")
    names = set(wheel.namelist())
    assert {"otel_verl/cli.py", "otel_verl/offline/report/assets/report.js"} <= names
    entry_points = wheel.read(f"otel_verl-{__version__}.dist-info/entry_points.txt").decode()
    assert "otel-verl = otel_verl.cli:main" in entry_points and "otel_verl = otel_verl._verl_plugin" in entry_points
    with tarfile.open(dist / f"otel_verl-{__version__}.tar.gz") as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "README.md", "otel_verl/cli.py", "otel_verl/offline/report/assets/report.css"} <= members
    print(f"timings: {', '.join(f'{k} {v:.0f} s' for k, v in took.items())}")


def test_doctor_runs_from_the_fresh_venv(installed):
    venv, _, _ = installed
    where = _run([venv / "bin" / "python", "-c", "import otel_verl; print(otel_verl.__file__)"], cwd=venv)
    assert where.stdout.strip().startswith(str(venv))  # the installed copy, not this clone
    doctor = _run([venv / "bin" / "otel-verl", "doctor"], cwd=venv)
    out = doctor.stdout
    assert doctor.returncode == 1, out + doctor.stderr
    specifier = _instruments[0].removeprefix("verl").strip().replace(" ", "")
    assert "  !!  verl is not installed (supported: " in out and all(part in out for part in specifier.split(",")), out
    assert "  ok  entry point opentelemetry_instrumentor: verl = otel_verl:VerlInstrumentor" in out
    assert "  ok  entry point verl.plugins: otel_verl = otel_verl._verl_plugin" in out
    assert "--  otel-verl[system] not installed (opentelemetry-instrumentation-system-metrics)" in out
    assert "  --  skipped: verl is not installed" in out
    assert doctor.stderr.startswith("otel-verl doctor: ") and doctor.stderr.count("\n") == 1
    assert "Traceback" not in out + doctor.stderr


@pytest.mark.skipif(
    not (REPO / ".git").exists(), reason="not a git clone (an unpacked sdist): no git URL to install from"
)
def test_install_from_a_git_url(installed):
    require_tool("git", "install git (the tests run in a git clone)")
    venv, _, _ = installed
    start = time.monotonic()
    got = _run(
        [
            venv / "bin" / "python",
            "-m",
            "pip",
            "install",
            "-q",
            "--force-reinstall",
            "--no-deps",
            f"git+file://{REPO}",
        ]
    )
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    helped = _run([venv / "bin" / "otel-verl", "--help"])
    assert helped.returncode == 0 and "doctor" in helped.stdout
    origin = _run(
        [
            venv / "bin" / "python",
            "-c",
            "import importlib.metadata as m; print(m.distribution('otel-verl').read_text('direct_url.json'))",
        ],
        cwd=venv,
    )
    assert '"vcs": "git"' in origin.stdout, origin.stdout  # installed from the git URL, not the wheel
    print(f"git URL install: {time.monotonic() - start:.0f} s")
