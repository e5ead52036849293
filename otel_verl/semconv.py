"""Every span, event, metric and attribute name otel-verl emits, in one place.

Official semantic conventions are used where they fit (``service.*``, ``host.*``,
``process.*``, ``gen_ai.*``, ``hw.gpu.*``); everything RL-specific lives in the
``verl.*`` namespace. A metric's name is declared once, with its instrument (kind, unit,
buckets, attributes), in ``otel_verl.instruments.catalog``; its ``M_*`` constant here is generated
from there (``scripts/gen_docs.py``). A span's, event's or attribute's name is declared once, with its
type, where it appears and what it means, in ``otel_verl.telemetry_catalog`` (documentation, off the
runtime path); its constant here is generated from there too. This module holds the constants and
what the code needs besides: the values of attributes, verl's logged keys, the rules on names.
Nothing else in the package spells a telemetry name as a literal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# ---------------------------------------------------------------- instrumentation scope
SCOPE = "otel_verl"

# ---------------------------------------------------------------- span, event and attribute names (generated)
# The name of every span, span event and attribute (resource attributes included), from its one
# declaration in ``telemetry_catalog`` (its type, where it appears and what it means there): written by
# ``scripts/gen_docs.py`` (``--check``: current). A pattern's constant (``*_PREFIX``) is its part before ``<``.
# BEGIN generated span, event and attribute names
RES_SERVICE_NAME = "service.name"
RES_SERVICE_INSTANCE_ID = "service.instance.id"
RES_SERVICE_VERSION = "service.version"
RES_RUN_ID = "verl.run.id"
RES_PROJECT = "verl.project"
RES_EXPERIMENT = "verl.experiment"
RES_ROLE = "verl.process.role"
RES_RANK = "verl.rank"
RES_PROCESS_PID = "process.pid"
RES_HOST_NAME = "host.name"
RES_K8S_POD_NAME = "k8s.pod.name"
RES_K8S_POD_UID = "k8s.pod.uid"
RES_K8S_NAMESPACE_NAME = "k8s.namespace.name"
RES_K8S_NODE_NAME = "k8s.node.name"
RES_SLURM_CLUSTER_NAME = "slurm.cluster.name"
RES_SLURM_JOB_ID = "slurm.job.id"
RES_SLURM_STEP_ID = "slurm.step.id"
RES_SLURM_NODE_ID = "slurm.node.id"
RES_DISTRO_NAME = "telemetry.distro.name"
RES_DISTRO_VERSION = "telemetry.distro.version"
ATTR_STEP = "verl.step"
ATTR_EPOCH = "verl.epoch"
ATTR_STAGE = "verl.stage"
ATTR_DRIVER = "verl.driver"
ATTR_TRAINER_CLASS = "verl.trainer.class"
ATTR_VALIDATION_INITIAL = "verl.validation.initial"
ATTR_WORKER_METHOD = "verl.worker.method"
ATTR_WORKER_CLASS = "verl.worker.class"
ATTR_CONFIG = "verl.config"
ATTR_TIME_PREFIX = "verl.time."
ATTR_TIME_CATEGORY = "verl.time.category"
ATTR_POOL_PREFIX = "verl.pool."
ATTR_POOL_ROLE = "verl.pool.role"
ATTR_POOL_STATE = "verl.pool.state"
ATTR_GOODPUT_ROLE = "verl.goodput.role"
ATTR_GOODPUT_BUCKET = "verl.goodput.bucket"
ATTR_WAIT_FOR = "verl.wait.for"
ATTR_WAIT_SOURCE = "verl.wait.source"
ATTR_WAIT_PARTITION = "verl.wait.partition"
ATTR_WAIT_POLL_INTERVAL = "verl.wait.poll_interval"
ATTR_WAIT_POLL_LAG = "verl.wait.poll_lag"
ATTR_WAIT_PENDING = "verl.wait.pending"
ATTR_WAIT_RUNNING = "verl.wait.running"
ATTR_WAIT_FINISHED = "verl.wait.finished"
ATTR_WAIT_FAILED = "verl.wait.failed"
ATTR_WAIT_NEEDED = "verl.wait.needed"
ATTR_WAIT_POLLS = "verl.wait.polls"
ATTR_WAIT_ELAPSED = "verl.wait.elapsed"
ATTR_WAIT_OLDEST_UIDS = "verl.wait.oldest.uids"
ATTR_WAIT_OLDEST_STATES = "verl.wait.oldest.states"
ATTR_WAIT_OLDEST_STEPS = "verl.wait.oldest.steps"
ATTR_WAIT_OLDEST_AGES = "verl.wait.oldest.ages"
ATTR_WAIT_OLDEST_REPLICAS = "verl.wait.oldest.replicas"
ATTR_WAIT_OLDEST_SCANNED = "verl.wait.oldest.scanned"
ATTR_REPLICAS_COUNT = "verl.replicas.count"
ATTR_KL_SOURCE = "verl.kl.source"
ATTR_REWARD_SOURCE = "verl.reward.source"
ATTR_METRIC_KEY = "verl.metric.key"
ATTR_STAT = "verl.stat"
ATTR_MISMATCH_MEASURE = "verl.mismatch.measure"
ATTR_STALENESS_BOUND = "verl.staleness.bound"
ATTR_ROLLOUT_SUBMIT_STEP = "verl.rollout.submit_step"
ATTR_ROLLOUT_SAMPLE_INDEX = "verl.rollout.sample_index"
ATTR_ROLLOUT_INDEX = "verl.rollout.index"
ATTR_ROLLOUT_VALIDATE = "verl.rollout.validate"
ATTR_ROLLOUT_STATUS = "verl.rollout.status"
ATTR_ROLLOUT_PROMPT_TOKENS = "verl.rollout.prompt.tokens"
ATTR_ROLLOUT_RESPONSE_TOKENS = "verl.rollout.response.tokens"
ATTR_ROLLOUT_GENERATED_TOKENS = "verl.rollout.response.generated_tokens"
ATTR_ROLLOUT_NUM_TURNS = "verl.rollout.num_turns"
ATTR_ROLLOUT_REWARD = "verl.rollout.reward_score"
ATTR_ROLLOUT_BATCH_SIZE = "verl.rollout.batch_size"
ATTR_ROLLOUT_DURATION = "verl.rollout.duration"
ATTR_ROLLOUT_TAIL_RATIO = "verl.rollout.tail_ratio"
ATTR_ROLLOUT_TRAJECTORIES = "verl.rollout.trajectories"
ATTR_ROLLOUT_SLOWEST_SPAN_ID = "verl.rollout.slowest.span_id"
ATTR_ROLLOUT_SLOWEST_TRACE_ID = "verl.rollout.slowest.trace_id"
ATTR_ROLLOUT_KEPT_BECAUSE = "verl.rollout.kept_because"
ATTR_ROLLOUT_SAMPLE_RATE = "verl.rollout.sample_rate"
ATTR_ROLLOUT_SLOWEST_RANK = "verl.rollout.slowest_rank"
ATTR_ROLLOUT_TREE_DROPPED = "verl.rollout.tree.dropped_spans"
ATTR_ROLLOUT_KEPT_PREFIX = "verl.rollout.kept."
ATTR_ROLLOUT_NOT_KEPT = "verl.rollout.not_kept"
ATTR_ROLLOUT_WORKERS = "verl.rollout.workers"
ATTR_ROLLOUT_QUEUED = "verl.rollout.queued"
ATTR_ROLLOUT_QUEUED_MAX = "verl.rollout.queued_max"
ATTR_ROLLOUT_SERVER_ID = "verl.rollout.server.id"
ATTR_ROLLOUT_SERVER_WAIT = "verl.rollout.server.acquire_wait"
ATTR_ROLLOUT_TOOL_REWARD = "verl.rollout.tool.reward"
ATTR_ROLLOUT_PREEMPTIONS = "verl.rollout.preemptions"
ATTR_ROLLOUT_WEIGHT_VERSION = "verl.rollout.weight_version"
ATTR_ROLLOUT_REPLICA = "verl.rollout.replica"
ATTR_ROLLOUT_REPETITION = "verl.rollout.response.repetition"
ATTR_ROLLOUT_DEGENERATE = "verl.rollout.degenerate"
ATTR_ROLLOUT_DEGENERATE_KIND = "verl.rollout.degenerate.kind"
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_LATENCY_TIME_IN_QUEUE = "gen_ai.latency.time_in_queue"
GEN_AI_LATENCY_PREFILL = "gen_ai.latency.time_in_model_prefill"
GEN_AI_LATENCY_DECODE = "gen_ai.latency.time_in_model_decode"
GEN_AI_LATENCY_TTFT = "gen_ai.latency.time_to_first_token"
GEN_AI_LATENCY_E2E = "gen_ai.latency.e2e"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_REQUEST_TOP_K = "gen_ai.request.top_k"
GEN_AI_REQUEST_SEED = "gen_ai.request.seed"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"
ATTR_ERROR_TYPE = "error.type"
ATTR_SERVER_ADDRESS = "server.address"
ATTR_SERVER_PORT = "server.port"
ATTR_HW_ID = "hw.id"
ATTR_HW_TYPE = "hw.type"
ATTR_HW_NAME = "hw.name"
ATTR_HW_VENDOR = "hw.vendor"
ATTR_HW_MODEL = "hw.model"
ATTR_HW_DRIVER_VERSION = "hw.driver_version"
ATTR_HW_GPU_TASK = "hw.gpu.task"
ATTR_GPU_INDEX = "verl.gpu.index"
ATTR_SAMPLE_REWARD = "verl.sample.reward"
ATTR_SAMPLE_INDEX = "verl.sample.index"
ATTR_SAMPLE_PICKED_BECAUSE = "verl.sample.picked_because"
ATTR_DATA_SOURCE = "verl.data_source"
ATTR_GUARD_RULE = "verl.guard.rule"
ATTR_GUARD_ACTION = "verl.guard.action"
ATTR_GUARD_VALUE = "verl.guard.value"
ATTR_GUARD_LIMIT = "verl.guard.limit"
ATTR_GUARD_BASELINE = "verl.guard.baseline"
ATTR_GUARD_CHECKPOINT = "verl.guard.checkpoint"
ATTR_STALL_EPISODE = "verl.stall.episode"
ATTR_STALL_SECONDS = "verl.stall.seconds"
ATTR_RAY_ACTOR_CLASS = "ray.actor.class"
ATTR_EVENT_NAME = "event.name"
ATTR_OVERHEAD_COMPONENT = "otel_verl.component"
ATTR_DROPPED_KIND = "otel_verl.dropped.kind"
ATTR_SIGNAL = "otel_verl.signal"
ATTR_SPOOL_OUTCOME = "otel_verl.spool.outcome"
SPAN_STEP = "verl.step"
SPAN_STAGE_PREFIX = "verl."
SPAN_WG_PREFIX = "verl.wg."
SPAN_WORKER_PREFIX = "verl.worker."
SPAN_INIT = "verl.init"
SPAN_VALIDATION = "verl.validation"
SPAN_WAIT = "verl.wait"
SPAN_REPLICAS_PREFIX = "verl.replicas."
SPAN_GUARD = "verl.guard"
SPAN_ROLLOUT_BATCH = "verl.rollout.generate"
SPAN_ROLLOUT_DISPATCH = "verl.rollout.dispatch"
SPAN_ROLLOUT_TRAJECTORY = "verl.rollout.trajectory"
SPAN_ENGINE_REQUEST = "llm_request"
SPAN_ROLLOUT_TOOL_PREFIX = "execute_tool "
SPAN_REWARD_WORKER = "verl.reward_worker.compute_score"
SPAN_ROLLOUT_TAIL = "verl.rollout.tail"
EVENT_SLOWEST_TRAJECTORY = "verl.rollout.slowest_trajectory"
EVENT_GUARD_TRIGGERED = "verl.guard.triggered"
EVENT_ROLLOUT_SAMPLE = "verl.rollout.sample"
EVENT_WAIT_STILL_WAITING = "verl.wait.still_waiting"
EVENT_TRAINING_STALLED = "verl.training.stalled"
EVENT_STALL_STACKS = "verl.stall.stacks"
EVENT_TRAINING_RESUMED = "verl.training.resumed"
# END generated span, event and attribute names

# ---------------------------------------------------------------- files
# OTEL_VERL_FILE_DIR's files that global providers otel-verl did not build write (a distro's, in the
# launcher: ``process.their_files``): no run identity in them, so not the run's to report; replayed.
DISTRO_FILE_PREFIX = "distro-"

# ---------------------------------------------------------------- resource
DISTRO_NAME = "otel-verl"  # the value of RES_DISTRO_NAME
SERVICE_NAME_DEFAULT = "verl"
# The resource attributes that say whose a metric series is (run, process, host): the dashboards
# and alert rules select and group by them. otel-verl copies them onto every metric point it
# exports (``process.point_identity``), so that a backend that makes no labels of resource
# attributes (Prometheus 3's default OTLP settings, Mimir, Datadog) has them as labels too.
RES_SERIES_IDENTITY = (RES_RUN_ID, RES_PROJECT, RES_EXPERIMENT, RES_ROLE, RES_RANK, RES_HOST_NAME)

# process roles (values of RES_ROLE)
ROLE_TASKRUNNER = "taskrunner"
ROLE_WORKER = "worker"  # a verl WorkerDict actor: actor/rollout/ref/critic of one rank
ROLE_AGENT_LOOP = "agent_loop_worker"
ROLE_REWARD_WORKER = "reward_worker"  # a verl RewardLoopWorker actor (per-trajectory scoring, user reward code)
ROLE_LAUNCHER = "launcher"  # the job's driver process (python -m verl.trainer.main_ppo)
ROLE_ROLLOUT_SERVER = "rollout_server"  # an LLM server actor of a rollout replica (hooks/rollout/server.py)
ROLE_RAY_ACTOR = "ray_actor"  # a verl process no hook named (load balancer, ...): see ATTR_RAY_ACTOR_CLASS
ROLE_UNKNOWN = "unknown"

# values of verl.driver
DRIVER_V0 = "v0"
DRIVER_V1 = "v1"

# ---------------------------------------------------------------- metric names (generated)
# The name of every named instrument, from its one declaration in ``instruments.catalog`` (its kind,
# unit, buckets and attributes there): written by ``scripts/gen_docs.py`` (``--check``: current).
# BEGIN generated metric names
M_TRAINING_STEP = "verl.training.step"
M_TRAINING_STEPS = "verl.training.steps"
M_LAST_STEP_TIMESTAMP = "verl.training.last_step.timestamp"
M_STAGE_DURATION = "verl.stage.duration"
M_KL = "verl.training.kl"
M_REWARD = "verl.training.reward"
M_THROUGHPUT = "verl.training.throughput"
M_ROLLOUT_PROBS_DIFF = "verl.training.rollout_probs.diff"
M_ROLLOUT_PROBS_CORRELATION = "verl.training.rollout_probs.correlation"
M_ROLLOUT_MISMATCH = "verl.training.rollout_mismatch"
M_OFF_POLICY_STALENESS = "verl.training.off_policy.staleness"
M_NONFINITE = "verl.training.nonfinite"
M_GUARD_TRIGGERED = "verl.guard.triggered"
M_TRAINING_STALLED = "verl.training.stalled"
M_STEP_TIME = "verl.step.time"
M_TRAINER_IDLE_RATIO = "verl.trainer.idle_ratio"
M_TRAINER_POLL_LAG = "verl.trainer.poll_lag"
M_POOL_TIME = "verl.pool.time"
M_ROLLOUT_IDLE_RATIO = "verl.rollout.idle_ratio"
M_GOODPUT_TIME = "verl.goodput.time"
M_GOODPUT_DROPPED_GROUPS = "verl.goodput.dropped_groups"
M_ROLLOUT_TRAJECTORY_DURATION = "verl.rollout.trajectory.duration"
M_ROLLOUT_LLM_CALL_DURATION = "verl.rollout.llm_call.duration"
M_GEN_AI_CLIENT_OPERATION_DURATION = "gen_ai.client.operation.duration"
M_GEN_AI_CLIENT_TOKEN_USAGE = "gen_ai.client.token.usage"
M_ROLLOUT_RESPONSE_TOKENS = "verl.rollout.response.tokens"
M_ROLLOUT_TAIL_RATIO = "verl.rollout.tail_ratio"
M_ROLLOUT_DEGENERATE_RATIO = "verl.rollout.degenerate_ratio"
M_ROLLOUT_REPLICA_BUSY_TIME = "verl.rollout.replica.busy_time"
M_GPU_MEMORY_USAGE = "hw.gpu.memory.usage"
M_GPU_MEMORY_LIMIT = "hw.gpu.memory.limit"
M_GPU_MEMORY_UTILIZATION = "hw.gpu.memory.utilization"
M_GPU_UTILIZATION = "hw.gpu.utilization"
M_HW_POWER = "hw.power"
M_HW_ENERGY = "hw.energy"
M_HW_TEMPERATURE = "hw.temperature"
M_PROCESS_GPU_MEMORY_USAGE = "verl.process.gpu.memory.usage"
M_OVERHEAD_CPU_TIME = "otel_verl.overhead.cpu_time"
M_TELEMETRY_DROPPED = "otel_verl.telemetry.dropped"
M_SPOOL_BATCHES = "otel_verl.spool.batches"
M_SPOOL_BYTES = "otel_verl.spool.bytes"
M_VLLM_KV_CACHE_USAGE = "vllm.kv_cache_usage_perc"
M_VLLM_REQUESTS_RUNNING = "vllm.num_requests_running"
M_VLLM_REQUESTS_WAITING = "vllm.num_requests_waiting"
M_VLLM_PREEMPTIONS = "vllm.num_preemptions"
M_VLLM_TTFT = "vllm.time_to_first_token_seconds"
# END generated metric names

# ---------------------------------------------------------------- metrics' attributes and verl's keys
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

# Rollout/training mismatch: verl's own comparisons of the rollout engine's token log-probs with the
# trainer's (logged when the rollout returns log-probs: rollout.calculate_log_probs, on by default)
# and the off-policy staleness of what is trained on. Exported as verl logged them, never recomputed.
PROBS_DIFF_KEYS = {f"training/rollout_probs_diff_{stat}": stat for stat in ("mean", "max", "std")}
PROBS_CORRELATION_KEY = "training/rollout_actor_probs_pearson_corr"
MISMATCH_MEASURES = ("kl", "k3_kl", "log_ppl_abs_diff", "chi2_token", "chi2_seq")
# rollout_corr/<measure>: the trainer's (decoupled mode); actor/rollout_corr/<measure>: the actor's (bypass mode)
MISMATCH_KEYS = {
    f"{prefix}rollout_corr/{measure}": measure for prefix in ("", "actor/") for measure in MISMATCH_MEASURES
}
STALENESS_KEYS = {
    f"training/off_policy/trajectory_staleness{suffix}/{stat}": (bound, stat)
    for suffix, bound in (("", "lower"), ("_worst", "worst"))
    for stat in ("mean", "max", "min")
}
STEP_KEY = "training/global_step"  # verl's step number: carried by verl.training.step, not forwarded again
TIMING_PREFIX = "timing_s/"  # verl's per-step stage seconds: feeds M_STAGE_DURATION (see stage_of)


def stage_of(key: str) -> str | None:
    """The stage a logged key times (``timing_s/gen`` -> ``gen``), else None.

    verl logs its stage timers as ``timing_s/<stage>``; under the same prefix the v0 driver also
    logs the agent loop's per-sample figures (``timing_s/agent_loop/generate_sequences/max``,
    ``.../num_preempted/min`` (a count, -1 when unknown), ``.../slowest/prompt_length`` (tokens)).
    Those are not stages: they stay generic gauges only, and the rollout histograms count every
    sample's duration themselves.
    """
    if not key.startswith(TIMING_PREFIX):
        return None
    name = key[len(TIMING_PREFIX) :]
    return name if name and "/" not in name else None


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


# ---------------------------------------------------------------- rollout (agent-loop workers)
# the LLM call span's name before ``llm_call_span_name``: files older otel-verl wrote hold it
LEGACY_SPAN_ROLLOUT_LLM_CALL = "verl.rollout.llm_call"

# generation health (hooks/rollout/health.py): on the trajectory span, from its response's token ids
DEGENERATE_LENGTH_LIMIT = "length_limit"  # as long as rollout.response_length
DEGENERATE_EMPTY = "empty"  # no token but end-of-sequence / padding
DEGENERATE_REPETITIVE = "repetitive"  # seq-rep-4 >= 0.5
# the guard's own keys beside verl's values of a step (hooks/guard/generation.py): each kind's share of
# the training batch's responses, measured in the TaskRunner; keys verl never logs
GUARD_DEGENERATE_KEYS = {
    kind: f"otel_verl/degenerate_ratio/{kind}"
    for kind in (DEGENERATE_LENGTH_LIMIT, DEGENERATE_EMPTY, DEGENERATE_REPETITIVE)
}
# which trajectory trees are exported (hooks/rollout/keep.py): on the trajectory span of a kept tree
KEPT_SLOWEST = "slowest"
KEPT_ERROR = "error"
KEPT_SAMPLE = "sample"
# values of verl.rollout.status
STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_CANCELLED = "cancelled"

# official GenAI conventions (https://opentelemetry.io/docs/specs/semconv/gen-ai/)
# verl's agent loop sends the engine one already templated prompt as token ids and gets its
# continuation back (a completions call), not chat messages nor multimodal content parts
GEN_AI_OPERATION_TEXT_COMPLETION = "text_completion"
GEN_AI_OPERATION_EXECUTE_TOOL = "execute_tool"


def llm_call_span_name(model: str | None) -> str:
    """The span name of one LLM call, by the GenAI conventions: ``{gen_ai.operation.name}
    {gen_ai.request.model}`` (``text_completion Qwen/Qwen3-8B``), the operation alone when the model
    is unknown. Backends with LLM views (and people reading a trace) key on this form."""
    return f"{GEN_AI_OPERATION_TEXT_COMPLETION} {model}" if model else GEN_AI_OPERATION_TEXT_COMPLETION


def is_llm_call(name: str, attributes: Mapping[str, Any] | None) -> bool:
    """Whether a span is otel-verl's span of one LLM call (``LLMServerClient.generate``).

    By what it carries, not by its name (which holds the model): the GenAI operation
    ``text_completion`` together with otel-verl's own ``verl.rollout.submit_step``, so that a user's
    own GenAI spans (an OpenAI client in a tool) and the engine's request span are not taken for
    one; or ``LEGACY_SPAN_ROLLOUT_LLM_CALL``, the name older otel-verl gave it, so that telemetry it
    wrote still reads. The one test every reader of LLM-call spans uses.
    """
    if name == LEGACY_SPAN_ROLLOUT_LLM_CALL:
        return True
    if not attributes:
        return False
    return (
        attributes.get(GEN_AI_OPERATION_NAME) == GEN_AI_OPERATION_TEXT_COMPLETION
        and ATTR_ROLLOUT_SUBMIT_STEP in attributes
    )


# on the GenAI client metrics (gen-ai-metrics.md), recorded once per LLM call
GEN_AI_TOKEN_TYPE_INPUT = "input"
GEN_AI_TOKEN_TYPE_OUTPUT = "output"

# ---------------------------------------------------------------- GPU (hardware semconv: hardware/gpu.md, common.md)
HW_TYPE_GPU = "gpu"
GPU_TASK_GENERAL = "general"
GPU_TASK_ENCODER = "encoder"
GPU_TASK_DECODER = "decoder"
# process.* metrics of opentelemetry-instrumentation-system-metrics kept in worker processes
SYSTEM_METRICS_CONFIG = {
    "process.cpu.time": ["user", "system"],
    "process.cpu.utilization": None,
    "process.memory.usage": None,
    "process.memory.virtual": None,
    "process.thread.count": None,
}

# ---------------------------------------------------------------- logs and sampled generations
PICKED_FIRST = "first"  # no (more) degenerate response in the batch: the first ones, in batch order
SAMPLE_BODY_PROMPT = "prompt"
SAMPLE_BODY_RESPONSE = "response"

# ---------------------------------------------------------------- run configuration (verl.init span)
CONFIG_MAX_BYTES = 32 * 1024  # cap of verl.config (verl 0.9.1's full PPO config is about 25 KB)
CONFIG_TRUNCATED_KEY = "_otel_verl_dropped"  # in the JSON when entries had to be left out for the cap

# ---------------------------------------------------------------- v1 rollout links
SPAN_GEN = SPAN_STAGE_PREFIX + "gen"  # the stage span v1 trajectory spans link to (link attribute verl.step)

# ---------------------------------------------------------------- guard (rules over verl's per-step values)
# verl.time.category's values: where a step's time went (hooks/accounting.py), each second of the step in one
TIME_ROLLOUT = "rollout"
TIME_WAITING = "waiting"
TIME_POLL_LAG = "poll_lag"
TIME_TRAINING = "training"
TIME_WEIGHT_SYNC = "weight_sync"
TIME_CHECKPOINT = "checkpoint"
TIME_VALIDATION = "validation"
TIME_DRIVER = "driver"
TIME_OTHER = "other"
TIME_CATEGORIES = (
    TIME_ROLLOUT,
    TIME_WAITING,
    TIME_POLL_LAG,
    TIME_TRAINING,
    TIME_WEIGHT_SYNC,
    TIME_CHECKPOINT,
    TIME_VALIDATION,
    TIME_DRIVER,
    TIME_OTHER,
)
WAIT_ROLLOUTS = "rollouts"  # verl.wait.for: v1 replay buffer waiting for finished prompt groups
WAIT_AGENT_LOOP_WORKERS = "agent_loop_workers"  # verl.wait.for: the workers to start the dispatched batch
# goodput: each step's seconds per role in four buckets (instruments/goodput.py, docs/time.md)
GOODPUT_TRAINER = "trainer"
GOODPUT_ROLLOUT = "rollout"
GOODPUT_PRODUCTIVE = "productive"
GOODPUT_OVERHEAD = "overhead"
GOODPUT_IDLE = "idle"
GOODPUT_WASTED = "wasted"
# verl 0.9.1's counts of prompt groups generated and not trained on in a step (v1 replay buffer: DAPO
# filter_groups, its surplus discarded, stale off-policy groups, failed groups refilled); logged only in
# the steps that had some
DROPPED_GROUP_KEYS = (
    "training/filter_groups/evicted_samples",
    "training/filter_groups/discarded_surplus_samples",
    "training/off_policy/evicted_samples",
    "training/rollout_failure/evicted_samples",
)
ABORTED_RATIO_KEY = "response/aborted_ratio"  # verl's share of the trained batch's samples with no response

# ---------------------------------------------------------------- otel-verl's own cost (process.overhead)
COMPONENT_RECORDER = "recorder"  # otel-verl-record: recording a step's values into the SDK, collecting
COMPONENT_EXPORTER = "exporter"  # otel-verl-metrics, -export-* and the SDK's batch span/log processors: exporting
COMPONENT_FLUSHER = "flusher"  # otel-verl-flusher / otel-verl-flush: span flushes, bounded flush/shutdown
COMPONENT_WATCHDOG = "watchdog"  # otel-verl-stall-watch (TaskRunner)
COMPONENT_STALL_REPORTER = "stall_reporter"  # otel-verl-stall (every verl process)
COMPONENT_HOOKS = "hooks"  # our wrappers' own work on verl's threads (``_hook_clock``)
COMPONENT_OTHER = "other"  # any other otel-verl thread
OVERHEAD_COMPONENTS = (
    COMPONENT_RECORDER,
    COMPONENT_EXPORTER,
    COMPONENT_FLUSHER,
    COMPONENT_WATCHDOG,
    COMPONENT_STALL_REPORTER,
    COMPONENT_HOOKS,
)

# An observable instrument that never reports a point: its callback records the histogram values the
# agent loop queued (instruments.deferred), at the start of each collection. Not a metric.
DEFERRED_RECORDER = "otel_verl.deferred_records"

# ---------------------------------------------------------------- what otel-verl had to drop (instruments.drops)
DROPPED_STEP = "step"  # a step's logged values, never recorded (the recorder queue was full)
DROPPED_METRIC_EXPORT = "metric_export"  # a collected metric batch, never exported (the export queue was full)
DROPPED_SPAN_TREE = "span_tree"  # a span of an undecided rollout tree, beyond the hold-back bound
DROPPED_SPOOL = "spool"  # a spooled export batch, dropped from the full on-disk spool (spool.store)
DROPPED_KINDS = (DROPPED_STEP, DROPPED_METRIC_EXPORT, DROPPED_SPAN_TREE, DROPPED_SPOOL)

# ---------------------------------------------------------------- the on-disk spool (spool.store)
SPOOL_SPOOLED = "spooled"  # an export batch the endpoint did not take, written to the spool
SPOOL_RESENT = "resent"  # a spooled batch the endpoint took later (this process's or one it adopted)
SPOOL_DROPPED = "dropped"  # a spooled batch lost: the spool was full (oldest first), unwritable or unreadable
SPOOL_REJECTED = "rejected"  # a spooled batch the endpoint refused for good when re-sent (400, 413, INVALID_ARGUMENT)
# a re-send the endpoint refused for a configuration reason (401, 403, 404, UNAUTHENTICATED, ...): the batch is kept
SPOOL_REFUSED = "refused"
SPOOL_OUTCOMES = (SPOOL_SPOOLED, SPOOL_RESENT, SPOOL_DROPPED, SPOOL_REJECTED, SPOOL_REFUSED)
SIGNALS = ("traces", "metrics", "logs")
