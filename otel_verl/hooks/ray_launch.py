"""``ray.init`` in the launcher: hand the ``OTEL_*`` settings to every Ray worker.

On a fresh local cluster Ray workers inherit the launcher's environment anyway; on a
running cluster (``ray start``, KubeRay, ``ray job submit``) they do not. Adding the
``OTEL_*`` variables (exporter, endpoint, ``OTEL_VERL_RUN_ID``, ...) to the job's
``runtime_env.env_vars`` makes both cases equal. verl's ``verl.plugins`` entry point then
turns the instrumentation on in each worker (see ``otel_verl._verl_plugin``). Variables the
user already put in ``runtime_env`` win, and so do those of the runtime_env a job was submitted
with (``ray job submit --runtime-env-json``): Ray would refuse a second value of one variable
(``_submitted_job_env_vars``). Turn off with ``OTEL_VERL_RAY_RUNTIME_ENV=false``.

Ray stores a job's runtime_env and shows it in its dashboard, so ``otel_env`` (the one place that
decides what goes there) leaves out, unless ``OTEL_VERL_RAY_RUNTIME_ENV_SECRETS=true``:

* every variable whose name looks secret (``otel_verl.redact.is_secret_key``): the header
  variables ``OTEL_EXPORTER_OTLP_*HEADERS`` (and a misspelt ``*_HEADER``), client keys, ``*_TOKEN``...;
* every variable whose value holds a credential (``otel_verl.redact.has_secret``): an endpoint
  URL with ``user:pass@`` or ``?api_key=``/``?token=``, a ``Bearer`` string...;
* of ``OTEL_RESOURCE_ATTRIBUTES``, the entries whose key looks secret or whose value holds a
  credential (the other entries go).

A variable left out for its value is named (never its value) in one warning. Workers of a fresh
local cluster inherit it from the launcher anyway; on a running cluster set it in the nodes'
environment (an endpoint's credentials in ``OTEL_EXPORTER_OTLP_HEADERS`` there, not in its URL).

``opentelemetry-instrument`` also starts every other installed instrumentation in each of the
job's ~25 Ray processes (GCS, raylet, dashboard modules, idle workers, ...). One of them, the
generic system-metrics instrumentation (a dependency of otel-verl, for ``process.*``), would
collect the host's ``system.*`` metrics in every one of them (tens of milliseconds of CPU per
process and collection): ``system_metrics`` is added to ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` for the
processes Ray starts, unless ``OTEL_VERL_RAY_SYSTEM_METRICS=true``. The launcher keeps it (one
copy of the host's metrics) and verl's processes report their own ``process.*``.

Start-up cost: that ``sitecustomize`` costs every Python process that runs it the import of
``opentelemetry.instrumentation`` (no setting of its own skips it; figures in bench/README.md).
When ``ray.init`` starts a local cluster, Ray's own Python processes (dashboard, agents, log
monitor, autoscaler monitor, ``setup_worker.py`` before each worker, idle workers) are started
without it: its folder is left out of ``PYTHONPATH`` while ``ray.init`` runs, and the job's workers
get the launcher's ``PYTHONPATH`` back through the job's ``runtime_env`` (Ray's supported way), with
otel-verl's own ``sitecustomize`` in that folder's place: the same bootstrap, every instrumentation,
no SDK configurator, so that otel-verl's pipeline is the one of each verl process
(``otel_verl.process.worker_bootstrap``; start-up figures: ``bench/startup_cost.py``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from otel_verl import config, private_api, redact
from otel_verl._safe import safe, warn_once
from otel_verl.config import settings
from otel_verl.hooks import rl_insight, targets
from otel_verl.hooks.guard import stop_exit as guard_exit
from otel_verl.hooks.hookset import Hook
from otel_verl.package import PYTHON

_OWN_SETTINGS = frozenset(
    v for k, v in vars(config).items() if k.isupper() and isinstance(v, str) and v.startswith("OTEL_VERL_")
)
# Variables whose value is a list of ``key=value`` entries (percent-encoded, comma-separated).
ENTRY_LISTS = frozenset({"OTEL_RESOURCE_ATTRIBUTES"})


def _secret_name(name: str) -> bool:
    # otel-verl's own settings are flags, numbers, names and paths (OTEL_VERL_RAY_RUNTIME_ENV_SECRETS is one)
    return name not in _OWN_SETTINGS and redact.is_secret_key(name)


def _entries_without_secrets(value: str) -> tuple[str, list[str]]:
    """The entries of a ``key=value,...`` list that carry no secret, and the keys of the others."""
    kept: list[str] = []
    dropped: list[str] = []
    for entry in value.split(","):
        key, _, item = entry.partition("=")
        key, item = unquote(key.strip()), unquote(item.strip())
        if redact.is_secret_key(key) or redact.has_secret(item) or redact.has_secret(key):
            dropped.append(redact.redact_text(key))
        else:
            kept.append(entry)
    return ",".join(kept), dropped


def otel_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``OTEL_*`` variables for the job's Ray ``runtime_env`` (what is left out: the module's docstring)."""
    env = os.environ if environ is None else environ
    with_secrets = settings().ray_runtime_env_secrets
    out: dict[str, str] = {}
    held: list[str] = []  # left out for their values: named in a warning
    for name, value in env.items():
        if not name.startswith("OTEL_"):
            continue
        if not with_secrets:
            if _secret_name(name):
                continue  # documented: headers and keys never travel by default
            if name in ENTRY_LISTS:
                value, dropped = _entries_without_secrets(value)
                held += [f"{name} entry {key!r}" for key in dropped]
                if dropped and not value:
                    continue
            elif redact.has_secret(value):
                held.append(name)
                continue
        out[name] = value
    if held:
        warn_once(
            "ray runtime_env credentials",
            "left out of the job's Ray runtime_env (Ray stores it and shows it in its dashboard), as their "
            "values hold credentials: %s. Workers of a fresh local cluster inherit them from this process; on "
            "a running cluster set them in the nodes' environment (an endpoint's credentials in "
            "OTEL_EXPORTER_OTLP_HEADERS there, not in its URL), or set %s=true to hand them over as they are",
            ", ".join(held),
            config.RAY_RUNTIME_ENV_SECRETS,
        )
    return out


