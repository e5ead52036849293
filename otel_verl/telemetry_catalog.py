"""Every span, event and attribute otel-verl emits: where it is made, its kind, and what it means;
and where each metric's values come from (``SOURCES``).

The documentation's text, off the runtime path: no module a verl process imports imports this one.
The reference pages (``docs/generated``) are written from this module, ``instruments.catalog``
(the metrics) and ``instruments.prometheus`` (their names in Prometheus) by ``scripts/gen_docs.py``;
``tests/unit/test_telemetry_catalog.py`` fails when a name in ``otel_verl.semconv`` is not here.
Nothing here is read while a job runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_verl import semconv as s
from otel_verl.hooks import waiting_for as wf
from otel_verl.instruments import catalog as c
from otel_verl.process.resource import FROM_ENV


@dataclass(frozen=True)
class AttributeDoc:
    name: str  # an attribute key, or a pattern with ``<...>`` (``verl.time.<category>``)
    type: str  # string, int, double, bool, string[]
    doc: str


@dataclass(frozen=True)
class SpanDoc:
    name: str  # a span name, or a pattern with ``<...>``
    kind: str  # internal, client, server (OpenTelemetry SpanKind)
    process: str  # the process role(s) that make it (``verl.process.role``)
    parent: str  # where it hangs in a trace
    attributes: tuple[str, ...]
    doc: str


@dataclass(frozen=True)
class EventDoc:
    name: str
    carrier: str  # "span event on ..." or "log record"
    attributes: tuple[str, ...]
    doc: str


TASKRUNNER, WORKER, AGENT, REWARD, SERVER = (
    s.ROLE_TASKRUNNER,
    s.ROLE_WORKER,
    s.ROLE_AGENT_LOOP,
    s.ROLE_REWARD_WORKER,
    s.ROLE_ROLLOUT_SERVER,
)

RESOURCE: tuple[str, ...] = (
    s.RES_SERVICE_NAME,
    s.RES_SERVICE_INSTANCE_ID,
    s.RES_SERVICE_VERSION,
    s.RES_RUN_ID,
    s.RES_PROJECT,
    s.RES_EXPERIMENT,
    s.RES_ROLE,
    s.RES_RANK,
    s.RES_PROCESS_PID,
    s.RES_HOST_NAME,
    s.RES_DISTRO_NAME,
    s.RES_DISTRO_VERSION,
    *(attr for attr, _ in FROM_ENV),
    s.ATTR_HW_DRIVER_VERSION,
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

ATTRIBUTES: tuple[AttributeDoc, ...] = (
    # ------------------------------------------------------------ resource
    AttributeDoc(
        s.RES_SERVICE_NAME,
        "string",
        f"`OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`), default `{s.SERVICE_NAME_DEFAULT}`.",
    ),
    AttributeDoc(s.RES_SERVICE_INSTANCE_ID, "string", "One per process (the SDK's)."),
    AttributeDoc(
        s.RES_SERVICE_VERSION,
        "string",
        "The installed verl's version (`0.9.1`; what a comparison across a verl upgrade groups by), unless "
        "`OTEL_RESOURCE_ATTRIBUTES` sets one.",
    ),
    AttributeDoc(s.RES_RUN_ID, "string", "The job's run id, shared by all its processes (`OTEL_VERL_RUN_ID`)."),
    AttributeDoc(s.RES_PROJECT, "string", "verl's `trainer.project_name` (or `OTEL_VERL_PROJECT`)."),
    AttributeDoc(s.RES_EXPERIMENT, "string", "verl's `trainer.experiment_name` (or `OTEL_VERL_EXPERIMENT`)."),
    AttributeDoc(
        s.RES_ROLE,
        "string",
        f"The process's part in the job: {_ROLES} (another verl actor, such as the load balancer).",
    ),
    AttributeDoc(s.RES_RANK, "int", "The worker rank (worker processes; also on `verl.worker.*` spans)."),
    AttributeDoc(s.RES_PROCESS_PID, "int", "The process id."),
    AttributeDoc(s.RES_HOST_NAME, "string", "The node's host name (unless `OTEL_RESOURCE_ATTRIBUTES` sets one)."),
    *(
        AttributeDoc(
            attr,
            "string",
            f"`{var}` of the process's environment, when set and `OTEL_RESOURCE_ATTRIBUTES` has no `{attr}`"
            + (" (map it from the pod's downward API)." if attr.startswith("k8s.") else " (Slurm sets it)."),
        )
        for attr, var in FROM_ENV
    ),
    AttributeDoc(s.RES_DISTRO_NAME, "string", f"`{s.DISTRO_NAME}`."),
    AttributeDoc(s.RES_DISTRO_VERSION, "string", "otel-verl's version."),
    # ------------------------------------------------------------ steps and stages
    AttributeDoc(s.ATTR_STEP, "int", "verl's global step (also in W3C baggage, for user code: `current_step()`)."),
    AttributeDoc(s.ATTR_EPOCH, "int", "verl's epoch, where the driver knows it."),
    AttributeDoc(s.ATTR_STAGE, "string", "The timer name of a stage (`gen`, `update_actor`, ...)."),
    AttributeDoc(s.ATTR_DRIVER, "string", f"`{s.DRIVER_V0}` (`RayPPOTrainer`) or `{s.DRIVER_V1}` (`PPOTrainer`)."),
    AttributeDoc(s.ATTR_TRAINER_CLASS, "string", "The trainer's class name."),
    AttributeDoc(s.ATTR_VALIDATION_INITIAL, "bool", "Validation before the first step (`val_before_train`)."),
    AttributeDoc(s.ATTR_WORKER_METHOD, "string", "The worker-group method called (`compute_log_prob`, ...)."),
    AttributeDoc(s.ATTR_WORKER_CLASS, "string", "The worker's class (`WorkerDict`, ...)."),
    AttributeDoc(
        s.ATTR_CONFIG,
        "string",
        f"The run's resolved verl config as JSON, secrets redacted, at most {s.CONFIG_MAX_BYTES // 1024} KiB "
        f"(entries left out for the cap are listed under `{s.CONFIG_TRUNCATED_KEY}`).",
    ),
    AttributeDoc(
        s.ATTR_TIME_PREFIX + "<category>",
        "double",
        "On `verl.step`: seconds of the step in each category of `verl.step.time` (they add up to the step).",
    ),
    AttributeDoc(
        s.ATTR_TIME_CATEGORY,
        "string",
        "Where step time went: " + "`rollout`, `waiting` (rollouts still being generated), `poll_lag` (v1: "
        "waiting after the rollouts were all done, until the replay buffer polled again), `training`, "
        "`weight_sync`, `checkpoint`, `validation`, `driver`, `other`.",
    ),
    AttributeDoc(
        s.ATTR_POOL_PREFIX + "<role>.<state>",
        "double",
        "On `verl.step`: seconds of the step per pool role and state (the figures of `verl.pool.time`).",
    ),
    AttributeDoc(s.ATTR_POOL_ROLE, "string", "`actor`, `rollout`, `ref`, `critic`, `reward`."),
    AttributeDoc(s.ATTR_POOL_STATE, "string", "`busy`, `waiting`, `idle` (they add up to the step per role)."),
    AttributeDoc(s.ATTR_GOODPUT_ROLE, "string", "`trainer` (the actor/critic/ref pools), `rollout` (the replicas)."),
    AttributeDoc(
        s.ATTR_GOODPUT_BUCKET,
        "string",
        "`productive`, `overhead`, `idle`, `wasted` (they add up to the step per role; [Where the time goes]"
        "(time.md#goodput-by-role)).",
    ),
    AttributeDoc(
        s.ATTR_WAIT_FOR,
        "string",
        "What the trainer waits for: `rollouts`; `agent_loop_workers` (under `verl.rollout.dispatch`: the time "
        "before the workers started the batch).",
    ),
    AttributeDoc(s.ATTR_WAIT_SOURCE, "string", "The verl call that waits (`replay_buffer.sample`)."),
    AttributeDoc(s.ATTR_WAIT_PARTITION, "string", "v1 replay-buffer partition (`train`, `val`)."),
    AttributeDoc(s.ATTR_WAIT_POLL_INTERVAL, "double", "Seconds between the v1 replay buffer's polls of TransferQueue."),
    AttributeDoc(
        s.ATTR_WAIT_POLL_LAG,
        "double",
        "Seconds of the wait after the rollouts it waited for were all done (the replay buffer's next poll).",
    ),
    AttributeDoc(s.ATTR_WAIT_PENDING, "int", "v1: prompt groups sampled but not started, at the wait's last poll."),
    AttributeDoc(s.ATTR_WAIT_RUNNING, "int", "v1: prompt groups generating, at the wait's last poll."),
    AttributeDoc(s.ATTR_WAIT_FINISHED, "int", "v1: prompt groups finished, at the wait's last poll."),
    AttributeDoc(s.ATTR_WAIT_FAILED, "int", "v1: prompt groups failed (verl's `failure`), at the wait's last poll."),
    AttributeDoc(
        s.ATTR_WAIT_NEEDED, "int", "v1: finished prompt groups the replay buffer's sample needs (batch size)."
    ),
    AttributeDoc(s.ATTR_WAIT_POLLS, "int", "v1: polls of TransferQueue that found too few finished groups."),
    AttributeDoc(s.ATTR_WAIT_ELAPSED, "double", "Seconds the wait had lasted when this was said."),
    AttributeDoc(
        s.ATTR_WAIT_OLDEST_UIDS,
        "string[]",
        f"Up to {wf.MAX_NAMED} of the oldest prompt groups still in flight, by uid (verl's TransferQueue key), "
        "oldest first.",
    ),
    AttributeDoc(s.ATTR_WAIT_OLDEST_STATES, "string[]", "`pending` or `running`, per uid."),
    AttributeDoc(s.ATTR_WAIT_OLDEST_STEPS, "int[]", "The step each uid was sampled for."),
    AttributeDoc(
        s.ATTR_WAIT_OLDEST_AGES,
        "double[]",
        "Seconds each uid has been running (0 for a pending one); only when the agent-loop workers run otel-verl.",
    ),
    AttributeDoc(
        s.ATTR_WAIT_OLDEST_REPLICAS,
        "string[]",
        'The replica (server id) each running uid\'s first LLM call was sent to, `""` where not said; '
        "only when the agent-loop workers run otel-verl.",
    ),
    AttributeDoc(
        s.ATTR_WAIT_OLDEST_SCANNED, "int", f"In-flight groups looked at to pick the oldest (at most {wf.MAX_SCAN})."
    ),
    AttributeDoc(s.ATTR_REPLICAS_COUNT, "int", "Rollout replicas the call drives."),
    # ------------------------------------------------------------ metrics' attributes
    AttributeDoc(s.ATTR_KL_SOURCE, "string", ", ".join(f"`{v}`" for v in s.KL_KEYS.values()) + " (verl's key)."),
    AttributeDoc(s.ATTR_REWARD_SOURCE, "string", "`score` (before the KL penalty), `rewards` (after)."),
    AttributeDoc(s.ATTR_METRIC_KEY, "string", "The key verl logged (`actor/pg_loss`)."),
    AttributeDoc(s.ATTR_STAT, "string", "Which statistic of the batch verl logged: `mean`, `max`, `min`, `std`."),
    AttributeDoc(
        s.ATTR_MISMATCH_MEASURE,
        "string",
        ", ".join(f"`{m}`" for m in s.MISMATCH_MEASURES) + " (verl's `rollout_corr/<measure>`).",
    ),
    AttributeDoc(
        s.ATTR_STALENESS_BOUND,
        "string",
        "`lower` (from the newest weights a trajectory used: verl's `trajectory_staleness`), `worst` (from the "
        "oldest: `trajectory_staleness_worst`).",
    ),
    # ------------------------------------------------------------ rollout
    AttributeDoc(s.ATTR_ROLLOUT_SUBMIT_STEP, "int", "The global step when the trajectory was submitted."),
    AttributeDoc(s.ATTR_ROLLOUT_SAMPLE_INDEX, "int", "The prompt's index in the batch."),
    AttributeDoc(s.ATTR_ROLLOUT_INDEX, "int", "0 .. `rollout.n`-1 within the prompt's group."),
    AttributeDoc(s.ATTR_ROLLOUT_VALIDATE, "bool", "A validation rollout."),
    AttributeDoc(s.ATTR_ROLLOUT_STATUS, "string", f"`{s.STATUS_OK}`, `{s.STATUS_ERROR}` or `{s.STATUS_CANCELLED}`."),
    AttributeDoc(s.ATTR_ROLLOUT_PROMPT_TOKENS, "int", "Prompt tokens."),
    AttributeDoc(
        s.ATTR_ROLLOUT_RESPONSE_TOKENS, "int", "Response tokens as verl counts `response_length` (tool tokens too)."
    ),
    AttributeDoc(s.ATTR_ROLLOUT_GENERATED_TOKENS, "int", "Tokens the LLM generated (without tool tokens)."),
    AttributeDoc(s.ATTR_ROLLOUT_NUM_TURNS, "int", "Turns of the agent loop."),
    AttributeDoc(s.ATTR_ROLLOUT_REWARD, "double", "The trajectory's reward score."),
    AttributeDoc(s.ATTR_ROLLOUT_BATCH_SIZE, "int", "Prompts in the worker's batch (v0)."),
    AttributeDoc(s.ATTR_ROLLOUT_DURATION, "double", "Seconds of the slowest trajectory."),
    AttributeDoc(s.ATTR_ROLLOUT_TAIL_RATIO, "double", "Slowest / median trajectory duration of the step."),
    AttributeDoc(s.ATTR_ROLLOUT_TRAJECTORIES, "int", "Trajectories of the step in this worker."),
    AttributeDoc(s.ATTR_ROLLOUT_SLOWEST_SPAN_ID, "string", "Span id of the slowest trajectory's span."),
    AttributeDoc(
        s.ATTR_ROLLOUT_SLOWEST_TRACE_ID,
        "string",
        "Trace id of the slowest trajectory's kept tree (its span id: `verl.rollout.slowest.span_id`).",
    ),
    AttributeDoc(
        s.ATTR_ROLLOUT_KEPT_BECAUSE,
        "string",
        "Why the trajectory's tree was exported: `slowest` (among its step's slowest in its worker), `error` "
        "(failed or cancelled: always) or `sample` (the uniform sample of the rest).",
    ),
    AttributeDoc(
        s.ATTR_ROLLOUT_SAMPLE_RATE,
        "double",
        "Kept / eligible trajectories of its kind in its step and worker (1 for `slowest` and `error`): a count "
        "of kept trees divided by it estimates all trajectories.",
    ),
    AttributeDoc(
        s.ATTR_ROLLOUT_SLOWEST_RANK, "int", "1 = the slowest trajectory of its step in its worker, 2 = next, ..."
    ),
    AttributeDoc(
        s.ATTR_ROLLOUT_TREE_DROPPED, "int", "Spans of the tree left out by a hold-back bound (only when there are)."
    ),
    AttributeDoc(
        s.ATTR_ROLLOUT_KEPT_PREFIX + "<reason>",
        "int",
        "Trees the worker kept in that step for `slowest`, `error` and `sample`.",
    ),
    AttributeDoc(s.ATTR_ROLLOUT_NOT_KEPT, "int", "Trajectories of the step whose tree was not exported."),
    AttributeDoc(s.ATTR_ROLLOUT_WORKERS, "int", "Agent-loop workers the batch was dispatched to."),
    AttributeDoc(
        s.ATTR_ROLLOUT_QUEUED, "double", "Seconds from the dispatch to the first worker starting the batch (v0)."
    ),
    AttributeDoc(s.ATTR_ROLLOUT_QUEUED_MAX, "double", "Seconds from the dispatch to the last worker starting it (v0)."),
    AttributeDoc(s.ATTR_ROLLOUT_SERVER_ID, "string", "The rollout replica (server) that served the call."),
    AttributeDoc(s.ATTR_ROLLOUT_SERVER_WAIT, "double", "Seconds the load balancer took to hand out a server."),
    AttributeDoc(s.ATTR_ROLLOUT_TOOL_REWARD, "double", "The reward a tool call returned."),
    AttributeDoc(s.ATTR_ROLLOUT_PREEMPTIONS, "int", "Times the engine preempted the request."),
    AttributeDoc(s.ATTR_ROLLOUT_WEIGHT_VERSION, "int", "The weights' version (global step) that generated it."),
    AttributeDoc(s.ATTR_ROLLOUT_REPLICA, "string", "The replica rank (`RolloutReplica.replica_rank`)."),
    AttributeDoc(
        s.ATTR_ROLLOUT_REPETITION,
        "double",
        "seq-rep-4 of the response's last 256 token ids: the share of its 4-grams that repeat an earlier one.",
    ),
    AttributeDoc(
        s.ATTR_ROLLOUT_DEGENERATE,
        "string[]",
        f"What is wrong with the response, if anything: `{s.DEGENERATE_LENGTH_LIMIT}`, `{s.DEGENERATE_EMPTY}`, "
        f"`{s.DEGENERATE_REPETITIVE}`.",
    ),
    AttributeDoc(
        s.ATTR_ROLLOUT_DEGENERATE_KIND,
        "string",
        f"`{s.DEGENERATE_LENGTH_LIMIT}` (as long as `rollout.response_length`), `{s.DEGENERATE_EMPTY}` (no token "
        f"but end-of-sequence/padding), `{s.DEGENERATE_REPETITIVE}` (seq-rep-4 at least 0.5).",
    ),
    AttributeDoc(s.GEN_AI_OPERATION_NAME, "string", "`text_completion` (LLM call) or `execute_tool`."),
    AttributeDoc(s.GEN_AI_PROVIDER_NAME, "string", "The rollout backend (`vllm`, `sglang`, ...)."),
    AttributeDoc(s.GEN_AI_AGENT_NAME, "string", "The agent loop's name."),
    AttributeDoc(s.GEN_AI_TOOL_NAME, "string", "The tool called."),
    AttributeDoc(s.GEN_AI_LATENCY_TIME_IN_QUEUE, "double", "Seconds the engine request waited for vLLM's scheduler."),
    AttributeDoc(s.GEN_AI_LATENCY_PREFILL, "double", "Seconds from scheduled to the first token (vLLM)."),
    AttributeDoc(s.GEN_AI_LATENCY_DECODE, "double", "Seconds from the first to the last token (vLLM)."),
    AttributeDoc(s.GEN_AI_LATENCY_TTFT, "double", "Seconds from arrival to the first token (vLLM)."),
    AttributeDoc(s.GEN_AI_LATENCY_E2E, "double", "Seconds from arrival to the last token (vLLM)."),
    AttributeDoc(s.GEN_AI_TOOL_CALL_ID, "string", "The tool call's id."),
    AttributeDoc(
        s.GEN_AI_REQUEST_MODEL,
        "string",
        "The model the rollout serves: `rollout.prometheus.served_model_name` when set, else "
        "`actor_rollout_ref.model.path` (a Hugging Face id as is, a local or remote path by its last part).",
    ),
    AttributeDoc(s.GEN_AI_REQUEST_MAX_TOKENS, "int", "Sampling setting, when set."),
    AttributeDoc(s.GEN_AI_REQUEST_TEMPERATURE, "double", "Sampling setting, when set."),
    AttributeDoc(s.GEN_AI_REQUEST_TOP_P, "double", "Sampling setting, when set."),
    AttributeDoc(s.GEN_AI_REQUEST_TOP_K, "double", "Sampling setting, when set and on (above 0)."),
    AttributeDoc(s.GEN_AI_REQUEST_SEED, "int", "Sampling setting, when the request has a seed."),
    AttributeDoc(
        s.GEN_AI_CONVERSATION_ID,
        "string",
        "verl's request id of the trajectory, the same for all its turns (the load balancer's sticky session).",
    ),
    AttributeDoc(
        s.GEN_AI_RESPONSE_ID,
        "string",
        "The id the engine knows the call by (`LLMServerClient._vllm_request_id`: a fresh one per call).",
    ),
    AttributeDoc(s.GEN_AI_RESPONSE_FINISH_REASONS, "string[]", "Why generation stopped."),
    AttributeDoc(s.GEN_AI_USAGE_INPUT_TOKENS, "int", "Prompt tokens of the call."),
    AttributeDoc(s.GEN_AI_USAGE_OUTPUT_TOKENS, "int", "Tokens the call generated."),
    AttributeDoc(
        s.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, "int", "Prompt tokens served from the engine's prefix cache (vLLM)."
    ),
    AttributeDoc(
        s.GEN_AI_TOKEN_TYPE,
        "string",
        "`input` (the prompt) or `output` (the tokens generated): which tokens are counted.",
    ),
    AttributeDoc(
        s.ATTR_ERROR_TYPE,
        "string",
        "A failed LLM call's exception class, with its module unless a builtin (`ConnectionResetError`, "
        "`asyncio.exceptions.CancelledError`, ...).",
    ),
    AttributeDoc(
        s.ATTR_SERVER_ADDRESS,
        "string",
        "The rollout replica's HTTP server host, when the server id is its `host:port` (verl's engines).",
    ),
    AttributeDoc(s.ATTR_SERVER_PORT, "int", "The rollout replica's HTTP server port, with `server.address`."),
    # ------------------------------------------------------------ hardware
    AttributeDoc(s.ATTR_HW_ID, "string", "The GPU's UUID (required by the hardware conventions)."),
    AttributeDoc(s.ATTR_HW_TYPE, "string", f"`{s.HW_TYPE_GPU}`."),
    AttributeDoc(s.ATTR_HW_NAME, "string", "`gpu<index>` (`cuda:<index>` from torch)."),
    AttributeDoc(s.ATTR_HW_VENDOR, "string", "The GPU's vendor."),
    AttributeDoc(s.ATTR_HW_MODEL, "string", "The GPU's model (`NVIDIA H200`)."),
    AttributeDoc(
        s.ATTR_HW_DRIVER_VERSION,
        "string",
        "On the resource of a process with NVML GPUs: the host's driver version (not on the `hw.*` points: "
        "a driver update would start new series).",
    ),
    AttributeDoc(
        s.ATTR_HW_GPU_TASK, "string", f"`{s.GPU_TASK_GENERAL}`, `{s.GPU_TASK_ENCODER}`, `{s.GPU_TASK_DECODER}`."
    ),
    AttributeDoc(s.ATTR_GPU_INDEX, "int", "The GPU's NVML index on its host."),
    # ------------------------------------------------------------ logs and samples
    AttributeDoc(s.ATTR_SAMPLE_REWARD, "double", "The sample's sequence score (`token_level_scores` summed)."),
    AttributeDoc(s.ATTR_SAMPLE_INDEX, "int", "The sample's position in the step's batch."),
    AttributeDoc(
        s.ATTR_SAMPLE_PICKED_BECAUSE,
        "string",
        f"Why the sample was picked: the degenerate kind it was preferred for (`{s.DEGENERATE_REPETITIVE}`, "
        f"`{s.DEGENERATE_EMPTY}`, `{s.DEGENERATE_LENGTH_LIMIT}`), or `{s.PICKED_FIRST}` (the batch's first "
        "responses, when no more are degenerate).",
    ),
    AttributeDoc(s.ATTR_DATA_SOURCE, "string", "The dataset's `data_source` column."),
    # ------------------------------------------------------------ guard
    AttributeDoc(s.ATTR_GUARD_RULE, "string", "The rule that fired (`nonfinite`, `kl_high`, ...)."),
    AttributeDoc(
        s.ATTR_GUARD_ACTION, "string", "What the rule that fired did: `record`, `alert`, `checkpoint` or `stop`."
    ),
    AttributeDoc(
        s.ATTR_GUARD_VALUE, "double", "The value that made it fire (a trend rule: the mean of its last window)."
    ),
    AttributeDoc(s.ATTR_GUARD_LIMIT, "double", "The rule's threshold, fraction, ratio or factor."),
    AttributeDoc(s.ATTR_GUARD_BASELINE, "double", "The baseline a relative rule compared with."),
    AttributeDoc(s.ATTR_GUARD_CHECKPOINT, "string", "The folder verl saved to, when the action saved one."),
    # ------------------------------------------------------------ stall doctor
    AttributeDoc(s.ATTR_STALL_EPISODE, "int", "1, 2, ... per run."),
    AttributeDoc(s.ATTR_STALL_SECONDS, "double", "How long no training step had finished."),
    AttributeDoc(s.ATTR_RAY_ACTOR_CLASS, "string", "The Ray actor class of the reporting process."),
    AttributeDoc(
        s.ATTR_EVENT_NAME,
        "string",
        "The record's event name, also as an attribute: Loki 3.7 does not store the EventName field "
        "([Stall doctor](stall-doctor.md)).",
    ),
    # ------------------------------------------------------------ otel-verl itself
    AttributeDoc(s.ATTR_OVERHEAD_COMPONENT, "string", ", ".join(f"`{c}`" for c in s.OVERHEAD_COMPONENTS) + "."),
    AttributeDoc(s.ATTR_DROPPED_KIND, "string", ", ".join(f"`{k}`" for k in s.DROPPED_KINDS) + "."),
    AttributeDoc(
        s.ATTR_SIGNAL, "string", ", ".join(f"`{k}`" for k in s.SIGNALS) + ": the OTLP signal of a spooled batch."
    ),
    AttributeDoc(
        s.ATTR_SPOOL_OUTCOME,
        "string",
        ", ".join(f"`{k}`" for k in s.SPOOL_OUTCOMES) + ": what became of an export batch of the on-disk spool.",
    ),
)

SPANS: tuple[SpanDoc, ...] = (
    SpanDoc(
        s.SPAN_STEP,
        "internal",
        TASKRUNNER,
        "root: one trace per training step",
        (
            s.ATTR_STEP,
            s.ATTR_EPOCH,
            s.ATTR_DRIVER,
            s.ATTR_TIME_PREFIX + "<category>",
            s.ATTR_POOL_PREFIX + "<role>.<state>",
        ),
        "One training step; its duration is verl's `timing_s/step`.",
    ),
    SpanDoc(
        s.SPAN_STAGE_PREFIX + "<stage>",
        "internal",
        TASKRUNNER,
        "`verl.step`",
        (s.ATTR_STAGE, s.ATTR_STEP, s.ATTR_EPOCH),
        "Every stage verl times (`gen`, `reward`, `old_log_prob`, `ref`, `values`, `adv`, `update_critic`, "
        "`update_actor`, `update_weights`, `save_checkpoint`, `testing`, and any other timer name), with "
        "verl's `timing_s/<stage>` as its duration. A stage that raises ends ERROR with the exception.",
    ),
    SpanDoc(
        s.SPAN_WG_PREFIX + "<method>",
        "client",
        TASKRUNNER,
        "the stage it runs in",
        (s.ATTR_WORKER_METHOD,),
        "The driver's worker-group call; for a non-blocking call it covers the dispatch.",
    ),
    SpanDoc(
        s.SPAN_WORKER_PREFIX + "<method>",
        "server",
        WORKER,
        "`verl.wg.<method>`, across Ray",
        (s.ATTR_WORKER_METHOD, s.ATTR_WORKER_CLASS, s.RES_RANK),
        "The call inside one worker rank, for calls that carry data (log-prob, ref, values, updates).",
    ),
    SpanDoc(
        s.SPAN_INIT,
        "internal",
        TASKRUNNER,
        "root",
        (s.ATTR_TRAINER_CLASS, s.ATTR_CONFIG),
        "Run start-up (workers and models).",
    ),
    SpanDoc(
        s.SPAN_VALIDATION,
        "internal",
        TASKRUNNER,
        "root",
        (s.ATTR_VALIDATION_INITIAL, s.ATTR_STEP),
        "Validation outside a timed stage (before training).",
    ),
    SpanDoc(
        s.SPAN_WAIT,
        "internal",
        TASKRUNNER,
        "the stage it waits in",
        (
            s.ATTR_WAIT_FOR,
            s.ATTR_WAIT_SOURCE,
            s.ATTR_WAIT_PARTITION,
            s.ATTR_STEP,
            s.ATTR_WAIT_POLL_INTERVAL,
            s.ATTR_WAIT_POLL_LAG,
            s.ATTR_WAIT_NEEDED,
            s.ATTR_WAIT_POLLS,
            s.ATTR_WAIT_PENDING,
            s.ATTR_WAIT_RUNNING,
            s.ATTR_WAIT_FINISHED,
            s.ATTR_WAIT_FAILED,
        ),
        "The trainer waiting for rollouts (v1's `gen` polls TransferQueue until enough rollouts finished); the "
        "counts are those of its last poll.",
    ),
    SpanDoc(
        s.SPAN_REPLICAS_PREFIX + "<op>",
        "internal",
        TASKRUNNER,
        "the stage it runs in",
        (s.ATTR_REPLICAS_COUNT, s.ATTR_STEP),
        "The trainer driving the rollout replicas through verl's `CheckpointEngineManager`: `<op>` = `abort`, "
        "`sleep`, `wake_up`, `resume_generation`, `release_kv_cache`, `resume_kv_cache`, `update_weights`.",
    ),
    SpanDoc(
        s.SPAN_GUARD,
        "internal",
        TASKRUNNER,
        "`verl.step` of the step (verl logs a step's values after that span ended)",
        (s.ATTR_STEP,),
        "The guard's decision, with a `verl.guard.triggered` event per firing.",
    ),
    SpanDoc(
        s.SPAN_ROLLOUT_BATCH,
        "server",
        AGENT,
        "`verl.gen`, across Ray (v0)",
        (s.ATTR_ROLLOUT_VALIDATE, s.ATTR_ROLLOUT_SUBMIT_STEP, s.ATTR_ROLLOUT_BATCH_SIZE),
        "v0: one `AgentLoopWorker.generate_sequences` call; carries the `verl.rollout.slowest_trajectory` event.",
    ),
    SpanDoc(
        s.SPAN_ROLLOUT_DISPATCH,
        "client",
        TASKRUNNER,
        "`verl.gen` (v0) or `verl.step` (v1 `prepare_step`)",
        (s.ATTR_ROLLOUT_WORKERS, s.ATTR_ROLLOUT_BATCH_SIZE, s.ATTR_ROLLOUT_QUEUED, s.ATTR_ROLLOUT_QUEUED_MAX),
        "One dispatch to the agent-loop workers (`AgentLoopManager.generate_sequences`, v1 "
        "`AgentLoopManagerTQ.generate_sequences`), the whole call; the time before the workers started the "
        "batch is its `verl.wait` child (`verl.wait.for=agent_loop_workers`) and the step's `waiting`.",
    ),
    SpanDoc(
        s.SPAN_ROLLOUT_TRAJECTORY,
        "internal",
        AGENT,
        "v0: `verl.rollout.generate`; v1: root of its own trace, linked to the `verl.gen` span that submitted it",
        (
            s.ATTR_ROLLOUT_SUBMIT_STEP,
            s.ATTR_ROLLOUT_SAMPLE_INDEX,
            s.ATTR_ROLLOUT_INDEX,
            s.ATTR_ROLLOUT_VALIDATE,
            s.GEN_AI_AGENT_NAME,
            s.ATTR_ROLLOUT_STATUS,
            s.ATTR_ROLLOUT_PROMPT_TOKENS,
            s.ATTR_ROLLOUT_RESPONSE_TOKENS,
            s.ATTR_ROLLOUT_GENERATED_TOKENS,
            s.ATTR_ROLLOUT_NUM_TURNS,
            s.ATTR_ROLLOUT_REWARD,
            s.ATTR_ROLLOUT_REPETITION,
            s.ATTR_ROLLOUT_DEGENERATE,
            s.ATTR_ROLLOUT_KEPT_BECAUSE,
            s.ATTR_ROLLOUT_SAMPLE_RATE,
            s.ATTR_ROLLOUT_SLOWEST_RANK,
            s.ATTR_ROLLOUT_TREE_DROPPED,
        ),
        "One trajectory (prompt x `rollout.n`). Its tree (with its LLM calls, tools, reward worker and engine "
        "spans, and user spans under them) is exported or dropped as a whole when it ends: at most "
        "`OTEL_VERL_ROLLOUT_SPANS_PER_STEP` per step and worker, the slowest first, then a uniform sample; "
        "failed ones always.",
    ),
    SpanDoc(
        s.llm_call_span_name("<model>"),
        "client",
        AGENT,
        "`verl.rollout.trajectory`",
        (
            s.GEN_AI_OPERATION_NAME,
            s.GEN_AI_PROVIDER_NAME,
            s.GEN_AI_REQUEST_MODEL,
            s.GEN_AI_USAGE_INPUT_TOKENS,
            s.GEN_AI_USAGE_OUTPUT_TOKENS,
            s.GEN_AI_REQUEST_MAX_TOKENS,
            s.GEN_AI_REQUEST_TEMPERATURE,
            s.GEN_AI_REQUEST_TOP_P,
            s.GEN_AI_REQUEST_TOP_K,
            s.GEN_AI_REQUEST_SEED,
            s.GEN_AI_CONVERSATION_ID,
            s.GEN_AI_RESPONSE_ID,
            s.GEN_AI_RESPONSE_FINISH_REASONS,
            s.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
            s.ATTR_SERVER_ADDRESS,
            s.ATTR_SERVER_PORT,
            s.ATTR_ROLLOUT_SERVER_ID,
            s.ATTR_ROLLOUT_SERVER_WAIT,
            s.ATTR_ROLLOUT_PREEMPTIONS,
            s.ATTR_ROLLOUT_WEIGHT_VERSION,
            s.ATTR_ROLLOUT_SUBMIT_STEP,
            s.ATTR_ROLLOUT_VALIDATE,
            s.ATTR_ROLLOUT_STATUS,
            s.ATTR_ERROR_TYPE,
        ),
        "One engine call of a trajectory (`LLMServerClient.generate`), named and attributed by the GenAI "
        "conventions (`text_completion` alone when the model is unknown), never with the prompt or the response. "
        "Readers find it by `gen_ai.operation.name` = `text_completion` with `verl.rollout.submit_step` "
        f"(`semconv.is_llm_call`); older otel-verl named it `{s.LEGACY_SPAN_ROLLOUT_LLM_CALL}`, which they still read.",
    ),
    SpanDoc(
        s.SPAN_ENGINE_REQUEST,
        "server",
        SERVER,
        f"`{s.llm_call_span_name('<model>')}`, across Ray",
        (
            s.GEN_AI_LATENCY_TIME_IN_QUEUE,
            s.GEN_AI_LATENCY_PREFILL,
            s.GEN_AI_LATENCY_DECODE,
            s.GEN_AI_LATENCY_TTFT,
            s.GEN_AI_LATENCY_E2E,
        ),
        "vLLM's own span of the engine request (its name and attributes are vLLM's), recorded on otel-verl's "
        "provider in the rollout server while `OTEL_VERL_ENGINE_TRACING` allows it.",
    ),
    SpanDoc(
        s.SPAN_ROLLOUT_TOOL_PREFIX + "<tool>",
        "internal",
        AGENT,
        "`verl.rollout.trajectory`",
        (s.GEN_AI_OPERATION_NAME, s.GEN_AI_TOOL_NAME, s.GEN_AI_TOOL_CALL_ID, s.ATTR_ROLLOUT_TOOL_REWARD),
        "One tool call of a tool agent loop; arguments and results are never recorded.",
    ),
    SpanDoc(
        s.SPAN_REWARD_WORKER,
        "internal",
        REWARD,
        "`verl.rollout.trajectory`, across Ray",
        (s.ATTR_STEP,),
        "The trajectory's reward scoring (`RewardLoopWorker.compute_score`); the user's reward function runs under it.",
    ),
    SpanDoc(
        s.SPAN_ROLLOUT_TAIL,
        "internal",
        AGENT,
        "v1: root, linked to the `verl.gen` span that submitted the step's rollouts",
        (s.ATTR_ROLLOUT_SUBMIT_STEP, s.ATTR_ROLLOUT_VALIDATE, s.ATTR_ROLLOUT_TAIL_RATIO),
        "v1: carries the `verl.rollout.slowest_trajectory` event of a worker's step.",
    ),
)

# What v1's wait for rollouts still waits for (hooks/waiting_for.py): on its event and the stall record.
_WAIT_PICTURE = (
    s.ATTR_WAIT_PARTITION,
    s.ATTR_WAIT_NEEDED,
    s.ATTR_WAIT_POLLS,
    s.ATTR_WAIT_ELAPSED,
    s.ATTR_WAIT_PENDING,
    s.ATTR_WAIT_RUNNING,
    s.ATTR_WAIT_FINISHED,
    s.ATTR_WAIT_FAILED,
    s.ATTR_WAIT_OLDEST_UIDS,
    s.ATTR_WAIT_OLDEST_STATES,
    s.ATTR_WAIT_OLDEST_STEPS,
    s.ATTR_WAIT_OLDEST_AGES,
    s.ATTR_WAIT_OLDEST_REPLICAS,
    s.ATTR_WAIT_OLDEST_SCANNED,
)

EVENTS: tuple[EventDoc, ...] = (
    EventDoc(
        s.EVENT_SLOWEST_TRAJECTORY,
        "span event on `verl.rollout.generate` (v0) or `verl.rollout.tail` (v1)",
        (
            s.ATTR_ROLLOUT_SUBMIT_STEP,
            s.ATTR_ROLLOUT_VALIDATE,
            s.ATTR_ROLLOUT_DURATION,
            s.ATTR_ROLLOUT_TAIL_RATIO,
            s.ATTR_ROLLOUT_TRAJECTORIES,
            s.ATTR_ROLLOUT_SAMPLE_INDEX,
            s.ATTR_ROLLOUT_INDEX,
            s.ATTR_ROLLOUT_RESPONSE_TOKENS,
            s.ATTR_ROLLOUT_SLOWEST_SPAN_ID,
            s.ATTR_ROLLOUT_SLOWEST_TRACE_ID,
            s.ATTR_ROLLOUT_KEPT_PREFIX + "<reason>",
            s.ATTR_ROLLOUT_NOT_KEPT,
        ),
        "The slowest trajectory of a worker's step (not a metric attribute: one series per sample), with the "
        "trees its worker kept and left out in that step.",
    ),
    EventDoc(
        s.EVENT_GUARD_TRIGGERED,
        "span event on `verl.guard`, and a WARNING log record",
        (
            s.ATTR_GUARD_RULE,
            s.ATTR_METRIC_KEY,
            s.ATTR_GUARD_VALUE,
            s.ATTR_GUARD_LIMIT,
            s.ATTR_GUARD_BASELINE,
            s.ATTR_GUARD_ACTION,
            s.ATTR_GUARD_CHECKPOINT,
            s.ATTR_STEP,
        ),
        "A guard rule fired.",
    ),
    EventDoc(
        s.EVENT_ROLLOUT_SAMPLE,
        "log record (`OTEL_VERL_SAMPLES=true`)",
        (
            s.ATTR_STEP,
            s.ATTR_SAMPLE_REWARD,
            s.ATTR_DATA_SOURCE,
            s.ATTR_SAMPLE_INDEX,
            s.ATTR_SAMPLE_PICKED_BECAUSE,
            s.ATTR_ROLLOUT_DEGENERATE,
        ),
        f"A sampled generation: body `{{{s.SAMPLE_BODY_PROMPT!r}: ..., {s.SAMPLE_BODY_RESPONSE!r}: ...}}`, in "
        "the step's trace.",
    ),
    EventDoc(
        s.EVENT_WAIT_STILL_WAITING,
        "span event on `verl.wait` (v1)",
        _WAIT_PICTURE,
        f"The wait has lasted {wf.EVENT_AFTER_POLLS} poll intervals (at least {wf.EVENT_AFTER_MIN_S:g} s), then "
        f"{wf.EVENT_FACTOR:g}x as long each time, at most {wf.MAX_EVENTS} per wait: what it still waits for, with "
        "the oldest groups in flight.",
    ),
    EventDoc(
        s.EVENT_TRAINING_STALLED,
        "log record (TaskRunner, WARNING)",
        (
            s.ATTR_STEP,
            s.ATTR_STALL_SECONDS,
            s.ATTR_STALL_EPISODE,
            s.ATTR_STAGE,
            s.ATTR_EVENT_NAME,
            s.ATTR_WAIT_FOR,
            *_WAIT_PICTURE,
        ),
        "No training step has finished for `OTEL_VERL_STALL_AFTER`; when the trainer is inside v1's wait for "
        "rollouts, what it waits for (`verl.wait.*`, as on the `verl.wait.still_waiting` event).",
    ),
    EventDoc(
        s.EVENT_STALL_STACKS,
        "log record (every verl process)",
        (s.ATTR_STEP, s.ATTR_STALL_EPISODE, s.ATTR_RAY_ACTOR_CLASS, s.ATTR_EVENT_NAME),
        "Body: the Python stacks of all the process's threads, in the trace of the step in progress.",
    ),
    EventDoc(
        s.EVENT_TRAINING_RESUMED,
        "log record (TaskRunner)",
        (s.ATTR_STEP, s.ATTR_STALL_EPISODE, s.ATTR_EVENT_NAME),
        "A step finished again after a stall.",
    ),
)


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
        "(`otel_verl/offline/pools.py`) is at least this; v1 `colocate_async`'s replicas also generate during training."
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


def attribute(name: str) -> AttributeDoc:
    """The entry of ``name`` (KeyError: not documented)."""
    found = [a for a in ATTRIBUTES if a.name == name]
    if not found:
        raise KeyError(name)
    return found[0]
