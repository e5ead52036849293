"""The ops kit's files: where they are (the wheel's ``otel_verl/_ops_kit``, else the clone's
``collector/`` and ``scripts/``), ``stack configs DIR`` (the configs written out, each file whole)
and ``stack build`` (the kit's ``backends.sh``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from otel_verl.exits import OK, PROBLEM, USAGE, CommandError
from otel_verl.stack.binaries import BINARY_NAMES, default_backends_dir


@dataclass(frozen=True)
class Kit:
    """Where the ops kit's files are: the configs folder and the script that builds the backends."""

    configs: Path  # collector/
    backends_script: Path  # scripts/backends.sh (it reads ../collector/ next to it)


def ops_kit() -> Kit | None:
    """The ops kit installed with this otel-verl (``otel_verl/_ops_kit``, from a wheel), else the one
    of the clone it runs from (``collector/``, ``scripts/``: an editable install); None without either."""
    package = Path(__file__).resolve().parents[1]
    for root in (package / "_ops_kit", package.parent):
        kit = Kit(root / "collector", root / "scripts" / "backends.sh")
        if (kit.configs / "otelcol-config.yaml").is_file():
            return kit
    return None


def default_config_dir() -> Path | None:
    """``OTEL_VERL_COLLECTOR_DIR``, else the installed ops kit's configs (``ops_kit``)."""
    env = os.environ.get("OTEL_VERL_COLLECTOR_DIR")
    if env:
        return Path(env)
    kit = ops_kit()
    return kit.configs if kit else None


def _kit() -> Kit:
    kit = ops_kit()
    if kit is None:
        raise CommandError("the ops kit is not installed with this otel-verl (no otel_verl/_ops_kit, no clone)")
    return kit


def _kit_files(root: Path) -> list[Path]:
    """Every regular file of the kit's configs folder, relative to it, sorted."""
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def configs(dest: Path, force: bool = False, out: Callable[[str], None] = print) -> int:
    """Write the kit's configs into ``dest`` (made if missing), each file whole or not at all
    (``atomic.write_file``: a link planted at a destination is replaced, never written through).
    A file already there with other content is replaced only with ``force``; a folder on the way
    that is a link is refused (it would lead the files elsewhere)."""
    from otel_verl.atomic import write_file

    source = _kit().configs
    files = _kit_files(source)
    if dest.exists() and not dest.is_dir():
        raise CommandError(f"{dest} exists and is not a folder", USAGE)
    plan: list[tuple[Path, bytes]] = []
    differ: list[str] = []
    same = 0
    for rel in files:
        for parent in reversed(rel.parents[:-1]):  # the folders between dest and the file
            if (dest / parent).is_symlink() or ((dest / parent).exists() and not (dest / parent).is_dir()):
                raise CommandError(f"{dest / parent} is a link or not a folder; remove it or choose another DIR")
        data = (source / rel).read_bytes()
        target = dest / rel
        if target.is_dir() and not target.is_symlink():
            raise CommandError(f"{target} is a folder; remove it or choose another DIR")
        if target.is_file() and not target.is_symlink():
            if target.read_bytes() == data:
                same += 1
                continue
            differ.append(str(rel))
        plan.append((target, data))
    if differ and not force:
        shown = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        raise CommandError(f"{len(differ)} files in {dest} differ from the kit's ({shown}); --force replaces them")
    try:
        for target, data in plan:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_file(target, data)
    except OSError as exc:
        raise CommandError(f"cannot write into {dest}: {exc.strerror or exc}") from None
    out(f"wrote {len(plan)} files to {dest}" + (f" ({same} already there, unchanged)" if same else ""))
    out(f"  Collector:    otelcol-contrib --config={dest / 'otelcol-config.yaml'}  (backends: OTELCOL_*_ENDPOINT)")
    out(f"  Prometheus 3: prometheus --config.file={dest / 'prometheus' / 'prometheus.yml'} --web.enable-otlp-receiver")
    out(f"  Alertmanager: alertmanager --config.file={dest / 'alertmanager' / 'alertmanager.yml'}")
    grafana = dest / "grafana"
    out(f"  Grafana:      provisioning {grafana / 'provisioning'}, dashboards {grafana / 'dashboards'}")
    return OK


BUILD_COMPONENTS = ("otelcol-verl", "prometheus", "alertmanager", "jaeger", "victoria-logs")


def build(components: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    """Build the backends from their Go modules with the kit's ``backends.sh`` (its lines go to
    this command's output); 0 when all were built or present, 1 when one failed."""
    unknown = [c for c in components or [] if c not in BUILD_COMPONENTS]
    if unknown:
        raise CommandError(f"unknown component {unknown[0]!r} (known: {', '.join(BUILD_COMPONENTS)})", USAGE)
    script = _kit().backends_script
    if not script.is_file():
        raise CommandError(f"the ops kit has no {script.name} ({script})")
    bash = shutil.which("bash")
    if bash is None:
        raise CommandError("bash is not on PATH (backends.sh is a bash script)")
    if shutil.which("go") is None:
        raise CommandError(
            f"go is not on PATH: building needs Go >= 1.26.8 (https://go.dev/dl/); or put each project's "
            f"release binary ({', '.join(sorted({n for names in BINARY_NAMES.values() for n in names}))}) "
            f"in {default_backends_dir()} or on PATH"
        )
    out(f"building {', '.join(components or BUILD_COMPONENTS)} into {default_backends_dir()} ({script})")
    done = subprocess.run([bash, str(script), *(components or [])], check=False)  # noqa: S603 - our script
    return OK if done.returncode == 0 else PROBLEM
