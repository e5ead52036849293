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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

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


def env_str(name: str, default: str | None) -> str | None:
    """A free-form value: any non-empty string."""
    return os.environ.get(name) or default


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
    rollout_spans_per_step: int
    gpu_metrics: bool
    process_metrics: bool
    ray_system_metrics: bool
    log_level: int
    samples: bool
    samples_every_n_steps: int
    samples_per_step: int
    samples_max_chars: int
    guard_action: str
    guard_rules: str | None
    stall_after_s: float | None  # None: auto; 0: off


@dataclass(frozen=True)
class Variable:
    """One ``OTEL_VERL_*`` setting: its ``Settings`` field, default, and parser ``read(name, default)``."""

    name: str
    field: str
    default: Any
    read: Callable[[str, Any], Any]

    def value(self) -> Any:
        return self.read(self.name, self.default)


# Every setting, in README order: the one list settings() and ``otel-verl doctor`` read.
VARIABLES: tuple[Variable, ...] = (
    Variable(RUN_ID, "run_id", None, env_str),
    Variable(PROJECT, "project", None, env_str),
    Variable(EXPERIMENT, "experiment", None, env_str),
    Variable(FILE_DIR, "file_dir", DEFAULT_FILE_DIR, env_str),
    Variable(SHUTDOWN_TIMEOUT, "shutdown_timeout_s", 5.0, env_float),
    Variable(FORWARD_METRICS, "forward_metrics", True, env_bool),
    Variable(STEP_EXPORT, "step_export", True, env_bool),
    Variable(RAY_RUNTIME_ENV, "ray_runtime_env", True, env_bool),
    Variable(RAY_RUNTIME_ENV_SECRETS, "ray_runtime_env_secrets", False, env_bool),
    Variable(RAY_SYSTEM_METRICS, "ray_system_metrics", False, env_bool),
    Variable(ROLLOUT_SPANS_PER_STEP, "rollout_spans_per_step", 64, partial(env_int, minimum=-1)),
    Variable(GPU_METRICS, "gpu_metrics", True, env_bool),
    Variable(PROCESS_METRICS, "process_metrics", True, env_bool),
    Variable(LOG_LEVEL, "log_level", logging.WARNING, env_log_level),
    Variable(SAMPLES, "samples", False, env_bool),
    Variable(SAMPLES_EVERY_N_STEPS, "samples_every_n_steps", 10, partial(env_int, minimum=1)),
    Variable(SAMPLES_PER_STEP, "samples_per_step", 4, partial(env_int, minimum=1)),
    Variable(SAMPLES_MAX_CHARS, "samples_max_chars", 2000, partial(env_int, minimum=1)),
    Variable(GUARD_ACTION, "guard_action", "observe", partial(env_choice, choices=GUARD_ACTIONS)),
    Variable(GUARD_RULES, "guard_rules", None, env_str),
    Variable(STALL_AFTER, "stall_after_s", None, lambda name, default: env_stall_after(name)),
)


@lru_cache(maxsize=1)
def settings() -> Settings:
    """This process's settings (read once: the environment of a running job does not change)."""
    return Settings(**{v.field: v.value() for v in VARIABLES})


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
