"""``OTEL_VERL_*`` settings, parsed once per process and never fatal, and the kill-switch rule.

A bad value (not parsable, out of its range, longer than ``MAX_VALUE_CHARS`` or with control
characters) logs one warning naming the variable, the default used instead and what is allowed;
nothing here can stop training: ``Variable.value`` catches whatever a parser raises. Standard
``OTEL_*`` variables (exporters, endpoint, headers, sampler, ``OTEL_METRIC_EXPORT_INTERVAL``, ...)
are read by the OpenTelemetry SDK itself and keep their documented meaning.

Each setting is declared once (``setting(...)`` below): its variable's name (the module constant,
``RUN_ID``), its ``Settings`` field, default, parser and meaning. ``VARIABLES`` lists them in that
order; ``Settings`` and the configuration page (``scripts/gen_docs.py``; ``tests/docs`` fails when
that page is out of date) are made from it.
"""

from __future__ import annotations

import logging
import math
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, make_dataclass
from functools import lru_cache, partial
from typing import Any

from otel_verl import per_process

_log = logging.getLogger(__name__)

# What a rule that fires does, from least to most: record it (span event, log record, counter), also
# page (the counter's verl.guard.action is what VerlGuardTriggered selects), also checkpoint, also stop.
GUARD_RULE_ACTIONS = ("record", "alert", "checkpoint", "stop")
GUARD_ACTION_ALIASES = {"observe": "alert"}  # the name `alert` had before actions were per rule
GUARD_ACTIONS = (*GUARD_RULE_ACTIONS, *GUARD_ACTION_ALIASES, "off")
GUARD_RESUMES = ("last_good", "guard")  # what trainer.resume_mode=auto picks after a guard checkpoint
ENGINE_TRACING_CHOICES = ("auto", "true", "false")

DEFAULT_FILE_DIR = "otel-verl-telemetry"
GUARD_MARKER_NAME = "otel-verl-guard-stop.json"  # in trainer.default_local_dir, next to verl's checkpoints
GUARD_CHECKPOINT_DIR = "otel-verl-guard"  # in trainer.default_local_dir: the guard's own checkpoints
GUARD_EXIT_CODE_MAX = 125  # above: the shell's "not executable", "not found" and 128 + signal
SHUTDOWN_TIMEOUT_MAX_S = 300.0  # what telemetry may add to a process's end, at most
# OTEL_VERL_SPOOL_DIR unset: /var/tmp/otel-verl-spool-<uid> (node-local, kept across reboots, one per user)
DEFAULT_SPOOL_PARENT = "/var/tmp"
SPOOL_MAX_MB_RANGE = (0.01, 1_000_000.0)  # MiB on disk of the whole spool folder

# The standard switches otel-verl obeys (read by the SDK / opentelemetry-instrument too).
DISABLED_INSTRUMENTATIONS = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"
SDK_DISABLED = "OTEL_SDK_DISABLED"
# OpenTelemetry's declarative configuration file: otel-verl does not read it (declarative_config)
CONFIG_FILE = "OTEL_CONFIG_FILE"
INSTRUMENTATION_NAME = "verl"  # our entry point name in ``opentelemetry_instrumentor``

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

MAX_VALUE_CHARS = 4096  # a longer value is no valid setting (a path's limit on Linux)
_SHOWN_CHARS = 80  # of a bad value, in its warning
# ASCII digits only: int()/float() also take "²"-like digits of other scripts, "1_000", "infinity"
_INT = re.compile(r"[+-]?[0-9]{1,18}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,18}(?:\.[0-9]{0,18})?|\.[0-9]{1,18})(?:[eE][+-]?[0-9]{1,3})?")


def _warn(name: str, raw: str | None, default: object, allowed: str = "") -> None:
    shown = raw if raw is None or len(raw) <= _SHOWN_CHARS else raw[:_SHOWN_CHARS]
    more = "..." if raw is not None and len(raw) > _SHOWN_CHARS else ""
    why = f" (allowed: {allowed})" if allowed else ""
    _log.warning("otel-verl: ignoring %s=%r%s (not valid); using the default %r%s", name, shown, more, default, why)


