"""Every span, span event and attribute otel-verl emits, declared once: its name, its type or kind,
where it appears and what it means; and where each metric's values come from (``SOURCES``).

Each public ``Attribute``, ``Span`` and ``Event`` of this module is the one declaration of its name:
``otel_verl.semconv``'s constant of the same name is generated from it by ``scripts/gen_docs.py``
(``--check``: current; a pattern such as ``verl.time.<category>`` gives its part before ``<``:
``ATTR_TIME_PREFIX = "verl.time."``), and so are the reference pages (``docs/generated``; the metrics
from ``instruments.catalog`` and ``instruments.prometheus``). A span or event lists the attributes it
carries; an attribute's row on the page says where it appears from those lists, its ``resource`` flag
and the instruments' attributes.

The documentation's text, off the runtime path: no module a verl process imports imports this one
(the code uses ``semconv``'s constants). Nothing here is read while a job runs.

A new attribute is one declaration here, ``ATTR_X = Attribute("verl.x", "int", "What it is.")``, named
in the ``attributes`` of the spans and events that carry it; then ``python scripts/gen_docs.py`` writes
``semconv.ATTR_X`` and the pages (a span: ``SPAN_X = Span(...)``; an event: ``EVENT_X = Event(...)``).
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_verl import semconv as s
from otel_verl.hooks import waiting_for as wf
from otel_verl.instruments import catalog as c
from otel_verl.process.resource import FROM_ENV


@dataclass(frozen=True)
class Attribute:
    name: str  # an attribute key, or a pattern with ``<...>`` (``verl.time.<category>``)
    type: str  # string, int, double, bool, string[]
    doc: str
    resource: bool = False  # on the resource of the processes that have it


@dataclass(frozen=True)
class Span:
    name: str  # a span name, or a pattern with ``<...>``
    kind: str  # internal, client, server (OpenTelemetry SpanKind)
    process: str  # the process role(s) that make it (``verl.process.role``)
    parent: str  # where it hangs in a trace
    attributes: tuple[Attribute, ...]
    doc: str


@dataclass(frozen=True)
class Event:
    name: str
    carrier: str  # "span event on ..." or "log record"
    attributes: tuple[Attribute, ...]
    doc: str


TASKRUNNER, WORKER, AGENT, REWARD, SERVER = (
    s.ROLE_TASKRUNNER,
    s.ROLE_WORKER,
    s.ROLE_AGENT_LOOP,
    s.ROLE_REWARD_WORKER,
    s.ROLE_ROLLOUT_SERVER,
)

_ROLES = ", ".join(
    f"`{r}`"
    for r in (
        s.ROLE_LAUNCHER,
        s.ROLE_TASKRUNNER,
        s.ROLE_WORKER,
        s.ROLE_AGENT_LOOP,
        s.ROLE_REWARD_WORKER,
        s.ROLE_ROLLOUT_SERVER,
        s.ROLE_RAY_ACTOR,
    )
)


def _from_env(name: str) -> Attribute:
    """A resource attribute otel-verl takes from the process's environment (``process.resource.FROM_ENV``)."""
    var = dict(FROM_ENV)[name]
    where = " (map it from the pod's downward API)." if name.startswith("k8s.") else " (Slurm sets it)."
    text = f"`{var}` of the process's environment, when set and `OTEL_RESOURCE_ATTRIBUTES` has no `{name}`" + where
    return Attribute(name, "string", text, resource=True)