MAX_JOB_CONFIG_CHARS = 1 << 20  # Ray's job config (runtime_env and metadata) in one variable; far less in practice
_JOB_ENV_EFFECT = (
    "a job submitted with OTEL_* variables in its runtime_env fails at ray.init (Ray refuses to merge two "
    "values of one variable): pass them in the entrypoint's environment instead"
)


def _submitted_job_env_vars() -> frozenset[str]:
    """The ``env_vars`` names of the runtime_env the job was submitted with (``ray job submit``).

    Ray's job supervisor hands the entrypoint the job's config in an environment variable, and
    ``ray.init`` merges that runtime_env with the one passed to it: a variable set in both makes
    it raise (unless ``RAY_OVERRIDE_JOB_RUNTIME_ENV=1``). Those variables reach every worker
    through the job's runtime_env anyway, with the job's value, so they are left out here. The
    variable's name is Ray's own (a private name); an unreadable value counts as none."""
    name = private_api.import_attribute(
        "ray._private.runtime_env.constants",
        "RAY_JOB_CONFIG_JSON_ENV_VAR",
        dists=("ray",),
        effect=_JOB_ENV_EFFECT,
    )
    raw = os.environ.get(name) if isinstance(name, str) else None
    if not raw or len(raw) > MAX_JOB_CONFIG_CHARS:
        return frozenset()
    try:
        job = json.loads(raw)
    except ValueError:
        return frozenset()
    runtime_env = job.get("runtime_env") if isinstance(job, dict) else None
    env_vars = runtime_env.get("env_vars") if isinstance(runtime_env, dict) else None
    return frozenset(k for k in env_vars if isinstance(k, str)) if isinstance(env_vars, dict) else frozenset()


SYSTEM_METRICS = "system_metrics"  # its entry point name
VERL_RUN_PPO = ("verl.trainer.main_ppo", "run_ppo")  # verl's launcher: calls ray.init with `config` in scope


def _without_system_metrics() -> None:
    """Ray's processes (children of this one, or given the runtime_env) skip system_metrics."""
    if settings().ray_system_metrics:
        return
    names = config.disabled_instrumentations()
    if SYSTEM_METRICS not in names:
        # set before ray.init: GCS, raylet and dashboard processes are started from this process
        os.environ[config.DISABLED_INSTRUMENTATIONS] = ",".join([*names, SYSTEM_METRICS])


_NAMES_EFFECT = "the run's project and experiment come only from OTEL_VERL_PROJECT / OTEL_VERL_EXPERIMENT"


def _run_names_from_caller() -> None:
    """Project and experiment for every process's resource, from verl's launcher.

    verl's ``run_ppo(config, ...)`` calls ``ray.init``; its ``config`` is the only place the
    launcher knows them before any Ray process starts. Best effort: variables the user set win.
    Both ``sys._getframe`` and verl's local name are private: without them (said once, with the
    versions) the names come from the environment only, as when ``ray.init`` is the user's own.
    """
    getframe = private_api.attribute(sys, "_getframe", name="sys._getframe", dists=(PYTHON,), effect=_NAMES_EFFECT)
    if getframe is None:
        return
    frame = getframe(1)
    caller = None  # the frame that called ray.init: the first one that is not ours or wrapt's
    for _ in range(8):
        if frame is None:
            break
        module = str(frame.f_globals.get("__name__", ""))
        if caller is None and not module.startswith(("otel_verl.", "wrapt")):
            caller = frame
        trainer_cfg = getattr(frame.f_locals.get("config"), "trainer", None)
        get = getattr(trainer_cfg, "get", None)
        if callable(get):
            for key, var in (("project_name", config.PROJECT), ("experiment_name", config.EXPERIMENT)):
                value = get(key)
                if value and not os.environ.get(var):
                    os.environ[var] = str(value)
            config.settings.cache_clear()
            return
        frame = frame.f_back
    if (
        caller is not None
        and caller.f_code.co_name == VERL_RUN_PPO[1]
        and caller.f_globals.get("__name__") == VERL_RUN_PPO[0]
    ):
        # verl's own launcher, without the local it had: verl renamed it
        private_api.missing(
            f"{VERL_RUN_PPO[0]}.{VERL_RUN_PPO[1]}'s local `config` (with `trainer`)", ("verl",), _NAMES_EFFECT
        )


