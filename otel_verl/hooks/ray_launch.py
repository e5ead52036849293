"""``ray.init`` in the launcher: hand the ``OTEL_*`` settings to every Ray worker.

On a fresh local cluster Ray workers inherit the launcher's environment anyway; on a
running cluster (``ray start``, KubeRay, ``ray job submit``) they do not. Adding the
``OTEL_*`` variables (exporter, endpoint, ``OTEL_VERL_RUN_ID``, ...) to the job's
``runtime_env.env_vars`` makes both cases equal. verl's ``verl.plugins`` entry point then
turns the instrumentation on in each worker (see ``otel_verl._verl_plugin``). Variables the
user already put in ``runtime_env`` win. Turn off with ``OTEL_VERL_RAY_RUNTIME_ENV=false``.
Header variables (``OTEL_EXPORTER_OTLP_*HEADERS``: auth tokens) and client keys are left out
unless ``OTEL_VERL_RAY_RUNTIME_ENV_SECRETS=true``: Ray stores and displays a job's runtime_env.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from otel_verl import config
from otel_verl._safe import safe
from otel_verl.config import settings
from otel_verl.hooks import Hook


def _secret(name: str) -> bool:
    # OTLP headers carry auth tokens; Ray keeps a job's runtime_env in its GCS and shows it in
    # the dashboard, so they travel only on request (fresh local clusters inherit them anyway).
    return name.endswith("_HEADERS") or "CLIENT_KEY" in name


def otel_env() -> dict[str, str]:
    with_secrets = settings().ray_runtime_env_secrets
    return {k: v for k, v in os.environ.items() if k.startswith("OTEL_") and (with_secrets or not _secret(k))}


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
    runtime_env = kwargs.get("runtime_env")
    if runtime_env is None:
        runtime_env = {}
    elif not isinstance(runtime_env, dict):
        return kwargs  # a RuntimeEnv object or similar: leave the user's choice alone
    env_vars = dict(otel_env())
    env_vars.update(runtime_env.get("env_vars") or {})
    return {**kwargs, "runtime_env": {**runtime_env, "env_vars": env_vars}}


def _init_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return wrapped(*args, **(_with_otel_env(kwargs) or kwargs))


HOOKS = [Hook("ray", "init", _init_wrapper)]