# ------------------------------------------------------------ resource
RES_SERVICE_NAME = Attribute(
    "service.name",
    "string",
    f"`OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`), default `{s.SERVICE_NAME_DEFAULT}`.",
    resource=True,
)
RES_SERVICE_INSTANCE_ID = Attribute("service.instance.id", "string", "One per process (the SDK's).", resource=True)
RES_SERVICE_VERSION = Attribute(
    "service.version",
    "string",
    "The installed verl's version (`0.9.1`; what a comparison across a verl upgrade groups by), unless "
    "`OTEL_RESOURCE_ATTRIBUTES` sets one.",
    resource=True,
)
RES_RUN_ID = Attribute(
    "verl.run.id", "string", "The job's run id, shared by all its processes (`OTEL_VERL_RUN_ID`).", resource=True
)
RES_PROJECT = Attribute(
    "verl.project", "string", "verl's `trainer.project_name` (or `OTEL_VERL_PROJECT`).", resource=True
)
RES_EXPERIMENT = Attribute(
    "verl.experiment", "string", "verl's `trainer.experiment_name` (or `OTEL_VERL_EXPERIMENT`).", resource=True
)
RES_ROLE = Attribute(
    "verl.process.role",
    "string",
    f"The process's part in the job: {_ROLES} (another verl actor, such as the load balancer).",
    resource=True,
)
RES_RANK = Attribute(
    "verl.rank", "int", "The worker rank (worker processes; also on `verl.worker.*` spans).", resource=True
)
RES_PROCESS_PID = Attribute("process.pid", "int", "The process id.", resource=True)
RES_HOST_NAME = Attribute(
    "host.name", "string", "The node's host name (unless `OTEL_RESOURCE_ATTRIBUTES` sets one).", resource=True
)
RES_K8S_POD_NAME = _from_env("k8s.pod.name")
RES_K8S_POD_UID = _from_env("k8s.pod.uid")
RES_K8S_NAMESPACE_NAME = _from_env("k8s.namespace.name")
RES_K8S_NODE_NAME = _from_env("k8s.node.name")
RES_SLURM_CLUSTER_NAME = _from_env("slurm.cluster.name")
RES_SLURM_JOB_ID = _from_env("slurm.job.id")
RES_SLURM_STEP_ID = _from_env("slurm.step.id")
RES_SLURM_NODE_ID = _from_env("slurm.node.id")
RES_DISTRO_NAME = Attribute("telemetry.distro.name", "string", f"`{s.DISTRO_NAME}`.", resource=True)
RES_DISTRO_VERSION = Attribute("telemetry.distro.version", "string", "otel-verl's version.", resource=True)
# ------------------------------------------------------------ steps and stages
ATTR_STEP = Attribute("verl.step", "int", "verl's global step (also in W3C baggage, for user code: `current_step()`).")
ATTR_EPOCH = Attribute("verl.epoch", "int", "verl's epoch, where the driver knows it.")
ATTR_STAGE = Attribute("verl.stage", "string", "The timer name of a stage (`gen`, `update_actor`, ...).")
ATTR_DRIVER = Attribute(
    "verl.driver", "string", f"`{s.DRIVER_V0}` (`RayPPOTrainer`) or `{s.DRIVER_V1}` (`PPOTrainer`)."
)
ATTR_TRAINER_CLASS = Attribute("verl.trainer.class", "string", "The trainer's class name.")
ATTR_VALIDATION_INITIAL = Attribute(
    "verl.validation.initial", "bool", "Validation before the first step (`val_before_train`)."
)
ATTR_WORKER_METHOD = Attribute(
    "verl.worker.method", "string", "The worker-group method called (`compute_log_prob`, ...)."
)
ATTR_WORKER_CLASS = Attribute("verl.worker.class", "string", "The worker's class (`WorkerDict`, ...).")
# verl's resolved config as nested JSON, secrets redacted (otel_verl.redact)
ATTR_CONFIG = Attribute(
    "verl.config",
    "string",
    f"The run's resolved verl config as JSON, secrets redacted, at most {s.CONFIG_MAX_BYTES // 1024} KiB "
    f"(entries left out for the cap are listed under `{s.CONFIG_TRUNCATED_KEY}`).",
)
ATTR_TIME_PREFIX = Attribute(
    "verl.time.<category>",
    "double",
    "On `verl.step`: seconds of the step in each category of `verl.step.time` (they add up to the step).",
)
ATTR_TIME_CATEGORY = Attribute(
    "verl.time.category",
    "string",
    "Where step time went: " + "`rollout`, `waiting` (rollouts still being generated), `poll_lag` (v1: "
    "waiting after the rollouts were all done, until the replay buffer polled again), `training`, "
    "`weight_sync`, `checkpoint`, `validation`, `driver`, `other`.",
)
ATTR_POOL_PREFIX = Attribute(
    "verl.pool.<role>.<state>",
    "double",
    "On `verl.step`: seconds of the step per pool role and state (the figures of `verl.pool.time`).",
)
ATTR_POOL_ROLE = Attribute("verl.pool.role", "string", "`actor`, `rollout`, `ref`, `critic`, `reward`.")
ATTR_POOL_STATE = Attribute(
    "verl.pool.state", "string", "`busy`, `waiting`, `idle` (they add up to the step per role)."
)
ATTR_GOODPUT_ROLE = Attribute(
    "verl.goodput.role", "string", "`trainer` (the actor/critic/ref pools), `rollout` (the replicas)."
)
ATTR_GOODPUT_BUCKET = Attribute(
    "verl.goodput.bucket",
    "string",
    "`productive`, `overhead`, `idle`, `wasted` (they add up to the step per role; [Where the time goes]"
    "(time.md#goodput-by-role)).",
)
ATTR_WAIT_FOR = Attribute(
    "verl.wait.for",
    "string",
    "What the trainer waits for: `rollouts`; `agent_loop_workers` (under `verl.rollout.dispatch`: the time "
    "before the workers started the batch).",
)
ATTR_WAIT_SOURCE = Attribute("verl.wait.source", "string", "The verl call that waits (`replay_buffer.sample`).")
ATTR_WAIT_PARTITION = Attribute("verl.wait.partition", "string", "v1 replay-buffer partition (`train`, `val`).")
ATTR_WAIT_POLL_INTERVAL = Attribute(
    "verl.wait.poll_interval", "double", "Seconds between the v1 replay buffer's polls of TransferQueue."
)
# s of the wait after its rollouts were all done (hooks/poll_lag.py)
ATTR_WAIT_POLL_LAG = Attribute(
    "verl.wait.poll_lag",
    "double",
    "Seconds of the wait after the rollouts it waited for were all done (the replay buffer's next poll).",
)
# what a v1 replay-buffer wait waits for (hooks/waiting_for.py): its last poll's prompt groups per status
ATTR_WAIT_PENDING = Attribute(
    "verl.wait.pending", "int", "v1: prompt groups sampled but not started, at the wait's last poll."
)
ATTR_WAIT_RUNNING = Attribute("verl.wait.running", "int", "v1: prompt groups generating, at the wait's last poll.")
ATTR_WAIT_FINISHED = Attribute("verl.wait.finished", "int", "v1: prompt groups finished, at the wait's last poll.")
ATTR_WAIT_FAILED = Attribute(
    "verl.wait.failed", "int", "v1: prompt groups failed (verl's `failure`), at the wait's last poll."
)
ATTR_WAIT_NEEDED = Attribute(
    "verl.wait.needed", "int", "v1: finished prompt groups the replay buffer's sample needs (batch size)."
)
ATTR_WAIT_POLLS = Attribute("verl.wait.polls", "int", "v1: polls of TransferQueue that found too few finished groups.")
ATTR_WAIT_ELAPSED = Attribute("verl.wait.elapsed", "double", "Seconds the wait had lasted when this was said.")
ATTR_WAIT_OLDEST_UIDS = Attribute(
    "verl.wait.oldest.uids",
    "string[]",
    f"Up to {wf.MAX_NAMED} of the oldest prompt groups still in flight, by uid (verl's TransferQueue key), "
    "oldest first.",
)
ATTR_WAIT_OLDEST_STATES = Attribute("verl.wait.oldest.states", "string[]", "`pending` or `running`, per uid.")
ATTR_WAIT_OLDEST_STEPS = Attribute("verl.wait.oldest.steps", "int[]", "The step each uid was sampled for.")
ATTR_WAIT_OLDEST_AGES = Attribute(
    "verl.wait.oldest.ages",
    "double[]",
    "Seconds each uid has been running (0 for a pending one); only when the agent-loop workers run otel-verl.",
)
ATTR_WAIT_OLDEST_REPLICAS = Attribute(
    "verl.wait.oldest.replicas",
    "string[]",
    'The replica (server id) each running uid\'s first LLM call was sent to, `""` where not said; '
    "only when the agent-loop workers run otel-verl.",
)
ATTR_WAIT_OLDEST_SCANNED = Attribute(
    "verl.wait.oldest.scanned", "int", f"In-flight groups looked at to pick the oldest (at most {wf.MAX_SCAN})."
)
ATTR_REPLICAS_COUNT = Attribute("verl.replicas.count", "int", "Rollout replicas the call drives.")
# ------------------------------------------------------------ metrics' attributes
ATTR_KL_SOURCE = Attribute(
    "verl.kl.source", "string", ", ".join(f"`{v}`" for v in s.KL_KEYS.values()) + " (verl's key)."
)
ATTR_REWARD_SOURCE = Attribute("verl.reward.source", "string", "`score` (before the KL penalty), `rewards` (after).")
ATTR_METRIC_KEY = Attribute("verl.metric.key", "string", "The key verl logged (`actor/pg_loss`).")
ATTR_STAT = Attribute("verl.stat", "string", "Which statistic of the batch verl logged: `mean`, `max`, `min`, `std`.")
ATTR_MISMATCH_MEASURE = Attribute(
    "verl.mismatch.measure",
    "string",
    ", ".join(f"`{m}`" for m in s.MISMATCH_MEASURES) + " (verl's `rollout_corr/<measure>`).",
)
ATTR_STALENESS_BOUND = Attribute(
    "verl.staleness.bound",
    "string",
    "`lower` (from the newest weights a trajectory used: verl's `trajectory_staleness`), `worst` (from the "
    "oldest: `trajectory_staleness_worst`).",
)
# ------------------------------------------------------------ rollout
ATTR_ROLLOUT_SUBMIT_STEP = Attribute(
    "verl.rollout.submit_step", "int", "The global step when the trajectory was submitted."
)
ATTR_ROLLOUT_SAMPLE_INDEX = Attribute("verl.rollout.sample_index", "int", "The prompt's index in the batch.")
ATTR_ROLLOUT_INDEX = Attribute("verl.rollout.index", "int", "0 .. `rollout.n`-1 within the prompt's group.")
ATTR_ROLLOUT_VALIDATE = Attribute("verl.rollout.validate", "bool", "A validation rollout.")
ATTR_ROLLOUT_STATUS = Attribute(
    "verl.rollout.status", "string", f"`{s.STATUS_OK}`, `{s.STATUS_ERROR}` or `{s.STATUS_CANCELLED}`."
)
ATTR_ROLLOUT_PROMPT_TOKENS = Attribute("verl.rollout.prompt.tokens", "int", "Prompt tokens.")
ATTR_ROLLOUT_RESPONSE_TOKENS = Attribute(
    "verl.rollout.response.tokens", "int", "Response tokens as verl counts `response_length` (tool tokens too)."
)
# sum(response_mask)
ATTR_ROLLOUT_GENERATED_TOKENS = Attribute(
    "verl.rollout.response.generated_tokens", "int", "Tokens the LLM generated (without tool tokens)."
)
ATTR_ROLLOUT_NUM_TURNS = Attribute("verl.rollout.num_turns", "int", "Turns of the agent loop.")
ATTR_ROLLOUT_REWARD = Attribute("verl.rollout.reward_score", "double", "The trajectory's reward score.")
ATTR_ROLLOUT_BATCH_SIZE = Attribute("verl.rollout.batch_size", "int", "Prompts in the worker's batch (v0).")
ATTR_ROLLOUT_DURATION = Attribute("verl.rollout.duration", "double", "Seconds of the slowest trajectory.")
ATTR_ROLLOUT_TAIL_RATIO = Attribute(
    "verl.rollout.tail_ratio", "double", "Slowest / median trajectory duration of the step."
)
ATTR_ROLLOUT_TRAJECTORIES = Attribute("verl.rollout.trajectories", "int", "Trajectories of the step in this worker.")
ATTR_ROLLOUT_SLOWEST_SPAN_ID = Attribute(
    "verl.rollout.slowest.span_id", "string", "Span id of the slowest trajectory's span."
)
ATTR_ROLLOUT_SLOWEST_TRACE_ID = Attribute(
    "verl.rollout.slowest.trace_id",
    "string",
    "Trace id of the slowest trajectory's kept tree (its span id: `verl.rollout.slowest.span_id`).",
)
# which trajectory trees are exported (hooks/rollout/keep.py)
ATTR_ROLLOUT_KEPT_BECAUSE = Attribute(
    "verl.rollout.kept_because",
    "string",
    "Why the trajectory's tree was exported: `slowest` (among its step's slowest in its worker), `error` "
    "(failed or cancelled: always) or `sample` (the uniform sample of the rest).",
)
ATTR_ROLLOUT_SAMPLE_RATE = Attribute(
    "verl.rollout.sample_rate",
    "double",
    "Kept / eligible trajectories of its kind in its step and worker (1 for `slowest` and `error`): a count "
    "of kept trees divided by it estimates all trajectories.",
)
ATTR_ROLLOUT_SLOWEST_RANK = Attribute(
    "verl.rollout.slowest_rank", "int", "1 = the slowest trajectory of its step in its worker, 2 = next, ..."
)
ATTR_ROLLOUT_TREE_DROPPED = Attribute(
    "verl.rollout.tree.dropped_spans", "int", "Spans of the tree left out by a hold-back bound (only when there are)."
)
ATTR_ROLLOUT_KEPT_PREFIX = Attribute(
    "verl.rollout.kept.<reason>", "int", "Trees the worker kept in that step for `slowest`, `error` and `sample`."
)
ATTR_ROLLOUT_NOT_KEPT = Attribute(
    "verl.rollout.not_kept", "int", "Trajectories of the step whose tree was not exported."
)
ATTR_ROLLOUT_WORKERS = Attribute("verl.rollout.workers", "int", "Agent-loop workers the batch was dispatched to.")
ATTR_ROLLOUT_QUEUED = Attribute(
    "verl.rollout.queued", "double", "Seconds from the dispatch to the first worker starting the batch (v0)."
)
ATTR_ROLLOUT_QUEUED_MAX = Attribute(
    "verl.rollout.queued_max", "double", "Seconds from the dispatch to the last worker starting it (v0)."
)
ATTR_ROLLOUT_SERVER_ID = Attribute(
    "verl.rollout.server.id", "string", "The rollout replica (server) that served the call."
)
ATTR_ROLLOUT_SERVER_WAIT = Attribute(
    "verl.rollout.server.acquire_wait", "double", "Seconds the load balancer took to hand out a server."
)
ATTR_ROLLOUT_TOOL_REWARD = Attribute("verl.rollout.tool.reward", "double", "The reward a tool call returned.")
ATTR_ROLLOUT_PREEMPTIONS = Attribute("verl.rollout.preemptions", "int", "Times the engine preempted the request.")
# TokenOutput.extra_fields["global_steps"]
ATTR_ROLLOUT_WEIGHT_VERSION = Attribute(
    "verl.rollout.weight_version", "int", "The weights' version (global step) that generated it."
)
ATTR_ROLLOUT_REPLICA = Attribute("verl.rollout.replica", "string", "The replica rank (`RolloutReplica.replica_rank`).")
# generation health (hooks/rollout/health.py): on the trajectory span, from its response's token ids
ATTR_ROLLOUT_REPETITION = Attribute(
    "verl.rollout.response.repetition",
    "double",
    "seq-rep-4 of the response's last 256 token ids: the share of its 4-grams that repeat an earlier one.",
)
ATTR_ROLLOUT_DEGENERATE = Attribute(
    "verl.rollout.degenerate",
    "string[]",
    f"What is wrong with the response, if anything: `{s.DEGENERATE_LENGTH_LIMIT}`, `{s.DEGENERATE_EMPTY}`, "
    f"`{s.DEGENERATE_REPETITIVE}`.",
)
ATTR_ROLLOUT_DEGENERATE_KIND = Attribute(
    "verl.rollout.degenerate.kind",
    "string",
    f"`{s.DEGENERATE_LENGTH_LIMIT}` (as long as `rollout.response_length`), `{s.DEGENERATE_EMPTY}` (no token "
    f"but end-of-sequence/padding), `{s.DEGENERATE_REPETITIVE}` (seq-rep-4 at least 0.5).",
)
GEN_AI_OPERATION_NAME = Attribute("gen_ai.operation.name", "string", "`text_completion` (LLM call) or `execute_tool`.")
GEN_AI_PROVIDER_NAME = Attribute("gen_ai.provider.name", "string", "The rollout backend (`vllm`, `sglang`, ...).")
GEN_AI_AGENT_NAME = Attribute("gen_ai.agent.name", "string", "The agent loop's name.")
GEN_AI_TOOL_NAME = Attribute("gen_ai.tool.name", "string", "The tool called.")
GEN_AI_LATENCY_TIME_IN_QUEUE = Attribute(
    "gen_ai.latency.time_in_queue", "double", "Seconds the engine request waited for vLLM's scheduler."
)
GEN_AI_LATENCY_PREFILL = Attribute(
    "gen_ai.latency.time_in_model_prefill", "double", "Seconds from scheduled to the first token (vLLM)."
)
GEN_AI_LATENCY_DECODE = Attribute(
    "gen_ai.latency.time_in_model_decode", "double", "Seconds from the first to the last token (vLLM)."
)
GEN_AI_LATENCY_TTFT = Attribute(
    "gen_ai.latency.time_to_first_token", "double", "Seconds from arrival to the first token (vLLM)."
)
GEN_AI_LATENCY_E2E = Attribute("gen_ai.latency.e2e", "double", "Seconds from arrival to the last token (vLLM).")
GEN_AI_TOOL_CALL_ID = Attribute("gen_ai.tool.call.id", "string", "The tool call's id.")
# the model the rollout serves (hooks/rollout/llm.py)
GEN_AI_REQUEST_MODEL = Attribute(
    "gen_ai.request.model",
    "string",
    "The model the rollout serves: `rollout.prometheus.served_model_name` when set, else "
    "`actor_rollout_ref.model.path` (a Hugging Face id as is, a local or remote path by its last part).",
)
GEN_AI_REQUEST_MAX_TOKENS = Attribute("gen_ai.request.max_tokens", "int", "Sampling setting, when set.")
GEN_AI_REQUEST_TEMPERATURE = Attribute("gen_ai.request.temperature", "double", "Sampling setting, when set.")
GEN_AI_REQUEST_TOP_P = Attribute("gen_ai.request.top_p", "double", "Sampling setting, when set.")
GEN_AI_REQUEST_TOP_K = Attribute("gen_ai.request.top_k", "double", "Sampling setting, when set and on (above 0).")
GEN_AI_REQUEST_SEED = Attribute("gen_ai.request.seed", "int", "Sampling setting, when the request has a seed.")
GEN_AI_CONVERSATION_ID = Attribute(
    "gen_ai.conversation.id",
    "string",
    "verl's request id of the trajectory, the same for all its turns (the load balancer's sticky session).",
)
GEN_AI_RESPONSE_ID = Attribute(
    "gen_ai.response.id",
    "string",
    "The id the engine knows the call by (`LLMServerClient._vllm_request_id`: a fresh one per call).",
)
GEN_AI_RESPONSE_FINISH_REASONS = Attribute("gen_ai.response.finish_reasons", "string[]", "Why generation stopped.")
GEN_AI_USAGE_INPUT_TOKENS = Attribute("gen_ai.usage.input_tokens", "int", "Prompt tokens of the call.")
GEN_AI_USAGE_OUTPUT_TOKENS = Attribute("gen_ai.usage.output_tokens", "int", "Tokens the call generated.")
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = Attribute(
    "gen_ai.usage.cache_read.input_tokens", "int", "Prompt tokens served from the engine's prefix cache (vLLM)."
)
GEN_AI_TOKEN_TYPE = Attribute(
    "gen_ai.token.type", "string", "`input` (the prompt) or `output` (the tokens generated): which tokens are counted."
)
# the failed call's exception class (general error conventions)
ATTR_ERROR_TYPE = Attribute(
    "error.type",
    "string",
    "A failed LLM call's exception class, with its module unless a builtin (`ConnectionResetError`, "
    "`asyncio.exceptions.CancelledError`, ...).",
)
# the engine replica's HTTP server (general server conventions)
ATTR_SERVER_ADDRESS = Attribute(
    "server.address",
    "string",
    "The rollout replica's HTTP server host, when the server id is its `host:port` (verl's engines).",
)
ATTR_SERVER_PORT = Attribute("server.port", "int", "The rollout replica's HTTP server port, with `server.address`.")
# ------------------------------------------------------------ hardware
ATTR_HW_ID = Attribute("hw.id", "string", "The GPU's UUID (required by the hardware conventions).")
ATTR_HW_TYPE = Attribute("hw.type", "string", f"`{s.HW_TYPE_GPU}`.")
ATTR_HW_NAME = Attribute("hw.name", "string", "`gpu<index>` (`cuda:<index>` from torch).")
ATTR_HW_VENDOR = Attribute("hw.vendor", "string", "The GPU's vendor.")
ATTR_HW_MODEL = Attribute("hw.model", "string", "The GPU's model (`NVIDIA H200`).")
ATTR_HW_DRIVER_VERSION = Attribute(
    "hw.driver_version",
    "string",
    "On the resource of a process with NVML GPUs: the host's driver version (not on the `hw.*` points: "
    "a driver update would start new series).",
    resource=True,
)
ATTR_HW_GPU_TASK = Attribute(
    "hw.gpu.task", "string", f"`{s.GPU_TASK_GENERAL}`, `{s.GPU_TASK_ENCODER}`, `{s.GPU_TASK_DECODER}`."
)
ATTR_GPU_INDEX = Attribute("verl.gpu.index", "int", "The GPU's NVML index on its host.")
# ------------------------------------------------------------ logs and samples
ATTR_SAMPLE_REWARD = Attribute(
    "verl.sample.reward", "double", "The sample's sequence score (`token_level_scores` summed)."
)
ATTR_SAMPLE_INDEX = Attribute("verl.sample.index", "int", "The sample's position in the step's batch.")
ATTR_SAMPLE_PICKED_BECAUSE = Attribute(
    "verl.sample.picked_because",
    "string",
    f"Why the sample was picked: the degenerate kind it was preferred for (`{s.DEGENERATE_REPETITIVE}`, "
    f"`{s.DEGENERATE_EMPTY}`, `{s.DEGENERATE_LENGTH_LIMIT}`), or `{s.PICKED_FIRST}` (the batch's first "
    "responses, when no more are degenerate).",
)
ATTR_DATA_SOURCE = Attribute("verl.data_source", "string", "The dataset's `data_source` column.")
# ------------------------------------------------------------ guard
ATTR_GUARD_RULE = Attribute("verl.guard.rule", "string", "The rule that fired (`nonfinite`, `kl_high`, ...).")
# record | alert | checkpoint | stop (config.GUARD_RULE_ACTIONS)
ATTR_GUARD_ACTION = Attribute(
    "verl.guard.action", "string", "What the rule that fired did: `record`, `alert`, `checkpoint` or `stop`."
)
ATTR_GUARD_VALUE = Attribute(
    "verl.guard.value", "double", "The value that made it fire (a trend rule: the mean of its last window)."
)
ATTR_GUARD_LIMIT = Attribute("verl.guard.limit", "double", "The rule's threshold, fraction, ratio or factor.")
ATTR_GUARD_BASELINE = Attribute("verl.guard.baseline", "double", "The baseline a relative rule compared with.")
ATTR_GUARD_CHECKPOINT = Attribute(
    "verl.guard.checkpoint", "string", "The folder verl saved to, when the action saved one."
)
# ------------------------------------------------------------ stall doctor
ATTR_STALL_EPISODE = Attribute("verl.stall.episode", "int", "1, 2, ... per run.")
ATTR_STALL_SECONDS = Attribute("verl.stall.seconds", "double", "How long no training step had finished.")
ATTR_RAY_ACTOR_CLASS = Attribute("ray.actor.class", "string", "The Ray actor class of the reporting process.")
# The stall doctor's records also carry their event name as this attribute (semconv's deprecated
# predecessor of the LogRecord EventName field): Loki 3.7 drops the field but stores attributes as
# structured metadata (``event_name``), and VictoriaLogs stores it as a field (docs/stall-doctor.md).
ATTR_EVENT_NAME = Attribute(
    "event.name",
    "string",
    "The record's event name, also as an attribute: Loki 3.7 does not store the EventName field "
    "([Stall doctor](stall-doctor.md)).",
)
# ------------------------------------------------------------ otel-verl itself
ATTR_OVERHEAD_COMPONENT = Attribute(
    "otel_verl.component", "string", ", ".join(f"`{c}`" for c in s.OVERHEAD_COMPONENTS) + "."
)
ATTR_DROPPED_KIND = Attribute("otel_verl.dropped.kind", "string", ", ".join(f"`{k}`" for k in s.DROPPED_KINDS) + ".")
ATTR_SIGNAL = Attribute(
    "otel_verl.signal", "string", ", ".join(f"`{k}`" for k in s.SIGNALS) + ": the OTLP signal of a spooled batch."
)
ATTR_SPOOL_OUTCOME = Attribute(
    "otel_verl.spool.outcome",
    "string",
    ", ".join(f"`{k}`" for k in s.SPOOL_OUTCOMES) + ": what became of an export batch of the on-disk spool.",
)