@safe("ray runtime_env")
def _with_otel_env(kwargs: dict[str, Any]) -> dict[str, Any]:
    if not settings().ray_runtime_env:
        return kwargs
    _run_names_from_caller()
    _without_system_metrics()
    runtime_env = kwargs.get("runtime_env")
    if runtime_env is None:
        runtime_env = {}
    elif not isinstance(runtime_env, dict):
        return kwargs  # a RuntimeEnv object or similar: leave the user's choice alone
    submitted = _submitted_job_env_vars()  # they reach every worker already, with the job's value
    env_vars = {name: value for name, value in otel_env().items() if name not in submitted}
    env_vars.update(runtime_env.get("env_vars") or {})
    return {**kwargs, "runtime_env": {**runtime_env, "env_vars": env_vars}}


def _auto_instrumentation_dir() -> str | None:
    """The folder of ``opentelemetry-instrument``'s sitecustomize, when this process's ``PYTHONPATH`` has it."""
    auto = sys.modules.get("opentelemetry.instrumentation.auto_instrumentation")  # loaded by that sitecustomize
    if auto is None or not getattr(auto, "__file__", None):
        return None
    folder = os.path.realpath(os.path.dirname(os.path.abspath(auto.__file__)))
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        # as written there: the launcher may reach the same venv through a link (a symlinked venv)
        if entry and os.path.realpath(entry) == folder:
            return entry
    return None


def _starts_local_cluster(kwargs: dict[str, Any]) -> bool:
    """Whether this ``ray.init`` starts a new local cluster (its daemons are children of this process).

    False when it cannot tell: Ray's daemons then keep the launcher's ``PYTHONPATH`` (they pay the
    sitecustomize's start-up cost), where a wrong True would leave them without it on a cluster."""
    canonicalize = private_api.import_attribute(
        "ray._private.services",
        "canonicalize_bootstrap_address",
        dists=("ray",),
        effect="Ray's own processes keep opentelemetry-instrument's start-up cost",
    )
    if canonicalize is None:
        return False
    try:
        return canonicalize(kwargs.get("address"), kwargs.get("_temp_dir")) is None
    except Exception:  # noqa: BLE001 - no cluster at that address: ray.init itself says so
        return False


@safe("ray daemons' PYTHONPATH")
def _daemons_pythonpath(kwargs: dict[str, Any]) -> str | None:
    """``PYTHONPATH`` for Ray's own processes (without the sitecustomize), or None to leave it as is.

    Only when the job's workers get the launcher's ``PYTHONPATH`` back: ``kwargs`` (what
    ``_with_otel_env`` made) then carries it in ``runtime_env.env_vars``, added here.
    """
    if not settings().ray_runtime_env:
        return None  # kwargs are the user's own: leave them and the daemons alone
    folder = _auto_instrumentation_dir()
    runtime_env = kwargs.get("runtime_env")
    env_vars = runtime_env.get("env_vars") if isinstance(runtime_env, dict) else None
    if folder is None or not isinstance(env_vars, dict) or "PYTHONPATH" in env_vars:
        return None  # not under opentelemetry-instrument, runtime_env off, or the user's own PYTHONPATH for workers
    if not _starts_local_cluster(kwargs):
        return None  # a running cluster: its processes never had it; this launcher's paths may not exist there
    from otel_verl.process.worker_bootstrap import SITE_DIR

    paths = os.environ["PYTHONPATH"].split(os.pathsep)
    # the job's workers: the same bootstrap without a configurator (``process.worker_bootstrap``)
    env_vars["PYTHONPATH"] = os.pathsep.join(SITE_DIR if p == folder else p for p in paths)
    return os.pathsep.join(p for p in paths if p != folder)


def _ray_init_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    guard_exit.launcher_ray_init()  # a guard stop's exit code, when one is asked for
    rl_insight.warn_shared_headers()  # verl has just set its switch, if the logger is on
    made = _with_otel_env(kwargs)
    # only on kwargs made here (fresh runtime_env dicts), never on the user's own
    daemons = _daemons_pythonpath(made) if made is not None and made is not kwargs else None
    kwargs = made or kwargs
    if daemons is None:
        return wrapped(*args, **kwargs)
    own = os.environ["PYTHONPATH"]
    os.environ["PYTHONPATH"] = daemons  # read as Ray starts GCS, raylet, dashboard... (children of ray.init)
    try:
        return wrapped(*args, **kwargs)
    finally:
        os.environ["PYTHONPATH"] = own  # this process's later children get it as before


HOOKS = [Hook(targets.RAY, "init", _ray_init_wrapper)]
