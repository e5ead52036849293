"""``OTEL_VERL_*`` settings, parsed once per process and never fatal, and the kill-switch rule.

A bad value logs one warning naming the variable and the default used instead; nothing here can
stop training. Standard ``OTEL_*`` variables (exporters, endpoint, headers, sampler,
``OTEL_METRIC_EXPORT_INTERVAL``, ...) are read by the OpenTelemetry SDK itself and keep their
documented meaning. Every variable, its default and meaning: README.md, "Configuration"
(``tests/unit/test_config.py`` fails when a variable here has no row there).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

_log = logging.getLogger(__name__)

RUN_ID = "OTEL_VERL_RUN_ID"
PROJECT = "OTEL_VERL_PROJECT"
EXPERIMENT = "OTEL_VERL_EXPERIMENT"
FILE_DIR = "OTEL_VERL_FILE_DIR"
SHUTDOWN_TIMEOUT = "OTEL_VERL_SHUTDOWN_TIMEOUT"
FORWARD_METRICS = "OTEL_VERL_FORWARD_METRICS"
STEP_EXPORT = "OTEL_VERL_STEP_EXPORT"
RAY_RUNTIME_ENV = "OTEL_VERL_RAY_RUNTIME_ENV"
RAY_RUNTIME_ENV_SECRETS = "OTEL_VERL_RAY_RUNTIME_ENV_SECRETS"
LOG_LEVEL = "OTEL_VERL_LOG_LEVEL"
SAMPLES = "OTEL_VERL_SAMPLES"
SAMPLES_EVERY_N_STEPS = "OTEL_VERL_SAMPLES_EVERY_N_STEPS"
SAMPLES_PER_STEP = "OTEL_VERL_SAMPLES_PER_STEP"
SAMPLES_MAX_CHARS = "OTEL_VERL_SAMPLES_MAX_CHARS"
ROLLOUT_SPANS_PER_STEP = "OTEL_VERL_ROLLOUT_SPANS_PER_STEP"
GPU_METRICS = "OTEL_VERL_GPU_METRICS"
PROCESS_METRICS = "OTEL_VERL_PROCESS_METRICS"
RAY_SYSTEM_METRICS = "OTEL_VERL_RAY_SYSTEM_METRICS"
GUARD_ACTION = "OTEL_VERL_GUARD_ACTION"
GUARD_RULES = "OTEL_VERL_GUARD_RULES"
STALL_AFTER = "OTEL_VERL_STALL_AFTER"

GUARD_ACTIONS = ("observe", "checkpoint", "stop", "off")

DEFAULT_FILE_DIR = "otel-verl-telemetry"

# The standard switches otel-verl obeys (read by the SDK / opentelemetry-instrument too).
DISABLED_INSTRUMENTATIONS = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"
SDK_DISABLED = "OTEL_SDK_DISABLED"
INSTRUMENTATION_NAME = "verl"  # our entry point name in ``opentelemetry_instrumentor``

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _warn(name: str, raw: str, default: object) -> None:
    _log.warning("otel-verl: ignoring %s=%r (not valid); using the default %r", name, raw, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    _warn(name, raw, default)
    return default


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        _warn(name, raw, default)
        return default
    if not value >= minimum or value == float("inf"):  # also rejects NaN
        _warn(name, raw, default)
        return default
    return value


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        _warn(name, raw, default)
        return default
    if value < minimum:
        _warn(name, raw, default)
        return default
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in choices:
        return value
    _warn(name, raw, default)
    return default


def env_stall_after(name: str) -> float | None:
    """``auto`` (None: derived from recent step times), ``0``/``off`` (0.0) or seconds."""
    raw = os.environ.get(name)
    if raw is None or raw.strip().lower() in ("", "auto"):
        return None
    if raw.strip().lower() in ("off", "false", "0"):
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        _warn(name, raw, "auto")
        return None
    return value


def env_log_level(name: str, default: int) -> int:
    """A ``logging`` level given by name (``INFO``) or number (``20``)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().upper()
    if value.isdigit():
        return int(value)
    level = logging.getLevelName(value)
    if isinstance(level, int):
        return level
    _warn(name, raw, logging.getLevelName(default))
    return default