# ---------------------------------------------------------------- spans
SPAN_STEP = Span(
    "verl.step",
    "internal",
    TASKRUNNER,
    "root: one trace per training step",
    (
        ATTR_STEP,
        ATTR_EPOCH,
        ATTR_DRIVER,
        ATTR_TIME_PREFIX,
        ATTR_POOL_PREFIX,
    ),
    "One training step; its duration is verl's `timing_s/step`.",
)
SPAN_STAGE_PREFIX = Span(
    "verl.<stage>",
    "internal",
    TASKRUNNER,
    "`verl.step`",
    (ATTR_STAGE, ATTR_STEP, ATTR_EPOCH),
    "Every stage verl times (`gen`, `reward`, `old_log_prob`, `ref`, `values`, `adv`, `update_critic`, "
    "`update_actor`, `update_weights`, `save_checkpoint`, `testing`, and any other timer name), with "
    "verl's `timing_s/<stage>` as its duration. A stage that raises ends ERROR with the exception.",
)
SPAN_WG_PREFIX = Span(
    "verl.wg.<method>",
    "client",
    TASKRUNNER,
    "the stage it runs in",
    (ATTR_WORKER_METHOD,),
    "The driver's worker-group call; for a non-blocking call it covers the dispatch.",
)
SPAN_WORKER_PREFIX = Span(
    "verl.worker.<method>",
    "server",
    WORKER,
    "`verl.wg.<method>`, across Ray",
    (ATTR_WORKER_METHOD, ATTR_WORKER_CLASS, RES_RANK),
    "The call inside one worker rank, for calls that carry data (log-prob, ref, values, updates).",
)
# worker/model start-up of a run (trainer.init / init_workers)
SPAN_INIT = Span(
    "verl.init", "internal", TASKRUNNER, "root", (ATTR_TRAINER_CLASS, ATTR_CONFIG), "Run start-up (workers and models)."
)
SPAN_VALIDATION = Span(
    "verl.validation",
    "internal",
    TASKRUNNER,
    "root",
    (ATTR_VALIDATION_INITIAL, ATTR_STEP),
    "Validation outside a timed stage (before training).",
)
# the trainer waiting (hooks/waits.py), child of the stage it waits in
SPAN_WAIT = Span(
    "verl.wait",
    "internal",
    TASKRUNNER,
    "the stage it waits in",
    (
        ATTR_WAIT_FOR,
        ATTR_WAIT_SOURCE,
        ATTR_WAIT_PARTITION,
        ATTR_STEP,
        ATTR_WAIT_POLL_INTERVAL,
        ATTR_WAIT_POLL_LAG,
        ATTR_WAIT_NEEDED,
        ATTR_WAIT_POLLS,
        ATTR_WAIT_PENDING,
        ATTR_WAIT_RUNNING,
        ATTR_WAIT_FINISHED,
        ATTR_WAIT_FAILED,
    ),
    "The trainer waiting for rollouts (v1's `gen` polls TransferQueue until enough rollouts finished); the "
    "counts are those of its last poll.",
)
# + sleep, abort, update_weights, ... (hooks/replicas.py)
SPAN_REPLICAS_PREFIX = Span(
    "verl.replicas.<op>",
    "internal",
    TASKRUNNER,
    "the stage it runs in",
    (ATTR_REPLICAS_COUNT, ATTR_STEP),
    "The trainer driving the rollout replicas through verl's `CheckpointEngineManager`: `<op>` = `abort`, "
    "`sleep`, `wake_up`, `resume_generation`, `release_kv_cache`, `resume_kv_cache`, `update_weights`.",
)
SPAN_GUARD = Span(
    "verl.guard",
    "internal",
    TASKRUNNER,
    "`verl.step` of the step (verl logs a step's values after that span ended)",
    (ATTR_STEP,),
    "The guard's decision, with a `verl.guard.triggered` event per firing.",
)
SPAN_ROLLOUT_BATCH = Span(
    "verl.rollout.generate",
    "server",
    AGENT,
    "`verl.gen`, across Ray (v0)",
    (ATTR_ROLLOUT_VALIDATE, ATTR_ROLLOUT_SUBMIT_STEP, ATTR_ROLLOUT_BATCH_SIZE),
    "v0: one `AgentLoopWorker.generate_sequences` call; carries the `verl.rollout.slowest_trajectory` event.",
)
# the TaskRunner's side of a dispatch to the agent-loop workers (hooks/rollout/dispatch.py)
SPAN_ROLLOUT_DISPATCH = Span(
    "verl.rollout.dispatch",
    "client",
    TASKRUNNER,
    "`verl.gen` (v0) or `verl.step` (v1 `prepare_step`)",
    (ATTR_ROLLOUT_WORKERS, ATTR_ROLLOUT_BATCH_SIZE, ATTR_ROLLOUT_QUEUED, ATTR_ROLLOUT_QUEUED_MAX),
    "One dispatch to the agent-loop workers (`AgentLoopManager.generate_sequences`, v1 "
    "`AgentLoopManagerTQ.generate_sequences`), the whole call; the time before the workers started the "
    "batch is its `verl.wait` child (`verl.wait.for=agent_loop_workers`) and the step's `waiting`.",
)
SPAN_ROLLOUT_TRAJECTORY = Span(
    "verl.rollout.trajectory",
    "internal",
    AGENT,
    "v0: `verl.rollout.generate`; v1: root of its own trace, linked to the `verl.gen` span that submitted it",
    (
        ATTR_ROLLOUT_SUBMIT_STEP,
        ATTR_ROLLOUT_SAMPLE_INDEX,
        ATTR_ROLLOUT_INDEX,
        ATTR_ROLLOUT_VALIDATE,
        GEN_AI_AGENT_NAME,
        ATTR_ROLLOUT_STATUS,
        ATTR_ROLLOUT_PROMPT_TOKENS,
        ATTR_ROLLOUT_RESPONSE_TOKENS,
        ATTR_ROLLOUT_GENERATED_TOKENS,
        ATTR_ROLLOUT_NUM_TURNS,
        ATTR_ROLLOUT_REWARD,
        ATTR_ROLLOUT_REPETITION,
        ATTR_ROLLOUT_DEGENERATE,
        ATTR_ROLLOUT_KEPT_BECAUSE,
        ATTR_ROLLOUT_SAMPLE_RATE,
        ATTR_ROLLOUT_SLOWEST_RANK,
        ATTR_ROLLOUT_TREE_DROPPED,
    ),
    "One trajectory (prompt x `rollout.n`). Its tree (with its LLM calls, tools, reward worker and engine "
    "spans, and user spans under them) is exported or dropped as a whole when it ends: at most "
    "`OTEL_VERL_ROLLOUT_SPANS_PER_STEP` per step and worker, the slowest first, then a uniform sample; "
    "failed ones always.",
)
_LLM_CALL = Span(
    s.llm_call_span_name("<model>"),
    "client",
    AGENT,
    "`verl.rollout.trajectory`",
    (
        GEN_AI_OPERATION_NAME,
        GEN_AI_PROVIDER_NAME,
        GEN_AI_REQUEST_MODEL,
        GEN_AI_USAGE_INPUT_TOKENS,
        GEN_AI_USAGE_OUTPUT_TOKENS,
        GEN_AI_REQUEST_MAX_TOKENS,
        GEN_AI_REQUEST_TEMPERATURE,
        GEN_AI_REQUEST_TOP_P,
        GEN_AI_REQUEST_TOP_K,
        GEN_AI_REQUEST_SEED,
        GEN_AI_CONVERSATION_ID,
        GEN_AI_RESPONSE_ID,
        GEN_AI_RESPONSE_FINISH_REASONS,
        GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        ATTR_SERVER_ADDRESS,
        ATTR_SERVER_PORT,
        ATTR_ROLLOUT_SERVER_ID,
        ATTR_ROLLOUT_SERVER_WAIT,
        ATTR_ROLLOUT_PREEMPTIONS,
        ATTR_ROLLOUT_WEIGHT_VERSION,
        ATTR_ROLLOUT_SUBMIT_STEP,
        ATTR_ROLLOUT_VALIDATE,
        ATTR_ROLLOUT_STATUS,
        ATTR_ERROR_TYPE,
    ),
    "One engine call of a trajectory (`LLMServerClient.generate`), named and attributed by the GenAI "
    "conventions (`text_completion` alone when the model is unknown), never with the prompt or the response. "
    "Readers find it by `gen_ai.operation.name` = `text_completion` with `verl.rollout.submit_step` "
    f"(`semconv.is_llm_call`); older otel-verl named it `{s.LEGACY_SPAN_ROLLOUT_LLM_CALL}`, which they still read.",
)
# the rollout engine's own request span and its attributes (vLLM's names: vllm/tracing/utils.py)
# vLLM: one per request, a child of the LLM call's span
SPAN_ENGINE_REQUEST = Span(
    "llm_request",
    "server",
    SERVER,
    f"`{s.llm_call_span_name('<model>')}`, across Ray",
    (
        GEN_AI_LATENCY_TIME_IN_QUEUE,
        GEN_AI_LATENCY_PREFILL,
        GEN_AI_LATENCY_DECODE,
        GEN_AI_LATENCY_TTFT,
        GEN_AI_LATENCY_E2E,
    ),
    "vLLM's own span of the engine request (its name and attributes are vLLM's), recorded on otel-verl's "
    "provider in the rollout server while `OTEL_VERL_ENGINE_TRACING` allows it.",
)
SPAN_ROLLOUT_TOOL_PREFIX = Span(
    "execute_tool <tool>",
    "internal",
    AGENT,
    "`verl.rollout.trajectory`",
    (GEN_AI_OPERATION_NAME, GEN_AI_TOOL_NAME, GEN_AI_TOOL_CALL_ID, ATTR_ROLLOUT_TOOL_REWARD),
    "One tool call of a tool agent loop; arguments and results are never recorded.",
)
SPAN_REWARD_WORKER = Span(
    "verl.reward_worker.compute_score",
    "internal",
    REWARD,
    "`verl.rollout.trajectory`, across Ray",
    (ATTR_STEP,),
    "The trajectory's reward scoring (`RewardLoopWorker.compute_score`); the user's reward function runs under it.",
)
SPAN_ROLLOUT_TAIL = Span(
    "verl.rollout.tail",
    "internal",
    AGENT,
    "v1: root, linked to the `verl.gen` span that submitted the step's rollouts",
    (ATTR_ROLLOUT_SUBMIT_STEP, ATTR_ROLLOUT_VALIDATE, ATTR_ROLLOUT_TAIL_RATIO),
    "v1: carries the `verl.rollout.slowest_trajectory` event of a worker's step.",
)

