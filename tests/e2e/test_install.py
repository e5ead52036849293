"""The install ways of docs/install.md, done as a user would (slow: builds and installs).

``python -m build`` makes the sdist and, from it, the wheel; the wheel goes into a fresh venv with
its declared dependencies (from pip's cache or PyPI), and ``otel-verl doctor`` runs from there.
verl is not in that venv (a multi-GB install), so doctor must say exactly that, and find the
entry points that make ``opentelemetry-instrument`` and verl load otel-verl. The wheel alone
carries the ops kit: ``otel-verl stack configs`` from that venv writes it, and the built Collector
validates the written configs (all-in-one, a node's agent, a gateway). Then the same venv takes
otel-verl from a git URL (``git+file://`` of this clone's HEAD).
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
from support.components import require, require_tool

from otel_verl.package import _instruments
from otel_verl.version import __version__

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600
from support.opskit import BACKENDS_HOW, backends_dir, require_backend_build  # noqa: E402


def _run(args: list, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    # No PYTHONPATH, OTEL_* or gRPC switch of the test session: the venv must stand on its own.
    own = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRPC_ENABLE_FORK_SUPPORT")}
    own = {k: v for k, v in own.items() if not k.startswith("OTEL_")} | (env or {})
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=TIMEOUT_S, env=own, **kwargs)


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
    assert {"otel_verl/cli/__init__.py", "otel_verl/offline/run/assets/report.js"} <= names
    # the ops kit, from its one copy (collector/, scripts/backends.sh), as package data
    kit = {f"otel_verl/_ops_kit/{p.relative_to(REPO)}" for p in (REPO / "collector").rglob("*") if p.is_file()}
    assert kit <= names, sorted(kit - names)
    assert "otel_verl/_ops_kit/scripts/backends.sh" in names
    assert "otel_verl.pth" in names  # gRPC's fork handlers off at interpreter start (process/grpc_fork.py)
    entry_points = wheel.read(f"otel_verl-{__version__}.dist-info/entry_points.txt").decode()
    assert "otel-verl = otel_verl.cli:main" in entry_points and "otel_verl = otel_verl._verl_plugin" in entry_points
    with tarfile.open(dist / f"otel_verl-{__version__}.tar.gz") as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {
        "pyproject.toml",
        "README.md",
        "otel_verl/cli/__init__.py",
        "otel_verl/offline/run/assets/report.css",
    } <= members
    assert {"collector/otelcol-config.yaml", "scripts/backends.sh"} <= members  # what the wheel is built from
    print(f"timings: {', '.join(f'{k} {v:.0f} s' for k, v in took.items())}")


def test_doctor_runs_from_the_fresh_venv(installed):
    venv, _, _ = installed
    where = _run([venv / "bin" / "python", "-c", "import otel_verl; print(otel_verl.__file__)"], cwd=venv)
    assert where.stdout.strip().startswith(str(venv))  # the installed copy, not this clone
    # the wheel's otel_verl.pth acts at start-up, in a process that runs OpenTelemetry's bootstrap only
    probe = [venv / "bin" / "python", "-c", "import os; print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT'))"]
    assert _run(probe, cwd=venv, env={"PYTHONPATH": str(venv / "_worker_site")}).stdout.strip() == "false"
    assert _run(probe, cwd=venv).stdout.strip() == "None"
    doctor = _run([venv / "bin" / "otel-verl", "doctor", "--verbose"], cwd=venv)
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


@pytest.fixture(scope="module")
def written_kit(installed, tmp_path_factory) -> Path:
    """``otel-verl stack configs DIR`` run from the fresh venv, away from this clone."""
    venv, _, _ = installed
    out = tmp_path_factory.mktemp("kit") / "ops-kit"
    wrote = _run([venv / "bin" / "otel-verl", "stack", "configs", out], cwd=venv)
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    assert f"otelcol-contrib --config={out / 'otelcol-config.yaml'}" in wrote.stdout
    return out


def test_the_wheel_alone_writes_the_ops_kit(installed, written_kit):
    venv, _, _ = installed
    where = _run(
        [venv / "bin" / "python", "-c", "from otel_verl import stack; print(stack.kit.ops_kit().configs)"], cwd=venv
    )
    assert where.stdout.strip().startswith(str(venv)), where.stdout + where.stderr  # the installed copy
    for path in (REPO / "collector").rglob("*"):
        if path.is_file():
            rel = path.relative_to(REPO / "collector")
            assert (written_kit / rel).read_bytes() == path.read_bytes(), rel
    helped = _run([venv / "bin" / "otel-verl", "stack", "--help"], cwd=venv)
    assert "configs" in helped.stdout and "build" in helped.stdout


@pytest.mark.live_stack  # runs last: the Collector may still be building in the background
def test_the_built_collector_validates_the_config_the_wheel_wrote(written_kit):
    require_backend_build()
    collector = backends_dir() / "otelcol-verl"
    if not collector.is_file():
        require("the built Collector", f"{collector} is missing; {BACKENDS_HOW}")
    storage = written_kit.parent / "file_storage"
    storage.mkdir(exist_ok=True)
    # as the file is (its defaults), and with the addresses `otel-verl stack up` would set
    for env in ({}, {"OTELCOL_STORAGE_DIR": str(storage), "OTELCOL_TRACES_ENDPOINT": "127.0.0.1:14317"}):
        done = subprocess.run(
            [str(collector), "validate", f"--config={written_kit / 'otelcol-config.yaml'}"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **env},
        )
        assert done.returncode == 0, (env, done.stdout + done.stderr)
    # a node's agent and a gateway of several nodes, from the same written kit (their files have no
    # default for the token, the TLS files and the gateways: what `stack up --role` sets)
    roles = {
        "agent": ["otelcol-agent.yaml"],
        "secured agent": ["otelcol-agent.yaml", "otelcol-remote.yaml"],
        "gateway": ["otelcol-config.yaml", "otelcol-remote.yaml", "otelcol-debug.yaml"],
    }
    env = {
        "OTELCOL_STORAGE_DIR": str(storage),
        "OTELCOL_BEARER_TOKEN_FILE": "/etc/otelcol/token",
        "OTELCOL_GATEWAY_RESOLVER": '{"static": {"hostnames": ["gw1:4317", "gw2:4317"]}}',
        "OTELCOL_TLS_CERT_FILE": "/etc/otelcol/cert.pem",
        "OTELCOL_TLS_KEY_FILE": "/etc/otelcol/key.pem",
    }
    for role, files in roles.items():
        done = subprocess.run(
            [str(collector), "validate", *(f"--config={written_kit / f}" for f in files)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **env},
        )
        assert done.returncode == 0, (role, done.stdout + done.stderr)


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