@dataclass(frozen=True)
class Settings:
    run_id: str | None
    project: str | None
    experiment: str | None
    file_dir: str
    shutdown_timeout_s: float
    forward_metrics: bool
    step_export: bool
    ray_runtime_env: bool
    ray_runtime_env_secrets: bool
    rollout_spans_per_step: int = 64
    gpu_metrics: bool = True
    process_metrics: bool = True
    ray_system_metrics: bool = False
    log_level: int = logging.WARNING
    samples: bool = False
    samples_every_n_steps: int = 10
    samples_per_step: int = 4
    samples_max_chars: int = 2000
    guard_action: str = "observe"
    guard_rules: str | None = None
    stall_after_s: float | None = None  # None: auto; 0: off


@lru_cache(maxsize=1)
def settings() -> Settings:
    """This process's settings (read once: the environment of a running job does not change)."""
    return Settings(
        run_id=os.environ.get(RUN_ID) or None,
        project=os.environ.get(PROJECT) or None,
        experiment=os.environ.get(EXPERIMENT) or None,
        file_dir=os.environ.get(FILE_DIR) or DEFAULT_FILE_DIR,
        shutdown_timeout_s=env_float(SHUTDOWN_TIMEOUT, 5.0),
        forward_metrics=env_bool(FORWARD_METRICS, True),
        step_export=env_bool(STEP_EXPORT, True),
        ray_runtime_env=env_bool(RAY_RUNTIME_ENV, True),
        ray_runtime_env_secrets=env_bool(RAY_RUNTIME_ENV_SECRETS, False),
        rollout_spans_per_step=env_int(ROLLOUT_SPANS_PER_STEP, 64, minimum=-1),
        gpu_metrics=env_bool(GPU_METRICS, True),
        process_metrics=env_bool(PROCESS_METRICS, True),
        ray_system_metrics=env_bool(RAY_SYSTEM_METRICS, False),
        log_level=env_log_level(LOG_LEVEL, logging.WARNING),
        samples=env_bool(SAMPLES, False),
        samples_every_n_steps=env_int(SAMPLES_EVERY_N_STEPS, 10, minimum=1),
        samples_per_step=env_int(SAMPLES_PER_STEP, 4, minimum=1),
        samples_max_chars=env_int(SAMPLES_MAX_CHARS, 2000, minimum=1),
        guard_action=env_choice(GUARD_ACTION, "observe", GUARD_ACTIONS),
        guard_rules=os.environ.get(GUARD_RULES) or None,
        stall_after_s=env_stall_after(STALL_AFTER),
    )


def ensure_run_id() -> str:
    """Give this job a run id (in the launcher) that every child process inherits."""
    run_id = os.environ.get(RUN_ID)
    if not run_id:
        run_id = uuid.uuid4().hex
        os.environ[RUN_ID] = run_id
    # File output must land in one folder whatever each Ray worker's cwd is.
    os.environ[FILE_DIR] = os.path.abspath(os.environ.get(FILE_DIR) or DEFAULT_FILE_DIR)
    settings.cache_clear()
    return run_id


def disabled_instrumentations(environ: Mapping[str, str] | None = None) -> list[str]:
    """The names in ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``, in order."""
    env = os.environ if environ is None else environ
    return [n.strip() for n in env.get(DISABLED_INSTRUMENTATIONS, "").split(",") if n.strip()]


def sdk_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """``OTEL_SDK_DISABLED=true``: the SDK makes no telemetry, and neither does otel-verl."""
    env = os.environ if environ is None else environ
    return env.get(SDK_DISABLED, "").strip().lower() == "true"


def disabled_reason(environ: Mapping[str, str] | None = None) -> str | None:
    """Why otel-verl is switched off in this environment, or None: the one kill-switch rule
    (the ``verl.plugins`` entry point obeys it, ``otel-verl doctor`` reports it)."""
    names = set(disabled_instrumentations(environ))
    if names & {INSTRUMENTATION_NAME, "*"}:
        return f"{DISABLED_INSTRUMENTATIONS} disables {INSTRUMENTATION_NAME}"
    if sdk_disabled(environ):
        return f"{SDK_DISABLED}=true"
    return None