# What v1's wait for rollouts still waits for (hooks/waiting_for.py): on its event and the stall record.
_WAIT_PICTURE = (
    ATTR_WAIT_PARTITION,
    ATTR_WAIT_NEEDED,
    ATTR_WAIT_POLLS,
    ATTR_WAIT_ELAPSED,
    ATTR_WAIT_PENDING,
    ATTR_WAIT_RUNNING,
    ATTR_WAIT_FINISHED,
    ATTR_WAIT_FAILED,
    ATTR_WAIT_OLDEST_UIDS,
    ATTR_WAIT_OLDEST_STATES,
    ATTR_WAIT_OLDEST_STEPS,
    ATTR_WAIT_OLDEST_AGES,
    ATTR_WAIT_OLDEST_REPLICAS,
    ATTR_WAIT_OLDEST_SCANNED,
)

# ---------------------------------------------------------------- events
EVENT_SLOWEST_TRAJECTORY = Event(
    "verl.rollout.slowest_trajectory",
    "span event on `verl.rollout.generate` (v0) or `verl.rollout.tail` (v1)",
    (
        ATTR_ROLLOUT_SUBMIT_STEP,
        ATTR_ROLLOUT_VALIDATE,
        ATTR_ROLLOUT_DURATION,
        ATTR_ROLLOUT_TAIL_RATIO,
        ATTR_ROLLOUT_TRAJECTORIES,
        ATTR_ROLLOUT_SAMPLE_INDEX,
        ATTR_ROLLOUT_INDEX,
        ATTR_ROLLOUT_RESPONSE_TOKENS,
        ATTR_ROLLOUT_SLOWEST_SPAN_ID,
        ATTR_ROLLOUT_SLOWEST_TRACE_ID,
        ATTR_ROLLOUT_KEPT_PREFIX,
        ATTR_ROLLOUT_NOT_KEPT,
    ),
    "The slowest trajectory of a worker's step (not a metric attribute: one series per sample), with the "
    "trees its worker kept and left out in that step.",
)
EVENT_GUARD_TRIGGERED = Event(
    "verl.guard.triggered",
    "span event on `verl.guard`, and a WARNING log record",
    (
        ATTR_GUARD_RULE,
        ATTR_METRIC_KEY,
        ATTR_GUARD_VALUE,
        ATTR_GUARD_LIMIT,
        ATTR_GUARD_BASELINE,
        ATTR_GUARD_ACTION,
        ATTR_GUARD_CHECKPOINT,
        ATTR_STEP,
    ),
    "A guard rule fired.",
)
EVENT_ROLLOUT_SAMPLE = Event(
    "verl.rollout.sample",
    "log record (`OTEL_VERL_SAMPLES=true`)",
    (
        ATTR_STEP,
        ATTR_SAMPLE_REWARD,
        ATTR_DATA_SOURCE,
        ATTR_SAMPLE_INDEX,
        ATTR_SAMPLE_PICKED_BECAUSE,
        ATTR_ROLLOUT_DEGENERATE,
    ),
    f"A sampled generation: body `{{{s.SAMPLE_BODY_PROMPT!r}: ..., {s.SAMPLE_BODY_RESPONSE!r}: ...}}`, in "
    "the step's trace.",
)
EVENT_WAIT_STILL_WAITING = Event(
    "verl.wait.still_waiting",
    "span event on `verl.wait` (v1)",
    _WAIT_PICTURE,
    f"The wait has lasted {wf.EVENT_AFTER_POLLS} poll intervals (at least {wf.EVENT_AFTER_MIN_S:g} s), then "
    f"{wf.EVENT_FACTOR:g}x as long each time, at most {wf.MAX_EVENTS} per wait: what it still waits for, with "
    "the oldest groups in flight.",
)
EVENT_TRAINING_STALLED = Event(
    "verl.training.stalled",
    "log record (TaskRunner, WARNING)",
    (
        ATTR_STEP,
        ATTR_STALL_SECONDS,
        ATTR_STALL_EPISODE,
        ATTR_STAGE,
        ATTR_EVENT_NAME,
        ATTR_WAIT_FOR,
        *_WAIT_PICTURE,
    ),
    "No training step has finished for `OTEL_VERL_STALL_AFTER`; when the trainer is inside v1's wait for "
    "rollouts, what it waits for (`verl.wait.*`, as on the `verl.wait.still_waiting` event).",
)
EVENT_STALL_STACKS = Event(
    "verl.stall.stacks",
    "log record (every verl process)",
    (ATTR_STEP, ATTR_STALL_EPISODE, ATTR_RAY_ACTOR_CLASS, ATTR_EVENT_NAME),
    "Body: the Python stacks of all the process's threads, in the trace of the step in progress.",
)
EVENT_TRAINING_RESUMED = Event(
    "verl.training.resumed",
    "log record (TaskRunner)",
    (ATTR_STEP, ATTR_STALL_EPISODE, ATTR_EVENT_NAME),
    "A step finished again after a stall.",
)