def _usable(raw: str) -> bool:
    """At most ``MAX_VALUE_CHARS`` printable characters (no control characters, no bytes that are not UTF-8)."""
    return len(raw) <= MAX_VALUE_CHARS and raw.isprintable()


def _get(name: str) -> str | None:
    """The variable's value, or None when unset or blank."""
    raw = os.environ.get(name)
    return None if raw is None or raw.strip() == "" else raw


def env_bool(name: str, default: bool) -> bool:
    raw = _get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    _warn(name, raw, default, "true or false")
    return default


def _number(raw: str, pattern: re.Pattern[str]) -> float | None:
    text = raw.strip()
    if pattern.fullmatch(text) is None:
        return None
    value = float(text) + 0.0  # -0 is 0
    return value if math.isfinite(value) else None


def env_float(name: str, default: float, *, minimum: float = 0.0, maximum: float = 1e9) -> float:
    """A number from ``minimum`` to ``maximum`` (decimal notation, ASCII digits)."""
    raw = _get(name)
    if raw is None:
        return default
    value = _number(raw, _FLOAT)
    if value is None or not minimum <= value <= maximum:
        _warn(name, raw, default, f"a number from {minimum:g} to {maximum:g}")
        return default
    return value


def env_int(name: str, default: int, *, minimum: int = 0, maximum: int = 10**9) -> int:
    """A whole number from ``minimum`` to ``maximum`` (ASCII digits)."""
    raw = _get(name)
    if raw is None:
        return default
    text = raw.strip()
    value = int(text) if _INT.fullmatch(text) else None
    if value is None or not minimum <= value <= maximum:
        _warn(name, raw, default, f"a whole number from {minimum} to {maximum}")
        return default
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = _get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in choices:
        return value
    _warn(name, raw, default, ", ".join(choices))
    return default


def env_guard_action(name: str, default: str) -> str:
    """One of ``GUARD_ACTIONS``, an alias (``observe``) given as the action it names."""
    value = env_choice(name, default, GUARD_ACTIONS)
    return GUARD_ACTION_ALIASES.get(value, value)


GuardActions = tuple[tuple[str, str], ...]  # (rule name or pattern, action), in the setting's order
_SHOWN_ENTRIES, _SHOWN_ENTRY_CHARS = 3, 40  # of the bad entries of OTEL_VERL_GUARD_ACTIONS, in its warning


def env_guard_actions(name: str, default: GuardActions) -> GuardActions:
    """``rule=action`` entries, comma-separated: a rule's name (or a ``*``/``?`` pattern of names) and
    one of ``GUARD_RULE_ACTIONS`` or ``off`` (the rule is not evaluated). A bad entry is named in one
    warning and left out; the good ones apply."""
    raw = _get(name)
    if raw is None:
        return default
    entries: list[tuple[str, str]] = []
    bad: list[str] = []
    for part in raw.split(","):
        if not part.strip():
            continue
        pattern, sep, action = (x.strip() for x in part.partition("="))
        action = GUARD_ACTION_ALIASES.get(action.lower(), action.lower())
        if sep and pattern and action in (*GUARD_RULE_ACTIONS, "off"):
            entries.append((pattern, action))
        else:
            bad.append(part.strip()[:_SHOWN_ENTRY_CHARS])
    if bad:
        shown = ", ".join(repr(b) for b in bad[:_SHOWN_ENTRIES]) + (", ..." if len(bad) > _SHOWN_ENTRIES else "")
        _log.warning(
            "otel-verl: ignoring %d entr%s of %s: %s (not valid: rule=action, the action one of %s); the others apply",
            len(bad),
            "y" if len(bad) == 1 else "ies",
            name,
            shown,
            ", ".join((*GUARD_RULE_ACTIONS, "off")),
        )
    return tuple(entries)


STALL_AFTER_MIN_S = 10.0  # a shorter limit would report every process's stacks every few seconds
STALL_AFTER_MAX_S = 30 * 86400.0


