"""OpenTelemetry's auto-instrumentation in a verl job's Ray workers, minus the distro and configurator.

``opentelemetry-instrument`` runs its bootstrap in every process that has its ``sitecustomize`` on
``PYTHONPATH``: the distro (``opentelemetry-distro`` sets the exporter defaults), then the first
``opentelemetry_configurator`` entry point (the distro's: it builds a TracerProvider, MeterProvider
and LoggerProvider with periodic export and makes them global), then every installed
instrumentation. In a verl process that configurator's pipeline would be a second one, made at
interpreter start, before anyone knows which process this is: its resource has no run id, role or
rank, and the global providers it sets keep user code (reward functions, agent loops, tools) and
the other instrumentations off otel-verl's pipeline.

So the job's workers get this module's ``sitecustomize`` instead (``hooks.ray_launch``): the same
bootstrap with the configurator left out, through its own switch ``OTEL_PYTHON_CONFIGURATOR``,
named for no configurator, and the distro too (``OTEL_PYTHON_DISTRO``): it ran in the launcher,
whose environment, its defaults included, the workers inherit or get through the runtime_env, and
importing it imports the SDK in every idle worker. Every instrumentation loads as usual; otel-verl
builds each verl process's pipeline from the same ``OTEL_*`` environment once it knows who the
process is and installs it as the global providers (``global_providers``). A distro or
configurator the user chose by name (``OTEL_PYTHON_DISTRO`` / ``OTEL_PYTHON_CONFIGURATOR`` set)
still runs: a named configurator's providers are then left as they are, and otel-verl says so.

Like OpenTelemetry's own bootstrap, this folder is off ``PYTHONPATH`` while the bootstrap runs (a
process an instrumentor starts meanwhile does not run it again, which could recurse) and back on
it after, for the worker's own children. The folder's ``sitecustomize`` shadows any other one on
the path (a user's, a distribution's): :func:`run_next_sitecustomize` runs the next one after the
bootstrap, once, as Python would have without this folder; never a copy of this folder's, nor
``opentelemetry-instrument``'s (whose distro and configurator are what the workers leave out).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import os
import sys

CONFIGURATOR_VAR = "OTEL_PYTHON_CONFIGURATOR"
DISTRO_VAR = "OTEL_PYTHON_DISTRO"
NO_CONFIGURATOR = "otel-verl:none"  # no entry point has this name (for no distro either)
SITE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_worker_site")
# The loader says, for every configurator it skips, that OTEL_PYTHON_CONFIGURATOR named another
# (opentelemetry/instrumentation/auto_instrumentation/_load.py): expected here, so not shown.
_LOADER_LOGGER = "opentelemetry.instrumentation.auto_instrumentation._load"


class _SkippedByUs(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (len(args) == 3 and args[1] == NO_CONFIGURATOR and args[2] == CONFIGURATOR_VAR)


# sitecustomize folders that run OpenTelemetry's bootstrap: this one, opentelemetry-instrument's
_BOOTSTRAP_FOLDERS = ("_worker_site", os.path.join("instrumentation", "auto_instrumentation"))


def _bootstrap_folder(entry: str) -> bool:
    """Whether the ``sys.path``/``PYTHONPATH`` entry is a folder whose sitecustomize runs the bootstrap."""
    folder = os.path.abspath(entry or os.curdir).rstrip(os.sep)
    return folder.endswith(_BOOTSTRAP_FOLDERS) or os.path.realpath(folder) == os.path.realpath(SITE_DIR)


def _without_site_dir(python_path: str) -> str:
    """``python_path`` without this folder, however spelled (a link to it too)."""
    here = os.path.realpath(SITE_DIR)
    return os.pathsep.join(p for p in python_path.split(os.pathsep) if os.path.realpath(p or os.curdir) != here)


# True in a process whose bootstrap this module ran (a verl job's Ray worker, not the launcher):
# what the launcher said once for the job (e.g. an untested verl) is not said again in each worker.
active = False


def initialize() -> None:
    """Run OpenTelemetry's auto-instrumentation here, without a distro or configurator unless one
    was named (the loader then uses its default distro, silently); this folder is off
    ``PYTHONPATH`` meanwhile (the module's rules)."""
    global active
    active = True
    python_path = os.environ.get("PYTHONPATH")
    if python_path is not None:
        os.environ["PYTHONPATH"] = _without_site_dir(python_path)
    try:
        _initialize()
    finally:
        if python_path is not None:
            current = os.environ.get("PYTHONPATH", "")
            if current == _without_site_dir(python_path):  # as we left it: the user's order again
                os.environ["PYTHONPATH"] = python_path
            elif SITE_DIR not in current.split(os.pathsep):  # the bootstrap changed it: keep its change
                os.environ["PYTHONPATH"] = SITE_DIR + os.pathsep + current if current else SITE_DIR


def run_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` that this folder's shadows, if any, as ``sitecustomize`` (once: the
    module's rules); an error in it is Python's to report, as for any ``sitecustomize``."""
    path = [p for p in sys.path if not _bootstrap_folder(p)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module  # what `import sitecustomize` gives without this folder
    spec.loader.exec_module(module)


def _initialize() -> None:
    ours = not os.environ.get(CONFIGURATOR_VAR)
    no_distro = not os.environ.get(DISTRO_VAR)
    quiet = _SkippedByUs()
    loader_log = logging.getLogger(_LOADER_LOGGER)
    if no_distro:
        os.environ[DISTRO_VAR] = NO_CONFIGURATOR
    if ours:
        os.environ[CONFIGURATOR_VAR] = NO_CONFIGURATOR
        loader_log.addFilter(quiet)
    try:
        from opentelemetry.instrumentation.auto_instrumentation import initialize as otel_initialize

        otel_initialize()
    except Exception:  # noqa: BLE001 - never stop a Ray worker from starting
        logging.getLogger("otel_verl").warning("otel-verl: OpenTelemetry's auto-instrumentation failed", exc_info=True)
    finally:
        if no_distro:
            os.environ.pop(DISTRO_VAR, None)
        if ours:
            os.environ.pop(CONFIGURATOR_VAR, None)
            loader_log.removeFilter(quiet)


def selected(group: str, env_var: str) -> str | None:
    """The entry point of ``group`` that OpenTelemetry's bootstrap loads, as ``name (distribution)``:
    the one ``env_var`` names, else the first installed (its loader's rule for distros and
    configurators); None for none."""
    from importlib.metadata import entry_points

    found = list(entry_points(group=group))
    wanted = os.environ.get(env_var)
    chosen = [ep for ep in found if ep.name == wanted] if wanted else found[:1]
    if not chosen:
        return None
    dist = getattr(chosen[0].dist, "name", None)
    return f"{chosen[0].name} ({dist})" if dist else chosen[0].name


def loaded_instrumentations() -> dict[str, str | None]:
    """Every ``opentelemetry_instrumentor`` entry point and why it would not load here (None: it loads):
    switched off by ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``, or its library is not installed."""
    from importlib.metadata import entry_points

    from opentelemetry.instrumentation.dependencies import get_dist_dependency_conflicts

    from otel_verl.config import disabled_instrumentations

    off = set(disabled_instrumentations())
    out: dict[str, str | None] = {}
    for ep in entry_points(group="opentelemetry_instrumentor"):
        if "*" in off or ep.name in off:
            out[ep.name] = "disabled"
            continue
        try:
            conflict = get_dist_dependency_conflicts(ep.dist) if ep.dist is not None else None
        except Exception:  # noqa: BLE001 - a broken distribution: OpenTelemetry's loader skips it too
            conflict = "unreadable"
        out[ep.name] = None if conflict is None else "its library is not installed"
    return out