def _declared(kind: type) -> tuple:
    return tuple(v for v in list(globals().values()) if isinstance(v, kind))


ATTRIBUTES: tuple[Attribute, ...] = _declared(Attribute)
SPANS: tuple[Span, ...] = _declared(Span)
EVENTS: tuple[Event, ...] = _declared(Event)


# Where each metric's values come from, for the metrics page (an instrument's own ``description``,
# exported with it, is in ``instruments.catalog``).
_BRIDGED_SOURCE = (
    "vLLM's `vllm:{}` in the rollout server actor's Prometheus registry, read at each export with the engine's "
    "own labels and `verl.rollout.replica` (`otel_verl/hooks/rollout/engine_metrics.py`; every other `vllm:*` and "
    "`sglang:*` family is bridged the same way)."
)
SOURCES: dict[c.InstrumentSpec, str] = {
    c.TRAINING_STEP: (
        "verl's global step, exported with the step's other values (the offline tools read the step from it)."
    ),
    c.TRAINING_STEPS: "Steps completed (TaskRunner).",
    c.LAST_STEP_TIMESTAMP: "Unix time the last step ended: the heartbeat of the training-stalled alerts.",
    c.STAGE_DURATION: (
        "Every timed stage, once per step: verl's own `timing_s/<stage>`. The agent loop's per-sample figures v0 logs "
        "under the same prefix (`timing_s/agent_loop/*`) are not stages and stay generic gauges."
    ),
    c.KL: "`actor/kl_loss`, `actor/ppo_kl`, `actor/reward_kl_penalty`.",
    c.REWARD: "`critic/score/mean` (before the KL penalty), `critic/rewards/mean` (after).",
    c.THROUGHPUT: "`perf/throughput` (tokens/s per GPU).",
    c.ROLLOUT_PROBS_DIFF: (
        "`training/rollout_probs_diff_{mean,max,std}`: verl's |p_trainer - p_rollout| over the batch's response "
        "tokens (probabilities, not log-probs), `verl.stat` = `mean`, `max`, `std`."
    ),
    c.ROLLOUT_PROBS_CORRELATION: (
        "`training/rollout_actor_probs_pearson_corr`: near 1 while the rollout engine samples from the policy the "
        "trainer trains (a broken weight sync or diverging numerics pull it down)."
    ),
    c.ROLLOUT_MISMATCH: (
        "`rollout_corr/<measure>` (`actor/rollout_corr/<measure>` in bypass mode), `verl.mismatch.measure` = "
        + ", ".join(f"`{m}`" for m in s.MISMATCH_MEASURES)
        + ": KL(rollout || trainer) and its k3 estimate, the mean absolute log-perplexity difference, "
        "token and sequence chi-squared."
    ),
    c.OFF_POLICY_STALENESS: (
        "v1 driver: `training/off_policy/trajectory_staleness/{mean,max,min}` (`verl.staleness.bound` = `lower`: "
        "from the newest weights a trajectory used) and `.../trajectory_staleness_worst/*` (`worst`: from the "
        "oldest); 0 in synchronous training."
    ),
    c.NONFINITE: (
        "NaN/inf values verl logged: the SDK refuses non-finite measurements, so such a value leaves its gauge at the "
        "last finite value and is counted here."
    ),
    c.TRAINING_STALLED: (
        "1 while no training step has finished for `OTEL_VERL_STALL_AFTER`, 0 after it resumed ([Stall "
        "doctor](stall-doctor.md))."
    ),
    c.GUARD_TRIGGERED: "Guard rules that fired, with the action each got (TaskRunner; [Guard](guard.md)).",
    c.STEP_TIME: (
        "Where the last step's time went (TaskRunner, from its stage and `verl.wait` spans: "
        "`otel_verl/hooks/accounting.py`); the categories add up to the step; the same figures are the "
        "`verl.time.<category>` attributes of `verl.step` ([Where the time goes](time.md))."
    ),
    c.TRAINER_IDLE_RATIO: (
        "(`waiting` + `poll_lag`) / step time: the share of the last step the trainer waited for rollouts "
        "(v1's replay buffer)."
    ),
    c.TRAINER_POLL_LAG: (
        "v1: seconds of the last step the trainer kept waiting after the rollouts it trains on were all done, "
        "until the replay buffer polled TransferQueue again (every 2 s: `otel_verl/hooks/poll_lag.py`; "
        "[Where the time goes](time.md))."
    ),
    c.POOL_TIME: (
        "The last step per pool role (TaskRunner): busy = the stages that hold the role, waiting = the trainer roles' "
        "wait for rollouts, idle = the rest; they add up to the step for each role; `ref`/`critic`/`reward` appear once"
        " a stage of theirs ran; the same figures are `verl.pool.<role>.<state>` attributes of `verl.step`."
    ),
    c.GOODPUT_TIME: (
        "Each step's seconds, per role (`trainer`, `rollout`), as `productive`, `overhead`, `idle` or `wasted` "
        "(TaskRunner, from the step's `verl.step.time` categories and verl's own counts of the step's dropped "
        "groups and aborted samples: `otel_verl/instruments/goodput.py`); the four add up to the step for each role "
        "([Where the time goes](time.md#goodput-by-role))."
    ),
    c.GOODPUT_DROPPED_GROUPS: (
        "The sum of the step's " + ", ".join(f"`{k}`" for k in s.DROPPED_GROUP_KEYS) + " (verl's v1 replay "
        "buffer logs them only in the steps that had some), added at each step (TaskRunner)."
    ),
    c.ROLLOUT_IDLE_RATIO: (
        "The rollout role's idle / step time: the share of the last step the trainer did not hold the rollout replicas "
        "(`gen`, `update_weights`, `testing`). On the sync drivers the replicas' own idle share "
        "(`otel_verl/offline/facts/pools.py`) is at least this; v1 `colocate_async`'s replicas also generate "
        "during training."
    ),
    c.LOGGED_VALUE: (
        "Every numeric key verl logs (`Tracking.log`): `/` becomes `.`, other characters outside `[A-Za-z0-9_.-]` "
        "become `_` (`actor/kl_loss` -> `verl.actor.kl_loss`, `val-core/gsm8k/reward/mean@4` -> "
        "`verl.val-core.gsm8k.reward.mean_4`)."
    ),
    c.ROLLOUT_TRAJECTORY_DURATION: "Every trajectory (agent-loop workers), sampled for spans or not.",
    c.ROLLOUT_LLM_CALL_DURATION: "Every engine call (agent-loop workers).",
    c.GEN_AI_CLIENT_OPERATION_DURATION: (
        "Every engine call (agent-loop workers), training and validation, by the GenAI conventions "
        "([gen-ai-metrics](https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-metrics/)): the same "
        "seconds as `verl.rollout.llm_call.duration`, with the conventions' buckets (to 81.92 s); `error.type` on a "
        "failed or cancelled call (the exception's class) ([Rollouts](rollouts.md#genai-client-metrics))."
    ),
    c.GEN_AI_CLIENT_TOKEN_USAGE: (
        "Every engine call that returned (agent-loop workers): `gen_ai.token.type` = `input` (the prompt's token "
        "ids, cached prefix included) and `output` (the tokens generated), as on the LLM-call span; a failed call "
        "records none."
    ),
    c.ROLLOUT_RESPONSE_TOKENS: "Every trajectory's response length.",
    c.ROLLOUT_TAIL_RATIO: "Slowest / median trajectory duration of the last step in that worker.",
    c.ROLLOUT_DEGENERATE_RATIO: (
        "The last step's responses in that worker, measured on their token ids (never their text): `length_limit` = as "
        "long as `rollout.response_length`, `empty` = no token but end-of-sequence/padding, `repetitive` = seq-rep-4 "
        "(the share of repeated 4-grams over the last 256 tokens) at least 0.5 ([Rollouts](rollouts.md#degenerate-"
        "generations))."
    ),
    c.ROLLOUT_REPLICA_BUSY_TIME: (
        "Seconds this replica had at least one request in its server's `generate`, counted in the rollout server actor "
        "(any backend); busy share `rate(verl_rollout_replica_busy_time_seconds_total[5m])`; exported when the replica "
        "goes idle."
    ),
    c.GPU_MEMORY_USAGE: (
        "NVML `nvmlDeviceGetMemoryInfo().used`; without NVML `torch.cuda.mem_get_info` (total - free) of the device the"
        " process uses ([GPU and process metrics](gpu.md))."
    ),
    c.GPU_MEMORY_LIMIT: "NVML / torch total memory.",
    c.GPU_MEMORY_UTILIZATION: "usage / limit.",
    c.GPU_UTILIZATION: (
        "NVML `nvmlDeviceGetUtilizationRates().gpu / 100` (fraction of time a kernel ran); encoder/decoder where the "
        "GPU reports them (NVML only)."
    ),
    c.HW_POWER: "NVML `nvmlDeviceGetPowerUsage` (mW / 1000).",
    c.HW_ENERGY: "NVML `nvmlDeviceGetTotalEnergyConsumption` (mJ / 1000, since the driver loaded).",
    c.HW_TEMPERATURE: "NVML `nvmlDeviceGetTemperature` (GPU die).",
    c.PROCESS_GPU_MEMORY_USAGE: (
        "The memory this rank's own process holds on the device: its entry in NVML's compute process list, else "
        "`torch.cuda.memory_reserved` (which rank leaks)."
    ),
    c.OVERHEAD_CPU_TIME: (
        "otel-verl's own CPU time in each process that has a pipeline (read at every export): its threads by their "
        "kernel thread CPU clocks, `hooks` = its wrappers' work on verl's threads ([Overhead](overhead.md))."
    ),
    c.TELEMETRY_DROPPED: (
        "Telemetry dropped because a bounded queue was full (a slow or unreachable metrics exporter): `step` = a step's"
        " logged values never recorded, `metric_export` = a collected metric batch never exported, `spool` = a spooled "
        "export batch dropped, oldest first, from the full on-disk spool; the first drop of each kind also logs one "
        "warning."
    ),
    c.SPOOL_BATCHES: (
        "The on-disk spool of each process with an OTLP exporter ([Faults](faults.md#the-on-disk-spool)), read at "
        "every export: `spooled` = the endpoint did not take the batch (written to disk), `resent` = taken later "
        "(this process's or an ended process's it adopted), `dropped` = lost (the spool was full, oldest first; "
        "unwritable or unreadable), `rejected` = refused for good when re-sent; only outcomes that happened are "
        "reported."
    ),
    c.SPOOL_BYTES: "The bytes of the batches `otel_verl.spool.batches` counts (OTLP protobuf requests).",
    **{spec: _BRIDGED_SOURCE.format(spec.name.removeprefix("vllm.").split(".")[0]) for spec in c.ENGINE},
}


def attribute(name: str) -> Attribute:
    """The entry of ``name`` (KeyError: not documented)."""
    found = [a for a in ATTRIBUTES if a.name == name]
    if not found:
        raise KeyError(name)
    return found[0]