def env_stall_after(name: str, default: float | None = None) -> float | None:
    """``auto`` (None: derived from recent step times), ``0``/``off`` (0.0) or seconds
    from ``STALL_AFTER_MIN_S`` to ``STALL_AFTER_MAX_S``; ``default`` is auto's None, whatever is given."""
    raw = _get(name)
    if raw is None or raw.strip().lower() == "auto":
        return None
    if raw.strip().lower() in ("off", "false"):
        return 0.0
    value = _number(raw, _FLOAT)
    if value == 0.0:
        return 0.0
    if value is None or not STALL_AFTER_MIN_S <= value <= STALL_AFTER_MAX_S:
        _warn(name, raw, "auto", f"auto, off, or seconds from {STALL_AFTER_MIN_S:g} to {STALL_AFTER_MAX_S:g}")
        return None
    return value


def env_log_level(name: str, default: int) -> int:
    """A ``logging`` level given by name (``INFO``) or number (``20``, from 0 to 50)."""
    raw = _get(name)
    if raw is None:
        return default
    value = raw.strip().upper()
    if _INT.fullmatch(value) and 0 <= int(value) <= logging.CRITICAL:
        return int(value)
    level = logging.getLevelName(value)
    if isinstance(level, int):
        return level
    _warn(name, raw, logging.getLevelName(default), "a level name such as INFO, or a number from 0 to 50")
    return default


def env_str(name: str, default: str | None) -> str | None:
    """A free-form value: any non-empty string (``Variable.value`` checks its length and characters)."""
    return os.environ.get(name) or default


@dataclass(frozen=True)
class Variable:
    """One ``OTEL_VERL_*`` setting: its ``Settings`` field, default, parser ``read(name, default)``
    (whose return type is the field's), and what the configuration page says of it (``doc``;
    ``shown_default`` when the default is not a plain value; ``group``: the page's section).
    Declared once each, by ``setting`` below."""

    name: str
    field: str
    default: Any
    read: Callable[[str, Any], Any]
    doc: str
    group: str
    shown_default: str | None = None

    def value(self) -> Any:
        """The setting's value, or its default after one warning: whatever the environment holds,
        this never raises (a parser's own error included)."""
        raw = os.environ.get(self.name)
        try:
            if raw is not None and not _usable(raw):
                _warn(self.name, raw, self.default, f"at most {MAX_VALUE_CHARS} printable characters")
                return self.default
            return self.read(self.name, self.default)
        except Exception:  # noqa: BLE001 - no setting may stop otel-verl, let alone training
            _warn(self.name, raw, self.default)
            return self.default

    def default_text(self) -> str:
        """The default as the configuration page shows it."""
        if self.shown_default is not None:
            return self.shown_default
        if isinstance(self.default, bool):
            return str(self.default).lower()
        if self.field == "log_level":
            return logging.getLevelName(self.default)
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)


_DECLARED: list[Variable] = []


def setting(
    name: str,
    field: str,
    default: Any,
    read: Callable[..., Any],
    doc: str,
    group: str,
    shown_default: str | None = None,
) -> str:
    """Declare one setting (its ``Variable``, in ``VARIABLES`` in the order declared); returns its
    variable's name, the module constant every other module reads (``config.RUN_ID``)."""
    _DECLARED.append(Variable(name, field, default, read, doc, group, shown_default))
    return name


# Sections of the configuration page, in order.
GROUP_RUN = "The run and its files"
GROUP_EXPORT = "What is exported, and when"
GROUP_RAY = "Ray"
GROUP_LOGS = "Logs and sampled generations"
GROUP_GUARD = "Guard and stall doctor"
GROUPS = (GROUP_RUN, GROUP_EXPORT, GROUP_RAY, GROUP_LOGS, GROUP_GUARD)

