"""Every span, metric and attribute name otel-verl emits, in one place.

Official semantic conventions are used where they fit (``service.*``, ``host.*``,
``process.*``, ``gen_ai.*``, ``hw.gpu.*``); everything RL-specific lives in the
``verl.*`` namespace. A metric's name is declared once, with its instrument (kind, unit,
buckets, attributes), in ``otel_verl.instruments.catalog``; its ``M_*`` constant here is generated
from there (``scripts/gen_docs.py``). Nothing else in the package spells a telemetry name as a literal.
The documentation of every name: ``otel_verl.telemetry_catalog`` (off the runtime path).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# ---------------------------------------------------------------- instrumentation scope
SCOPE = "otel_verl"

# ---------------------------------------------------------------- resource attributes
# OpenTelemetry's resource semantic conventions (service.*, process.*, host.*, telemetry.distro.*)
RES_SERVICE_NAME = "service.name"
RES_SERVICE_INSTANCE_ID = "service.instance.id"
RES_SERVICE_VERSION = "service.version"  # the installed verl's version: the service is verl
RES_PROCESS_PID = "process.pid"
RES_HOST_NAME = "host.name"
RES_DISTRO_NAME = "telemetry.distro.name"
RES_DISTRO_VERSION = "telemetry.distro.version"
DISTRO_NAME = "otel-verl"  # the value of RES_DISTRO_NAME
SERVICE_NAME_DEFAULT = "verl"
RES_RUN_ID = "verl.run.id"
RES_PROJECT = "verl.project"
RES_EXPERIMENT = "verl.experiment"
RES_ROLE = "verl.process.role"
RES_RANK = "verl.rank"
# The resource attributes that say whose a metric series is (run, process, host): the dashboards
# and alert rules select and group by them. otel-verl copies them onto every metric point it
# exports (``process.point_identity``), so that a backend that makes no labels of resource
# attributes (Prometheus 3's default OTLP settings, Mimir, Datadog) has them as labels too.
RES_SERIES_IDENTITY = (RES_RUN_ID, RES_PROJECT, RES_EXPERIMENT, RES_ROLE, RES_RANK, RES_HOST_NAME)
# where the process runs, from the environment of its node (process/resource.py: ``FROM_ENV``);
# Kubernetes: OpenTelemetry's k8s.* conventions; Slurm has none: otel-verl's slurm.* names
RES_K8S_POD_NAME = "k8s.pod.name"
RES_K8S_POD_UID = "k8s.pod.uid"
RES_K8S_NAMESPACE_NAME = "k8s.namespace.name"
RES_K8S_NODE_NAME = "k8s.node.name"
RES_SLURM_CLUSTER_NAME = "slurm.cluster.name"
RES_SLURM_JOB_ID = "slurm.job.id"
RES_SLURM_STEP_ID = "slurm.step.id"
RES_SLURM_NODE_ID = "slurm.node.id"  # the node's index in the job's allocation

# process roles (values of RES_ROLE)
ROLE_TASKRUNNER = "taskrunner"
ROLE_WORKER = "worker"  # a verl WorkerDict actor: actor/rollout/ref/critic of one rank
ROLE_AGENT_LOOP = "agent_loop_worker"
ROLE_REWARD_WORKER = "reward_worker"  # a verl RewardLoopWorker actor (per-trajectory scoring, user reward code)
ROLE_LAUNCHER = "launcher"  # the job's driver process (python -m verl.trainer.main_ppo)
ROLE_ROLLOUT_SERVER = "rollout_server"  # an LLM server actor of a rollout replica (hooks/rollout/server.py)
ROLE_RAY_ACTOR = "ray_actor"  # a verl process no hook named (load balancer, ...): see ATTR_RAY_ACTOR_CLASS
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

# Rollout/training mismatch: verl's own comparisons of the rollout engine's token log-probs with the
# trainer's (logged when the rollout returns log-probs: rollout.calculate_log_probs, on by default)
# and the off-policy staleness of what is trained on. Exported as verl logged them, never recomputed.
ATTR_STAT = "verl.stat"  # mean | max | min | std: which statistic of the batch verl logged
ATTR_MISMATCH_MEASURE = "verl.mismatch.measure"
ATTR_STALENESS_BOUND = "verl.staleness.bound"  # lower | worst
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
SPAN_ROLLOUT_BATCH = "verl.rollout.generate"  # v0: one AgentLoopWorker.generate_sequences call
SPAN_ROLLOUT_TRAJECTORY = "verl.rollout.trajectory"  # one trajectory (prompt x rollout.n)
# one LLMServerClient.generate (engine call): named by the GenAI conventions, ``llm_call_span_name``;
# found by what it carries, ``is_llm_call`` (the name holds the model)
LEGACY_SPAN_ROLLOUT_LLM_CALL = "verl.rollout.llm_call"  # its name before: files older otel-verl wrote hold it
SPAN_ROLLOUT_TAIL = "verl.rollout.tail"  # v1 only: where the slowest-trajectory event goes
SPAN_REWARD_WORKER = "verl.reward_worker.compute_score"  # RewardLoopWorker.compute_score, child of the trajectory
SPAN_ROLLOUT_TOOL_PREFIX = "execute_tool "  # + tool name (GenAI convention span name)
EVENT_SLOWEST_TRAJECTORY = "verl.rollout.slowest_trajectory"

ATTR_ROLLOUT_SUBMIT_STEP = "verl.rollout.submit_step"  # global step when the trajectory was submitted
ATTR_ROLLOUT_SAMPLE_INDEX = "verl.rollout.sample_index"
ATTR_ROLLOUT_INDEX = "verl.rollout.index"  # 0..rollout.n-1 within the prompt's group
ATTR_ROLLOUT_VALIDATE = "verl.rollout.validate"
ATTR_ROLLOUT_STATUS = "verl.rollout.status"  # "ok" | "error" | "cancelled"
ATTR_ROLLOUT_PROMPT_TOKENS = "verl.rollout.prompt.tokens"
ATTR_ROLLOUT_RESPONSE_TOKENS = "verl.rollout.response.tokens"  # incl. tool tokens (verl's response_length)
ATTR_ROLLOUT_GENERATED_TOKENS = "verl.rollout.response.generated_tokens"  # sum(response_mask)
ATTR_ROLLOUT_NUM_TURNS = "verl.rollout.num_turns"
ATTR_ROLLOUT_REWARD = "verl.rollout.reward_score"
ATTR_ROLLOUT_BATCH_SIZE = "verl.rollout.batch_size"
ATTR_ROLLOUT_DURATION = "verl.rollout.duration"  # on the slowest-trajectory event (s)
ATTR_ROLLOUT_TAIL_RATIO = "verl.rollout.tail_ratio"
ATTR_ROLLOUT_TRAJECTORIES = "verl.rollout.trajectories"
ATTR_ROLLOUT_SLOWEST_SPAN_ID = "verl.rollout.slowest.span_id"  # on the slowest-trajectory event
ATTR_ROLLOUT_SERVER_ID = "verl.rollout.server.id"
ATTR_ROLLOUT_SERVER_WAIT = "verl.rollout.server.acquire_wait"  # s in the load balancer before a server
ATTR_ROLLOUT_TOOL_REWARD = "verl.rollout.tool.reward"
ATTR_ROLLOUT_PREEMPTIONS = "verl.rollout.preemptions"
ATTR_ROLLOUT_WEIGHT_VERSION = "verl.rollout.weight_version"  # TokenOutput.extra_fields["global_steps"]
# generation health (hooks/rollout/health.py): on the trajectory span, from its response's token ids
ATTR_ROLLOUT_REPETITION = "verl.rollout.response.repetition"  # seq-rep-4 of the response's end
ATTR_ROLLOUT_DEGENERATE = "verl.rollout.degenerate"  # the kinds below it is, if any (a sequence)
ATTR_ROLLOUT_DEGENERATE_KIND = "verl.rollout.degenerate.kind"  # on verl.rollout.degenerate_ratio
DEGENERATE_LENGTH_LIMIT = "length_limit"  # as long as rollout.response_length
DEGENERATE_EMPTY = "empty"  # no token but end-of-sequence / padding
DEGENERATE_REPETITIVE = "repetitive"  # seq-rep-4 >= 0.5
# which trajectory trees are exported (hooks/rollout/keep.py): on the trajectory span of a kept tree
ATTR_ROLLOUT_KEPT_BECAUSE = "verl.rollout.kept_because"  # slowest | error | sample
ATTR_ROLLOUT_SAMPLE_RATE = "verl.rollout.sample_rate"  # kept / eligible of its kind (1 for slowest and error)
ATTR_ROLLOUT_SLOWEST_RANK = "verl.rollout.slowest_rank"  # 1 = the slowest of its step in its worker
ATTR_ROLLOUT_TREE_DROPPED = "verl.rollout.tree.dropped_spans"  # spans of the tree left out by a bound
KEPT_SLOWEST = "slowest"
KEPT_ERROR = "error"
KEPT_SAMPLE = "sample"
# on the slowest-trajectory event: the trees its worker kept and dropped in that step
ATTR_ROLLOUT_SLOWEST_TRACE_ID = "verl.rollout.slowest.trace_id"
ATTR_ROLLOUT_KEPT_PREFIX = "verl.rollout.kept."  # + slowest / error / sample: trees kept for each reason
ATTR_ROLLOUT_NOT_KEPT = "verl.rollout.not_kept"  # trajectories whose tree was not exported
# the TaskRunner's side of a dispatch to the agent-loop workers (hooks/rollout/dispatch.py)
SPAN_ROLLOUT_DISPATCH = "verl.rollout.dispatch"
ATTR_ROLLOUT_WORKERS = "verl.rollout.workers"  # agent-loop workers the batch goes to
ATTR_ROLLOUT_QUEUED = "verl.rollout.queued"  # s from the dispatch to the first worker starting the batch (v0)
ATTR_ROLLOUT_QUEUED_MAX = "verl.rollout.queued_max"  # ... to the last one
STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_CANCELLED = "cancelled"

# official GenAI conventions (https://opentelemetry.io/docs/specs/semconv/gen-ai/)
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
# verl's agent loop sends the engine one already templated prompt as token ids and gets its
# continuation back (a completions call), not chat messages nor multimodal content parts
GEN_AI_OPERATION_TEXT_COMPLETION = "text_completion"
GEN_AI_OPERATION_EXECUTE_TOOL = "execute_tool"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"  # rollout backend: vllm, sglang, trtllm, ...
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"  # the model the rollout serves (hooks/rollout/llm.py)
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"  # the engine's prefix-cache hits
GEN_AI_REQUEST_TOP_K = "gen_ai.request.top_k"
GEN_AI_REQUEST_SEED = "gen_ai.request.seed"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"  # verl's request id of the trajectory (its sticky session)
GEN_AI_RESPONSE_ID = "gen_ai.response.id"  # the id the engine knows the call by (``_vllm_request_id``)
ATTR_ERROR_TYPE = "error.type"  # the failed call's exception class (general error conventions)
ATTR_SERVER_ADDRESS = "server.address"  # the engine replica's HTTP server (general server conventions)
ATTR_SERVER_PORT = "server.port"


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
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"  # on gen_ai.client.token.usage: input | output
GEN_AI_TOKEN_TYPE_INPUT = "input"
GEN_AI_TOKEN_TYPE_OUTPUT = "output"
# the replica's own view (hooks/rollout/server.py: verl.rollout.replica.busy_time)
ATTR_ROLLOUT_REPLICA = "verl.rollout.replica"  # the replica rank (RolloutReplica.replica_rank)
# the rollout engine's own request span and its attributes (vLLM's names: vllm/tracing/utils.py)
SPAN_ENGINE_REQUEST = "llm_request"  # vLLM: one per request, a child of the LLM call's span
GEN_AI_LATENCY_TIME_IN_QUEUE = "gen_ai.latency.time_in_queue"  # s waiting for the scheduler
GEN_AI_LATENCY_PREFILL = "gen_ai.latency.time_in_model_prefill"  # s from scheduled to first token
GEN_AI_LATENCY_DECODE = "gen_ai.latency.time_in_model_decode"  # s from first to last token
GEN_AI_LATENCY_TTFT = "gen_ai.latency.time_to_first_token"
GEN_AI_LATENCY_E2E = "gen_ai.latency.e2e"

# ---------------------------------------------------------------- GPU (hardware semconv: hardware/gpu.md, common.md)
ATTR_HW_ID = "hw.id"  # required: the GPU UUID
ATTR_HW_TYPE = "hw.type"
HW_TYPE_GPU = "gpu"
ATTR_HW_NAME = "hw.name"
ATTR_HW_VENDOR = "hw.vendor"
ATTR_HW_MODEL = "hw.model"
ATTR_HW_DRIVER_VERSION = "hw.driver_version"
ATTR_HW_GPU_TASK = "hw.gpu.task"
GPU_TASK_GENERAL = "general"
GPU_TASK_ENCODER = "encoder"
GPU_TASK_DECODER = "decoder"
ATTR_GPU_INDEX = "verl.gpu.index"  # the device's NVML (physical) index on its host
# process.* metrics of opentelemetry-instrumentation-system-metrics kept in worker processes
SYSTEM_METRICS_CONFIG = {
    "process.cpu.time": ["user", "system"],
    "process.cpu.utilization": None,
    "process.memory.usage": None,
    "process.memory.virtual": None,
    "process.thread.count": None,
}

# ---------------------------------------------------------------- logs and sampled generations
EVENT_ROLLOUT_SAMPLE = "verl.rollout.sample"  # log record event name, body {prompt, response}
ATTR_SAMPLE_REWARD = "verl.sample.reward"  # the sample's sequence score (token_level_scores summed)
ATTR_SAMPLE_INDEX = "verl.sample.index"  # position of the sample in the step's batch
ATTR_SAMPLE_PICKED_BECAUSE = "verl.sample.picked_because"  # a degenerate kind above, or:
PICKED_FIRST = "first"  # no (more) degenerate response in the batch: the first ones, in batch order
ATTR_DATA_SOURCE = "verl.data_source"  # the dataset's data_source column
SAMPLE_BODY_PROMPT = "prompt"
SAMPLE_BODY_RESPONSE = "response"

# ---------------------------------------------------------------- run configuration (verl.init span)
ATTR_CONFIG = "verl.config"  # verl's resolved config as nested JSON, secrets redacted (otel_verl.redact)
CONFIG_MAX_BYTES = 32 * 1024  # cap of that attribute (verl 0.9.1's full PPO config is about 25 KB)
CONFIG_TRUNCATED_KEY = "_otel_verl_dropped"  # in the JSON when entries had to be left out for the cap

# ---------------------------------------------------------------- v1 rollout links
SPAN_GEN = SPAN_STAGE_PREFIX + "gen"  # the stage span v1 trajectory spans link to (link attribute verl.step)

# ---------------------------------------------------------------- guard (rules over verl's per-step values)
ATTR_TIME_CATEGORY = "verl.time.category"
# its values: where a step's time went (hooks/accounting.py), each second of the step in one
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
ATTR_TIME_PREFIX = "verl.time."  # + category: on the verl.step span
SPAN_REPLICAS_PREFIX = "verl.replicas."  # + sleep, abort, update_weights, ... (hooks/replicas.py)
ATTR_REPLICAS_COUNT = "verl.replicas.count"  # rollout replicas the call drives
SPAN_WAIT = "verl.wait"  # the trainer waiting (hooks/waits.py), child of the stage it waits in
ATTR_WAIT_FOR = "verl.wait.for"  # what is waited for: rollouts, ...
ATTR_WAIT_SOURCE = "verl.wait.source"  # the verl call that waits: replay_buffer.sample, ...
ATTR_WAIT_PARTITION = "verl.wait.partition"  # v1 replay buffer partition: train / val
WAIT_ROLLOUTS = "rollouts"  # verl.wait.for: v1 replay buffer waiting for finished prompt groups
WAIT_AGENT_LOOP_WORKERS = "agent_loop_workers"  # verl.wait.for: the workers to start the dispatched batch
ATTR_WAIT_POLL_LAG = "verl.wait.poll_lag"  # s of the wait after its rollouts were all done (hooks/poll_lag.py)
ATTR_WAIT_POLL_INTERVAL = "verl.wait.poll_interval"  # s between the replay buffer's polls of TransferQueue
# what a v1 replay-buffer wait waits for (hooks/waiting_for.py): its last poll's prompt groups per status
ATTR_WAIT_PENDING = "verl.wait.pending"  # groups sampled, not started
ATTR_WAIT_RUNNING = "verl.wait.running"
ATTR_WAIT_FINISHED = "verl.wait.finished"
ATTR_WAIT_FAILED = "verl.wait.failed"  # verl's status "failure"
ATTR_WAIT_NEEDED = "verl.wait.needed"  # finished groups the sample needs (its batch size)
ATTR_WAIT_POLLS = "verl.wait.polls"  # polls that found too few finished groups
ATTR_WAIT_ELAPSED = "verl.wait.elapsed"  # s the wait has lasted so far
EVENT_WAIT_STILL_WAITING = "verl.wait.still_waiting"  # span event on a long verl.wait: the oldest groups in flight
ATTR_WAIT_OLDEST_UIDS = "verl.wait.oldest.uids"  # their prompt uids (TransferQueue keys), oldest first
ATTR_WAIT_OLDEST_STATES = "verl.wait.oldest.states"  # pending | running, per uid
ATTR_WAIT_OLDEST_STEPS = "verl.wait.oldest.steps"  # the step each was sampled for
ATTR_WAIT_OLDEST_AGES = "verl.wait.oldest.ages"  # s each has been running (0: pending)
ATTR_WAIT_OLDEST_REPLICAS = "verl.wait.oldest.replicas"  # the server id each was sent to ("": not said)
ATTR_WAIT_OLDEST_SCANNED = "verl.wait.oldest.scanned"  # in-flight groups looked at to pick them
ATTR_POOL_ROLE = "verl.pool.role"  # actor | rollout | ref | critic | reward
ATTR_POOL_STATE = "verl.pool.state"  # busy | waiting | idle
ATTR_POOL_PREFIX = "verl.pool."  # + role.state: on the verl.step span
# goodput: each step's seconds per role in four buckets (instruments/goodput.py, docs/time.md)
ATTR_GOODPUT_ROLE = "verl.goodput.role"  # trainer | rollout
ATTR_GOODPUT_BUCKET = "verl.goodput.bucket"  # productive | overhead | idle | wasted
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
SPAN_GUARD = "verl.guard"  # child of the step's span: verl logs a step's values after that span ended
EVENT_GUARD_TRIGGERED = "verl.guard.triggered"  # span event and log record event name
ATTR_GUARD_RULE = "verl.guard.rule"
ATTR_GUARD_ACTION = "verl.guard.action"  # record | alert | checkpoint | stop (config.GUARD_RULE_ACTIONS)
ATTR_GUARD_VALUE = "verl.guard.value"
ATTR_GUARD_LIMIT = "verl.guard.limit"  # the rule's threshold / fraction / ratio / factor
ATTR_GUARD_BASELINE = "verl.guard.baseline"
ATTR_GUARD_CHECKPOINT = "verl.guard.checkpoint"  # the folder verl saved to, when the action saved one

# ---------------------------------------------------------------- stall doctor
EVENT_TRAINING_STALLED = "verl.training.stalled"  # log record (TaskRunner) when a stall starts
EVENT_TRAINING_RESUMED = "verl.training.resumed"  # log record when a step finishes again
EVENT_STALL_STACKS = "verl.stall.stacks"  # log record per process: body = the stacks of all its threads
ATTR_STALL_EPISODE = "verl.stall.episode"  # 1, 2, ... per run
ATTR_STALL_SECONDS = "verl.stall.seconds"  # how long no step had finished
ATTR_RAY_ACTOR_CLASS = "ray.actor.class"  # the Ray actor class of the reporting process
# The stall doctor's records also carry their event name as this attribute (semconv's deprecated
# predecessor of the LogRecord EventName field): Loki 3.7 drops the field but stores attributes as
# structured metadata (``event_name``), and VictoriaLogs stores it as a field (docs/stall-doctor.md).
ATTR_EVENT_NAME = "event.name"

# ---------------------------------------------------------------- otel-verl's own cost (process.overhead)
ATTR_OVERHEAD_COMPONENT = "otel_verl.component"
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
ATTR_DROPPED_KIND = "otel_verl.dropped.kind"
DROPPED_STEP = "step"  # a step's logged values, never recorded (the recorder queue was full)
DROPPED_METRIC_EXPORT = "metric_export"  # a collected metric batch, never exported (the export queue was full)
DROPPED_SPAN_TREE = "span_tree"  # a span of an undecided rollout tree, beyond the hold-back bound
DROPPED_SPOOL = "spool"  # a spooled export batch, dropped from the full on-disk spool (spool.store)
DROPPED_KINDS = (DROPPED_STEP, DROPPED_METRIC_EXPORT, DROPPED_SPAN_TREE, DROPPED_SPOOL)

# ---------------------------------------------------------------- the on-disk spool (spool.store)
ATTR_SIGNAL = "otel_verl.signal"  # traces | metrics | logs
ATTR_SPOOL_OUTCOME = "otel_verl.spool.outcome"
SPOOL_SPOOLED = "spooled"  # an export batch the endpoint did not take, written to the spool
SPOOL_RESENT = "resent"  # a spooled batch the endpoint took later (this process's or one it adopted)
SPOOL_DROPPED = "dropped"  # a spooled batch lost: the spool was full (oldest first), unwritable or unreadable
SPOOL_REJECTED = "rejected"  # a spooled batch the endpoint refused for good when re-sent (400, 413, INVALID_ARGUMENT)
# a re-send the endpoint refused for a configuration reason (401, 403, 404, UNAUTHENTICATED, ...): the batch is kept
SPOOL_REFUSED = "refused"
SPOOL_OUTCOMES = (SPOOL_SPOOLED, SPOOL_RESENT, SPOOL_DROPPED, SPOOL_REJECTED, SPOOL_REFUSED)
SIGNALS = ("traces", "metrics", "logs")
