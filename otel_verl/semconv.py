"""Every span, metric and attribute name otel-verl emits, in one place.

Official semantic conventions are used where they fit (``service.*``, ``host.*``,
``process.*``, ``gen_ai.*``, ``hw.gpu.*``); everything RL-specific lives in the
``verl.*`` namespace. Nothing else in the package spells a telemetry name as a literal.
"""

from __future__ import annotations

import re

# ---------------------------------------------------------------- instrumentation scope
SCOPE = "otel_verl"

# ---------------------------------------------------------------- resource attributes
SERVICE_NAME_DEFAULT = "verl"
RES_RUN_ID = "verl.run.id"
RES_PROJECT = "verl.project"
RES_EXPERIMENT = "verl.experiment"
RES_ROLE = "verl.process.role"
RES_RANK = "verl.rank"
RES_VERL_VERSION = "verl.version"

# process roles (values of RES_ROLE)
ROLE_LAUNCHER = "launcher"
ROLE_TASKRUNNER = "taskrunner"
ROLE_ACTOR_ROLLOUT = "actor_rollout"
ROLE_WORKER = "worker"  # a verl WorkerDict actor: actor/rollout/ref/critic of one rank
ROLE_AGENT_LOOP = "agent_loop_worker"
ROLE_REWARD = "reward_worker"
ROLE_UNKNOWN = "unknown"

# ---------------------------------------------------------------- spans
SPAN_STEP = "verl.step"  # root of one training step's trace
SPAN_STAGE_PREFIX = "verl."  # + timer name: verl.gen, verl.update_actor, ...
SPAN_INIT = "verl.init"  # worker/model start-up of a run (trainer.init / init_workers)
SPAN_VALIDATION = "verl.validation"  # validation outside a timed stage (val_before_train)
SPAN_WG_PREFIX = "verl.wg."  # + method: driver side of a worker-group call
SPAN_WORKER_PREFIX = "verl.worker."  # + method: the call inside one worker rank

# ---------------------------------------------------------------- span attributes
ATTR_STEP = "verl.step"
ATTR_EPOCH = "verl.epoch"
ATTR_STAGE = "verl.stage"
ATTR_DRIVER = "verl.driver"  # "v0" (RayPPOTrainer) or "v1" (PPOTrainer)
ATTR_TRAINER_CLASS = "verl.trainer.class"
ATTR_VALIDATION_INITIAL = "verl.validation.initial"
ATTR_WORKER_METHOD = "verl.worker.method"
ATTR_WORKER_CLASS = "verl.worker.class"

DRIVER_V0 = "v0"
DRIVER_V1 = "v1"

# ---------------------------------------------------------------- metrics (named instruments)
M_TRAINING_STEP = "verl.training.step"
M_TRAINING_STEPS = "verl.training.steps"
M_LAST_STEP_TIMESTAMP = "verl.training.last_step.timestamp"
M_STAGE_DURATION = "verl.stage.duration"
M_KL = "verl.training.kl"
M_REWARD = "verl.training.reward"
M_THROUGHPUT = "verl.training.throughput"
M_NONFINITE = "verl.training.nonfinite"

# metric attributes
ATTR_KL_SOURCE = "verl.kl.source"
ATTR_REWARD_SOURCE = "verl.reward.source"
ATTR_METRIC_KEY = "verl.metric.key"

# verl's logged key -> (named instrument, attribute key, attribute value).
# The same value is also exported under its generic name (see ``metric_name``).
KL_KEYS = {
    "actor/kl_loss": "kl_loss",
    "actor/ppo_kl": "ppo_kl",
    "actor/reward_kl_penalty": "reward_kl_penalty",
}
REWARD_KEYS = {
    "critic/score/mean": "score",
    "critic/rewards/mean": "rewards",
}
THROUGHPUT_KEY = "perf/throughput"

# ---------------------------------------------------------------- generic metric name rule
METRIC_PREFIX = "verl."
_INVALID = re.compile(r"[^A-Za-z0-9_.\-]")
_MAX_NAME = 255


def metric_name(key: str) -> str:
    """Map a key verl logs to the OTel instrument that carries it.

    ``"verl."`` + the key with ``/`` replaced by ``.`` and every character outside
    ``[A-Za-z0-9_.-]`` replaced by ``_``, cut to 255 characters (the OTel limit):
    ``actor/kl_loss`` -> ``verl.actor.kl_loss``,
    ``val-core/gsm8k/reward/mean@4`` -> ``verl.val-core.gsm8k.reward.mean_4``.
    """
    return (METRIC_PREFIX + _INVALID.sub("_", key.replace("/", ".")))[:_MAX_NAME]
