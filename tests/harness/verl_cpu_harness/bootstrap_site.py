"""What ``opentelemetry-bootstrap -a install`` would add to this venv, as a folder for ``PYTHONPATH``.

``opentelemetry-bootstrap -a requirements`` names an instrumentation for every library it finds
installed (about twenty with verl's: asyncio, grpc, requests, urllib3, httpx, aiohttp, fastapi,
jinja2, logging, threading, ...), pinned to opentelemetry-instrumentation's own version. They are
installed without pip's resolver (which would replace the venv's OpenTelemetry packages) into a
cached folder beside the venv instead of into it, so that one test's runs see them and every other
test sees the plain set-up.
A package index that lacks a pinned version (a partial mirror) gets the newest version not above
it; what they need and the venv lacks (``opentelemetry-util-http``) is added the same way.
``build()`` returns the folder and the requirement list it was built from.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from opentelemetry.instrumentation.version import __version__ as INSTRUMENTATION_VERSION
from packaging.requirements import Requirement

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "otel-verl" / "bootstrap-site"


def _bootstrap_requirements() -> list[str]:
    exe = Path(sys.executable).with_name("opentelemetry-bootstrap")
    out = subprocess.run([str(exe), "-a", "requirements"], capture_output=True, text=True, check=True, timeout=120)
    return [line.strip() for line in out.stdout.splitlines() if line.strip() and not line.startswith("#")]


def _download(requirement: str, into: Path) -> str:
    """Download ``requirement`` (or, missing from the index, the newest release not above it)."""
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(into)]
    for spec in (requirement, requirement.replace("==", "<=") + "," + ">=0.60b0"):
        if subprocess.run([*pip, "--pre", spec], capture_output=True, text=True, timeout=300).returncode == 0:
            return spec
    raise RuntimeError(f"pip could not download {requirement} (nor an earlier release)")


def _missing_dependencies(wheels: Path, have: set[str]) -> list[str]:
    out = []
    for wheel in wheels.glob("*.whl"):
        with zipfile.ZipFile(wheel) as zf:
            meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            lines = zf.read(meta).decode().splitlines()
        for line in lines:
            if not line.startswith("Requires-Dist:"):
                continue
            req = Requirement(line.split(":", 1)[1].strip())
            name = req.name.lower().replace("_", "-")
            if req.marker is not None or name in have:
                continue
            try:
                importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                have.add(name)
                out.append(f"{name}=={INSTRUMENTATION_VERSION}" if name.startswith("opentelemetry-") else str(req))
    return out


def build() -> tuple[Path, list[str]]:
    site = CACHE / INSTRUMENTATION_VERSION
    done = site / "requirements.json"
    if done.is_file():
        return site, json.loads(done.read_text())
    wanted = _bootstrap_requirements()
    with tempfile.TemporaryDirectory(dir=CACHE.parent if CACHE.parent.exists() else None) as tmp:
        wheels = Path(tmp) / "wheels"
        got = [_download(r, wheels) for r in wanted]
        have = {Requirement(r).name for r in wanted}
        while extra := _missing_dependencies(wheels, have):
            got += [_download(r, wheels) for r in extra]
        staged = Path(tmp) / "site"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(staged)]
            + sorted(str(w) for w in wheels.glob("*.whl")),
            check=True,
            capture_output=True,
            timeout=300,
        )
        (staged / "requirements.json").write_text(json.dumps(got))
        site.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(site, ignore_errors=True)
        os.replace(staged, site)  # whole or not at all: a half-built folder is never used
    return site, got