# Every setting, declared once, in the configuration page's order: its constant (the variable's
# name), its ``Settings`` field, default, parser, and its row on that page.
RUN_ID = setting(
    "OTEL_VERL_RUN_ID",
    "run_id",
    None,
    env_str,
    "Run id shared by every process of a job (`verl.run.id`).",
    GROUP_RUN,
    "generated in the launcher",
)
UNTESTED_VERL = setting(
    "OTEL_VERL_UNTESTED_VERL",
    "untested_verl",
    True,
    env_bool,
    "On a verl outside the range otel-verl was tested with (`opentelemetry-instrument` then skips the "
    "instrumentor, one ERROR line): start anyway, each hook applied only where its target exists, what "
    "is skipped said once per hook with the versions (`otel-verl doctor` lists them before a job). "
    "`false`: otel-verl stays off on such a verl, said once.",
    GROUP_RUN,
)
PROJECT = setting(
    "OTEL_VERL_PROJECT",
    "project",
    None,
    env_str,
    "`verl.project` on every process's resource (the launcher reads `trainer.project_name` when verl "
    "calls `ray.init`); set it to override.",
    GROUP_RUN,
    "from verl's config",
)
EXPERIMENT = setting(
    "OTEL_VERL_EXPERIMENT",
    "experiment",
    None,
    env_str,
    "`verl.experiment` on every process's resource (from `trainer.experiment_name`); set it to override.",
    GROUP_RUN,
    "from verl's config",
)
FILE_DIR = setting(
    "OTEL_VERL_FILE_DIR",
    "file_dir",
    DEFAULT_FILE_DIR,
    env_str,
    "Folder for the `otlp_json_file` exporters: one `traces-`/`metrics-`/`logs-<role>-<pid>.jsonl` per "
    "process (made absolute in the launcher, so every Ray worker writes to the same folder).",
    GROUP_RUN,
    f"`./{DEFAULT_FILE_DIR}`",
)
SHUTDOWN_TIMEOUT = setting(
    "OTEL_VERL_SHUTDOWN_TIMEOUT",
    "shutdown_timeout_s",
    5.0,
    partial(env_float, maximum=SHUTDOWN_TIMEOUT_MAX_S),
    f"Seconds (0 to {SHUTDOWN_TIMEOUT_MAX_S:g}) telemetry may add to a process's end, whatever the endpoint "
    "does (the end-of-training flush and the exit shutdown share it).",
    GROUP_RUN,
)
FORWARD_METRICS = setting(
    "OTEL_VERL_FORWARD_METRICS",
    "forward_metrics",
    True,
    env_bool,
    "Export every numeric key verl logs as a `verl.<key>` gauge (the named instruments stay either way).",
    GROUP_EXPORT,
)
STEP_EXPORT = setting(
    "OTEL_VERL_STEP_EXPORT",
    "step_export",
    True,
    env_bool,
    "Export metrics at every step boundary, so no step's values are lost between export intervals.",
    GROUP_EXPORT,
)
ROLLOUT_SPANS_PER_STEP = setting(
    "OTEL_VERL_ROLLOUT_SPANS_PER_STEP",
    "rollout_spans_per_step",
    64,
    partial(env_int, minimum=-1, maximum=100_000),
    "Trajectory trees (a trajectory's span with its LLM, tool and reward worker spans and user spans "
    "under them) exported per step and agent-loop worker (at most 100000; `0` none, `-1` all), chosen "
    "when they end: the slowest first, then a uniform sample; failed or cancelled ones always, beyond "
    "it; the rollout histograms count every trajectory.",
    GROUP_EXPORT,
)
ROLLOUT_SLOWEST_PER_STEP = setting(
    "OTEL_VERL_ROLLOUT_SLOWEST_PER_STEP",
    "rollout_slowest_per_step",
    8,
    partial(env_int, minimum=1, maximum=100_000),
    "Of those, how many are the step's slowest in that worker (1 to 100000; at most the budget): "
    "`verl.rollout.kept_because=slowest`.",
    GROUP_EXPORT,
)
ENGINE_TRACING = setting(
    "OTEL_VERL_ENGINE_TRACING",
    "engine_tracing",
    "auto",
    partial(env_choice, choices=ENGINE_TRACING_CHOICES),
    "The rollout engine's own request spans under each LLM call (vLLM's `llm_request`, SGLang's request "
    "trace): `auto` and `true` carry the call's trace context to the engine and turn on what its tracing "
    "needs (vLLM: its request tracing on otel-verl's provider and its stats, `disable_log_stats=False`), "
    "for the engines that support it; `false` leaves the engine as verl configures it.",
    GROUP_EXPORT,
)
SPOOL = setting(
    "OTEL_VERL_SPOOL",
    "spool",
    True,
    env_bool,
    "`off`: no on-disk spool; a batch the OTLP endpoint does not take is lost after the SDK's own retries "
    "(as without otel-verl) ([Faults](faults.md#the-on-disk-spool)).",
    GROUP_EXPORT,
)
# spool_dir: None: ``spool_root``'s default folder
SPOOL_DIR = setting(
    "OTEL_VERL_SPOOL_DIR",
    "spool_dir",
    None,
    env_str,
    "Folder of the spools of this user's verl processes on this host (created 0700 when a first batch must "
    "wait; keep it on local disk and per user). A process's spool left behind when it died is sent by the "
    "next verl process of the host that uses this folder and sends to the same endpoint with the same "
    "headers, or by `otel-verl replay --spool DIR`.",
    GROUP_EXPORT,
    "`/var/tmp/otel-verl-spool-<uid>`",
)
SPOOL_MAX_MB = setting(
    "OTEL_VERL_SPOOL_MAX_MB",
    "spool_max_mb",
    512.0,
    partial(env_float, minimum=SPOOL_MAX_MB_RANGE[0], maximum=SPOOL_MAX_MB_RANGE[1]),
    f"MiB ({SPOOL_MAX_MB_RANGE[0]:g} to {SPOOL_MAX_MB_RANGE[1]:.0f}) on disk for the whole spool folder "
    "(every process that uses it, all signals); when full, the oldest batches a process may remove go "
    "first, then new ones are dropped (counted in "
    '`otel_verl.spool.batches{outcome="dropped"}`, one warning).',
    GROUP_EXPORT,
)
GPU_METRICS = setting(
    "OTEL_VERL_GPU_METRICS",
    "gpu_metrics",
    True,
    env_bool,
    "`hw.gpu.*` gauges in worker processes.",
    GROUP_EXPORT,
)
PROCESS_METRICS = setting(
    "OTEL_VERL_PROCESS_METRICS",
    "process_metrics",
    True,
    env_bool,
    "`process.*` CPU/memory gauges in worker processes (needs `otel-verl[system]`).",
    GROUP_EXPORT,
)
RAY_RUNTIME_ENV = setting(
    "OTEL_VERL_RAY_RUNTIME_ENV",
    "ray_runtime_env",
    True,
    env_bool,
    "Add the `OTEL_*` settings to the job's Ray `runtime_env`, so that workers on a running cluster get them.",
    GROUP_RAY,
)
RAY_RUNTIME_ENV_SECRETS = setting(
    "OTEL_VERL_RAY_RUNTIME_ENV_SECRETS",
    "ray_runtime_env_secrets",
    False,
    env_bool,
    "Also add, as they are, the `OTEL_*` variables whose name looks secret (`OTEL_EXPORTER_OTLP_*HEADERS`, "
    "client keys) or whose value holds credentials (an endpoint with `user:pass@` or `?api_key=`, secret "
    "`OTEL_RESOURCE_ATTRIBUTES` entries). Off because Ray stores and shows a job's `runtime_env`; on a "
    "running cluster, set them in the nodes' environment or turn this on.",
    GROUP_RAY,
)
OTLP_HEADERS_FILE = setting(
    "OTEL_VERL_OTLP_HEADERS_FILE",
    "otlp_headers_file",
    None,
    env_str,
    "Path of a file of OTLP headers (what `OTEL_EXPORTER_OTLP_HEADERS` holds: `authorization=Bearer%20<token>`, "
    "comma- or line-separated; or `Name: value` lines, a JSON object, or the token alone, sent as "
    "`authorization: Bearer <token>` as `otel-verl stack --token-file` has it; [Security](security.md)), "
    "read by every verl process when it builds its OTLP exporters and added to "
    "the `OTEL_EXPORTER_OTLP_*HEADERS` ones. The path travels in Ray's `runtime_env`, the token stays in the "
    "file: readable on every node, a regular file of at most 64 KiB ([Multi-node](multi-node.md)).",
    GROUP_RAY,
    "unset",
)
RAY_SYSTEM_METRICS = setting(
    "OTEL_VERL_RAY_SYSTEM_METRICS",
    "ray_system_metrics",
    False,
    env_bool,
    "Also run the generic system-metrics instrumentation that `opentelemetry-instrument` starts in every "
    "process in each of the job's Ray processes. Off: each would collect the host's `system.*` metrics; "
    "the launcher keeps one copy and verl's processes report `process.*` with their rank.",
    GROUP_RAY,
)
LOG_LEVEL = setting(
    "OTEL_VERL_LOG_LEVEL",
    "log_level",
    logging.WARNING,
    env_log_level,
    "Lowest Python log level exported (a name, or a number from 0 to 50).",
    GROUP_LOGS,
)
SAMPLES = setting(
    "OTEL_VERL_SAMPLES",
    "samples",
    False,
    env_bool,
    "Export sampled generations (prompt and response) as log records.",
    GROUP_LOGS,
)
SAMPLES_EVERY_N_STEPS = setting(
    "OTEL_VERL_SAMPLES_EVERY_N_STEPS",
    "samples_every_n_steps",
    10,
    partial(env_int, minimum=1, maximum=1_000_000),
    "Sample steps whose number is a multiple of N (1 to 1000000).",
    GROUP_LOGS,
)
SAMPLES_PER_STEP = setting(
    "OTEL_VERL_SAMPLES_PER_STEP",
    "samples_per_step",
    4,
    partial(env_int, minimum=1, maximum=10_000),
    "Generations per sampled step (degenerate responses first, then the first of the batch; 1 to 10000).",
    GROUP_LOGS,
)
SAMPLES_MAX_CHARS = setting(
    "OTEL_VERL_SAMPLES_MAX_CHARS",
    "samples_max_chars",
    2000,
    partial(env_int, minimum=1, maximum=1_000_000),
    "Prompt and response are each cut to this many characters (1 to 1000000).",
    GROUP_LOGS,
)
# guard_action: one of GUARD_RULE_ACTIONS or "off": rules that name no action of their own do this
GUARD_ACTION = setting(
    "OTEL_VERL_GUARD_ACTION",
    "guard_action",
    "alert",
    env_guard_action,
    "What the guard does when a rule fires, for the rules that name no action of their own: `record`, "
    "`alert`, `checkpoint` or `stop` (`observe` is `alert`); `off`: no rule is evaluated "
    "([Guard](guard.md#what-a-rule-does-when-it-fires)).",
    GROUP_GUARD,
    "`alert`",
)
# guard_actions: per rule, over the rules file's
GUARD_ACTIONS_BY_RULE = setting(
    "OTEL_VERL_GUARD_ACTIONS",
    "guard_actions",
    (),
    env_guard_actions,
    "Actions per rule, over the rules file's: `rule=action` entries, comma-separated, e.g. "
    "`kl_blowup=stop,grad_norm_*=alert` (`*`/`?` patterns; the last entry that names a rule wins; `off`: "
    "that rule is not evaluated); a bad entry is one warning and left out "
    "([Guard](guard.md#what-a-rule-does-when-it-fires)).",
    GROUP_GUARD,
    "none",
)
GUARD_RULES = setting(
    "OTEL_VERL_GUARD_RULES",
    "guard_rules",
    None,
    env_str,
    "Path of a rules file (YAML or JSON; a regular file of at most 1 MiB and 1000 rules, read off the "
    "training thread) replacing `otel_verl/hooks/guard/rules.yaml`; an unusable one is one warning and the "
    "built-in rules.",
    GROUP_GUARD,
    "built-in",
)
# guard_exit_code: 0: a guard stop ends the job with rc 0, as a finished run
GUARD_EXIT_CODE = setting(
    "OTEL_VERL_GUARD_EXIT_CODE",
    "guard_exit_code",
    0,
    partial(env_int, minimum=0, maximum=GUARD_EXIT_CODE_MAX),
    f"Exit status (0 to {GUARD_EXIT_CODE_MAX}) of the job's launcher after a guard `stop`, so that a "
    "scheduler (Slurm, a KubeRay job) can tell it from a finished run; `0`: rc 0, as a finished run "
    "([Guard](guard.md#a-stop-a-scheduler-can-tell-apart)).",
    GROUP_GUARD,
)
# guard_marker: None: GUARD_MARKER_NAME in the run's checkpoint folder
GUARD_MARKER = setting(
    "OTEL_VERL_GUARD_MARKER",
    "guard_marker",
    None,
    env_str,
    "File the guard writes (JSON, atomically) when it stops training: the step, the rules that fired and the "
    "exit code, for a scheduler or a wrapper script to read "
    "([Guard](guard.md#a-stop-a-scheduler-can-tell-apart)).",
    GROUP_GUARD,
    f"`<trainer.default_local_dir>/{GUARD_MARKER_NAME}`",
)
# guard_resume: "last_good": the guard's checkpoint is kept apart from verl's; "guard": saved as verl's
GUARD_RESUME = setting(
    "OTEL_VERL_GUARD_RESUME",
    "guard_resume",
    "last_good",
    partial(env_choice, choices=GUARD_RESUMES),
    "What `trainer.resume_mode=auto` resumes from after the guard checkpointed a step: `last_good`, verl's "
    f"last own checkpoint before that step (the guard's goes to `<trainer.default_local_dir>/"
    f"{GUARD_CHECKPOINT_DIR}/`), or `guard`, the guard's (saved as verl's own); verl's checkpoints are "
    "never removed for it ([Guard](guard.md#what-happens-to-verls-checkpoints)).",
    GROUP_GUARD,
)
# stall_after_s: None: auto; 0: off
STALL_AFTER = setting(
    "OTEL_VERL_STALL_AFTER",
    "stall_after_s",
    None,
    env_stall_after,
    f"Seconds ({STALL_AFTER_MIN_S:g} to {STALL_AFTER_MAX_S:.0f}, 30 days) without a finished training step "
    "before every process reports its stacks; `auto`: 10x the median step time, at least 600 s; `0`/`off`: "
    "off ([Stall doctor](stall-doctor.md)).",
    GROUP_GUARD,
    "auto",
)

