"""Finding the components' binaries: ``--bin-dir``, ``PATH``, then the folder ``scripts/backends.sh``
builds into (``default_backends_dir``); each project's own build or release names."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from otel_verl.exits import CommandError
from otel_verl.stack.roles import START_ORDER

# The names each project's own build or release uses; the first one found wins.
BINARY_NAMES: dict[str, tuple[str, ...]] = {
    "otelcol": ("otelcol-verl", "otelcol-contrib"),
    "prometheus": ("prometheus",),
    "alertmanager": ("alertmanager",),
    "jaeger": ("jaeger",),
    "victoria-logs": ("victoria-logs", "victoria-logs-prod"),
}


def default_backends_dir() -> Path:
    """Where scripts/backends.sh builds (same default as the script)."""
    return Path(os.environ.get("OTEL_VERL_BACKENDS_DIR") or Path.home() / ".cache" / "otel-verl" / "backends")


def _prometheus_major(binary: str) -> int | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version (\d+)\.", out.stdout + out.stderr)
    return int(m.group(1)) if m else None


def find_binaries(bin_dir: Path | None, components: tuple[str, ...] = START_ORDER) -> dict[str, str]:
    """Path of each of ``components``' binary; CommandError naming every missing one."""
    dirs = ([bin_dir] if bin_dir else []) + [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    dirs.append(default_backends_dir())
    dirs = list(dict.fromkeys(d.resolve() for d in dirs))  # /bin and /usr/bin are one folder on Debian
    found: dict[str, str] = {}
    notes: list[str] = []
    for comp, names in BINARY_NAMES.items():
        if comp not in components:
            continue
        for d in dirs:
            for name in names:
                cand = d / name
                if not (cand.is_file() and os.access(cand, os.X_OK)):
                    continue
                # Debian's `prometheus` package is 2.x: it has no OTLP receiver and rejects the
                # config's otlp: block, so look further instead of failing at start.
                if comp == "prometheus" and (major := _prometheus_major(str(cand))) != 3:
                    notes.append(f"{cand} is Prometheus {major if major is not None else '?'}.x, 3.x is needed")
                    continue
                found[comp] = str(cand)
                break
            if comp in found:
                break
    missing = [c for c in BINARY_NAMES if c in components and c not in found]
    if missing:
        wanted = "; ".join(f"{c} (as {' or '.join(BINARY_NAMES[c])})" for c in missing)
        where = f"{bin_dir}, PATH or {default_backends_dir()}" if bin_dir else f"PATH or {default_backends_dir()}"
        extra = f" ({'; '.join(notes)})" if notes else ""
        raise CommandError(
            f"missing binaries: {wanted}, looked in {where}{extra}; build them with `otel-verl stack build` "
            f"(Go >= 1.26.8; into {default_backends_dir()}), or put each project's release binary "
            "(Collector contrib, Prometheus 3, Alertmanager, Jaeger 2, VictoriaLogs) in --bin-dir or on PATH"
        )
    return found
