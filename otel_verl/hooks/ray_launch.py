"""``ray.init`` in the launcher: hand the ``OTEL_*`` settings to every Ray worker.

On a fresh local cluster Ray workers inherit the launcher's environment anyway; on a
running cluster (``ray start``, KubeRay, ``ray job submit``) they do not. Adding the
``OTEL_*`` variables (exporter, endpoint, ``OTEL_VERL_RUN_ID``, ...) to the job's
``runtime_env.env_vars`` makes both cases equal. verl's ``verl.plugins`` entry point then
turns the instrumentation on in each worker (see ``otel_verl._verl_plugin``). Variables the
user already put in ``runtime_env`` win. Turn off with ``OTEL_VERL_RAY_RUNTIME_ENV=false``.
Header variables (``OTEL_EXPORTER_OTLP_*HEADERS``: auth tokens), client keys and any other
variable whose name looks secret (``otel_verl.redact``) are left out unless
``OTEL_VERL_RAY_RUNTIME_ENV_SECRETS=true``: Ray stores and displays a job's runtime_env.

``opentelemetry-instrument`` also starts every other installed instrumentation in each of the
job's ~25 Ray processes (GCS, raylet, dashboard modules, idle workers, ...). One of them, the
generic system-metrics instrumentation (a dependency of otel-verl, for ``process.*``), would
collect the host's 32 ``system.*`` metrics in every one of them (~45 ms CPU per process and
collection): ``system_metrics`` is added to ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` for the
processes Ray starts, unless ``OTEL_VERL_RAY_SYSTEM_METRICS=true``. The launcher keeps it (one
copy of the host's metrics) and verl's processes report their own ``process.*``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from otel_verl import config, redact
from otel_verl._safe import safe
from otel_verl.config import settings
from otel_verl.hooks import targets
from otel_verl.hooks.hookset import Hook


def _secret(name: str) -> bool:
    # OTLP headers carry auth tokens; Ray keeps a job's runtime_env in its GCS and shows it in
    # the dashboard, so they travel only on request (fresh local clusters inherit them anyway).
    # otel-verl's own settings are flags and numbers (OTEL_VERL_RAY_RUNTIME_ENV_SECRETS is one).
    own = name in _OWN_SETTINGS
    return name.endswith("_HEADERS") or "CLIENT_KEY" in name or (not own and redact.is_secret_key(name))


_OWN_SETTINGS = frozenset(
    v for k, v in vars(config).items() if k.isupper() and isinstance(v, str) and v.startswith("OTEL_VERL_")
)


def otel_env() -> dict[str, str]:
    with_secrets = settings().ray_runtime_env_secrets
    return {k: v for k, v in os.environ.items() if k.startswith("OTEL_") and (with_secrets or not _secret(k))}


SYSTEM_METRICS = "system_metrics"  # its entry point name


def _without_system_metrics() -> None:
    """Ray's processes (children of this one, or given the runtime_env) skip system_metrics."""
    if settings().ray_system_metrics:
        return
    names = config.disabled_instrumentations()
    if SYSTEM_METRICS not in names:
        # set before ray.init: GCS, raylet and dashboard processes are started from this process
        os.environ[config.DISABLED_INSTRUMENTATIONS] = ",".join([*names, SYSTEM_METRICS])


def _run_names_from_caller() -> None:
    """Project and experiment for every process's resource, from verl's launcher.

    verl's ``run_ppo(config, ...)`` calls ``ray.init``; its ``config`` is the only place the
    launcher knows them before any Ray process starts. Best effort: variables the user set win.
    """
    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            return
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
    env_vars = dict(otel_env())
    env_vars.update(runtime_env.get("env_vars") or {})
    return {**kwargs, "runtime_env": {**runtime_env, "env_vars": env_vars}}


def _ray_init_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return wrapped(*args, **(_with_otel_env(kwargs) or kwargs))


HOOKS = [Hook(targets.RAY, "init", _ray_init_wrapper)]
