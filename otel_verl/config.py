"""``OTEL_VERL_*`` settings: parsed once per process, never fatal.

A bad value logs one warning naming the variable and the default used instead;
nothing here can stop training. Standard ``OTEL_*`` variables (exporters, endpoint,
headers, sampler, ``OTEL_METRIC_EXPORT_INTERVAL``, ``OTEL_SDK_DISABLED``, ...) are read by
the OpenTelemetry SDK itself and keep their documented meaning.

=================================  ===========  ==============================================
Variable                           Default      Meaning
=================================  ===========  ==============================================
``OTEL_VERL_RUN_ID``               generated    Run id shared by every process of one job
                                                (resource attribute ``verl.run.id``). Set in
                                                the launcher and handed to Ray workers.
``OTEL_VERL_PROJECT``,             from verl's  ``verl.project`` / ``verl.experiment`` on every
``OTEL_VERL_EXPERIMENT``           config       process's resource; the launcher reads them
                                                from ``trainer.project_name``/``experiment_name``.
``OTEL_VERL_FILE_DIR``             ``./otel-    Folder the ``otlp_json_file`` exporters write
                                   verl-tele-   to: one JSON-lines file per signal and
                                   metry``      process (``traces-<role>-<pid>.jsonl``...).
``OTEL_VERL_SHUTDOWN_TIMEOUT``     ``5``        Seconds the exit flush may add to a process's
                                                exit, whatever the endpoint does.
``OTEL_VERL_FORWARD_METRICS``      ``true``     Export every numeric key verl logs as a gauge.
``OTEL_VERL_STEP_EXPORT``          ``true``     Export metrics at every step boundary (so no
                                                step's values are lost between intervals).
``OTEL_VERL_RAY_RUNTIME_ENV``      ``true``     Add the ``OTEL_*`` settings to the job's Ray
                                                ``runtime_env`` (needed on running clusters).
``OTEL_VERL_RAY_RUNTIME_ENV_       ``false``    Also put ``OTEL_EXPORTER_OTLP_*HEADERS`` (auth
SECRETS``                                       tokens) there; Ray stores and shows runtime_env.
``OTEL_VERL_LOG_LEVEL``            ``WARNING``  Lowest Python ``logging`` level exported as OTel
                                                logs (``OTEL_LOGS_EXPORTER``); a name or number.
``OTEL_VERL_SAMPLES``              ``false``    Export sampled generations (prompt, response,
                                                reward) as ``verl.rollout.sample`` log records.
                                                Off by default: prompts may be sensitive.
``OTEL_VERL_SAMPLES_EVERY_N_STEPS`` ``10``      Sample every N-th training step.
``OTEL_VERL_SAMPLES_PER_STEP``     ``4``        Samples exported per sampled step.
``OTEL_VERL_SAMPLES_MAX_CHARS``    ``2000``     Prompt and response are each cut to this length.
``OTEL_VERL_ROLLOUT_SPANS_PER_STEP`` ``64``     Trajectories per step and agent-loop worker
                                                that get spans (``0`` none, ``-1`` all);
                                                rollout histograms always count every one.
``OTEL_VERL_GPU_METRICS``          ``true``     ``hw.gpu.*`` gauges in worker processes.
``OTEL_VERL_PROCESS_METRICS``      ``true``     ``process.*`` CPU/memory gauges in worker
                                                processes (system-metrics instrumentation).
``OTEL_VERL_RAY_SYSTEM_METRICS``   ``false``    Let ``opentelemetry-instrument`` also run the
                                                generic system-metrics instrumentation in every
                                                Ray process of the job (off: ~25 copies of the
                                                host's ``system.*`` data, ~45 ms CPU each per
                                                collection; verl processes report ``process.*``).
=================================  ===========  ==============================================
"""

from __future__ import annotations

import logging
import os
import uuid
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

DEFAULT_FILE_DIR = "otel-verl-telemetry"

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