# The one list settings(), ``otel-verl doctor`` and the configuration page (``scripts/gen_docs.py``) read.
VARIABLES: tuple[Variable, ...] = tuple(_DECLARED)


def _field_type(v: Variable) -> str:
    """Its parser's return annotation (``partial`` unwrapped), without ``None`` when the default is
    not None (a parser returns its default for an unset or bad value): the type of its field."""
    hint = getattr(v.read, "func", v.read).__annotations__["return"]
    return hint.removesuffix(" | None") if v.default is not None else hint


# This process's settings, one field per ``Variable`` (its ``field``, typed by its parser), in their order.
Settings = make_dataclass("Settings", [(v.field, _field_type(v)) for v in VARIABLES], frozen=True)
Settings.__module__ = __name__  # pickled by reference, shown as otel_verl.config.Settings
Settings.__doc__ = "The value of every ``OTEL_VERL_*`` setting in this process (``settings()``), by ``VARIABLES``."


@dataclass(frozen=True)
class Documented:
    """A variable otel-verl reads that is not one of its settings: a standard ``OTEL_*`` one (read by
    the SDK with its documented meaning), or one of a command's (``otel-verl stack``)."""

    name: str
    default: str
    doc: str


# The standard variables that matter most with otel-verl (the configuration page lists them).
STANDARD_VARIABLES: tuple[Documented, ...] = (
    Documented(
        "OTEL_TRACES_EXPORTER",
        "otlp",
        "`otlp`, `otlp_json_file` (files in `OTEL_VERL_FILE_DIR`), `console`, `none`; several comma-separated.",
    ),
    Documented("OTEL_METRICS_EXPORTER", "otlp", "As above, and `prometheus` (a pull endpoint per process)."),
    Documented("OTEL_LOGS_EXPORTER", "otlp", "As for traces; `none` turns logs off."),
    Documented(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "http://localhost:4317 (gRPC), http://localhost:4318 (HTTP)",
        "Where OTLP goes; each process resolves it where it runs (`localhost` is each node's own).",
    ),
    Documented("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "`grpc`, `http/protobuf` or `http/json`."),
    Documented(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "(none)",
        "`k=v,k2=v2`, e.g. `authorization=Bearer%20<token>`; kept out of Ray's `runtime_env` unless "
        "`OTEL_VERL_RAY_RUNTIME_ENV_SECRETS=true`.",
    ),
    Documented("OTEL_EXPORTER_OTLP_CERTIFICATE", "(system CAs)", "CA that signed the Collector's certificate (TLS)."),
    Documented(
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "10 (seconds)",
        "Per export, retries included; then the batch is spooled (`OTEL_VERL_SPOOL`), or dropped with the spool off.",
    ),
    Documented(
        "OTEL_TRACES_SAMPLER", "parentbased_always_on", "The SDK's sampler (`OTEL_TRACES_SAMPLER_ARG` its argument)."
    ),
    Documented(
        "OTEL_METRIC_EXPORT_INTERVAL",
        "60000 (ms)",
        "Periodic metric export; step values also go at every step boundary (`OTEL_VERL_STEP_EXPORT`).",
    ),
    Documented(
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
        "cumulative",
        "`delta` for a backend that takes delta only (Datadog): counters and histograms, step exports included.",
    ),
    Documented(
        CONFIG_FILE,
        "(none)",
        "Not read by otel-verl: verl's telemetry follows the `OTEL_*` variables; said once "
        "([Recipes](recipes.md#opentelemetrys-declarative-configuration-otel_config_file)).",
    ),
    Documented("OTEL_SERVICE_NAME", "verl", "`service.name` of every process of the job."),
    Documented(
        "OTEL_RESOURCE_ATTRIBUTES",
        "(none)",
        "`k=v,...` added to every process's resource, over otel-verl's defaults (`service.name`, `host.name`, "
        "`k8s.*`, `slurm.*`); job-wide: it reaches every Ray process with the launcher's value.",
    ),
    Documented(
        "OTEL_EXPORTER_PROMETHEUS_HOST",
        "127.0.0.1",
        "With `OTEL_METRICS_EXPORTER=prometheus`: the pull endpoint's address (`0.0.0.0` for a remote scraper).",
    ),
    Documented(
        "OTEL_EXPORTER_PROMETHEUS_PORT",
        "9464",
        "Its port (1 to 65535); each further process of the host takes the next free one (up to 32).",
    ),
    Documented("OTEL_BSP_MAX_QUEUE_SIZE", "2048", "Spans a process holds while the endpoint is away."),
    Documented("OTEL_BLRP_MAX_QUEUE_SIZE", "2048", "Log records a process holds while the endpoint is away."),
    Documented(SDK_DISABLED, "false", "`true`: the SDK makes no telemetry, and neither does otel-verl."),
    Documented(DISABLED_INSTRUMENTATIONS, "(none)", f"`{INSTRUMENTATION_NAME}` (or `*`) turns otel-verl off."),
)

# Variables of the ``otel-verl`` commands (not settings of the instrumentation).
TOOL_VARIABLES: tuple[Documented, ...] = (
    Documented(
        "OTEL_VERL_STACK_DIR",
        "`~/.local/share/otel-verl/stack`",
        "`otel-verl stack`: data, logs and state of the stack (`--data-dir`).",
    ),
    Documented(
        "OTEL_VERL_BACKENDS_DIR",
        "`~/.cache/otel-verl/backends`",
        "Where `otel-verl stack build` (`scripts/backends.sh`) puts the binaries, and where `stack up` looks last.",
    ),
    Documented(
        "OTEL_VERL_COLLECTOR_DIR",
        "the ops kit installed with otel-verl",
        "`otel-verl stack`: another folder of ops-kit configs (`--config-dir`), e.g. one `stack configs` wrote.",
    ),
)


@lru_cache(maxsize=1)
def settings() -> Settings:
    """This process's settings (read once: the environment of a running job does not change)."""
    return Settings(**{v.field: v.value() for v in VARIABLES})


# a process that just started has read none: a test's environment is read by that test, not an earlier one's
per_process.register(__name__, reset=settings.cache_clear)


def spool_root(s: Settings | None = None) -> str:
    """The folder of the on-disk spools (``otel_verl.spool.store``), absolute: ``OTEL_VERL_SPOOL_DIR``,
    else ``/var/tmp/otel-verl-spool-<uid>``: node-local disk that survives a reboot (a job's launch
    folder is often on a shared file system, ``/tmp`` often a tmpfs), one per user (never another
    user's), and a single name in ``/var/tmp`` (a name there made by another user, or a symlink,
    turns the spool off rather than being used)."""
    s = settings() if s is None else s
    if s.spool_dir:
        return os.path.abspath(s.spool_dir)
    parent = DEFAULT_SPOOL_PARENT if os.path.isdir(DEFAULT_SPOOL_PARENT) else tempfile.gettempdir()
    return os.path.join(parent, f"otel-verl-spool-{os.geteuid()}")


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
