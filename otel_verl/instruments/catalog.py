"""Every named instrument otel-verl creates: name, kind, unit, buckets, description, side by side.

The one definition. ``Instruments`` (``otel_verl.instruments``) builds them on a process's meter,
``prometheus.prometheus_name`` derives the series names the ``collector/`` kit queries, and
the reference page (``docs/reference.md``, by ``scripts/gen_docs.py``) is written from this list.
Names themselves are constants in ``otel_verl.semconv``.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_verl import semconv

# Seconds, from a 5 ms timer to a multi-hour stage.
DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1000,
    2500,
    5000,
    10000,
)
TOKEN_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
# The GenAI conventions' advice for their client metrics (gen-ai-metrics.md: "SHOULD be specified with
# ExplicitBucketBoundaries"), so that their series match every other GenAI client's.
GEN_AI_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
GEN_AI_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)

GAUGE = "gauge"
COUNTER = "counter"
HISTOGRAM = "histogram"
UP_DOWN_COUNTER = "updowncounter"
OBSERVABLE_GAUGE = "observable_gauge"
OBSERVABLE_COUNTER = "observable_counter"
OBSERVABLE_UP_DOWN_COUNTER = "observable_updowncounter"
OBSERVABLE = (OBSERVABLE_GAUGE, OBSERVABLE_COUNTER, OBSERVABLE_UP_DOWN_COUNTER)


@dataclass(frozen=True)
class InstrumentSpec:
    name: str
    kind: str
    unit: str
    description: str  # the instrument's own (what a backend shows)
    buckets: tuple[float, ...] | None = None
    attributes: tuple[str, ...] = ()  # its points' attributes, besides the resource's
    source: str = ""  # where the value comes from, for the reference page


# ---------------------------------------------------------------- training (TaskRunner, Tracking.log)
TRAINING_STEP = InstrumentSpec(
    semconv.M_TRAINING_STEP,
    GAUGE,
    "{step}",
    "Global step just finished",
    source="verl's global step, exported with the step's other values (the offline tools read the step from it).",
)
TRAINING_STEPS = InstrumentSpec(
    semconv.M_TRAINING_STEPS,
    COUNTER,
    "{step}",
    "Training steps completed",
    source="Steps completed (TaskRunner).",
)
LAST_STEP_TIMESTAMP = InstrumentSpec(
    semconv.M_LAST_STEP_TIMESTAMP,
    GAUGE,
    "s",
    "Unix time the last training step ended (heartbeat)",
    source="Unix time the last step ended: the heartbeat of the training-stalled alerts.",
)
STAGE_DURATION = InstrumentSpec(
    semconv.M_STAGE_DURATION,
    HISTOGRAM,
    "s",
    "Duration of each stage verl times",
    DURATION_BUCKETS,
    attributes=(semconv.ATTR_STAGE,),
    source=(
        "Every timed stage, once per step: verl's own `timing_s/<stage>`. The agent loop's per-sample figures v0 logs "
        "under the same prefix (`timing_s/agent_loop/*`) are not stages and stay generic gauges."
    ),
)
# No unit: Prometheus 3 would name a unit-"1" gauge ``..._ratio``, and neither is a ratio.
KL = InstrumentSpec(
    semconv.M_KL,
    GAUGE,
    "",
    "KL divergence as logged by verl",
    attributes=(semconv.ATTR_KL_SOURCE,),
    source="`actor/kl_loss`, `actor/ppo_kl`, `actor/reward_kl_penalty`.",
)
REWARD = InstrumentSpec(
    semconv.M_REWARD,
    GAUGE,
    "",
    "Mean sequence reward of the batch",
    attributes=(semconv.ATTR_REWARD_SOURCE,),
    source="`critic/score/mean` (before the KL penalty), `critic/rewards/mean` (after).",
)
THROUGHPUT = InstrumentSpec(
    semconv.M_THROUGHPUT,
    GAUGE,
    "{token}/s",
    "Tokens per second per GPU (perf/throughput)",
    source="`perf/throughput` (tokens/s per GPU).",
)
# Rollout/training mismatch and staleness: verl's own values, never recomputed.
ROLLOUT_PROBS_DIFF = InstrumentSpec(
    semconv.M_ROLLOUT_PROBS_DIFF,
    GAUGE,
    "",
    "Absolute difference of the rollout's and the trainer's token probabilities over the batch (verl.stat)",
    attributes=(semconv.ATTR_STAT,),
    source=(
        "`training/rollout_probs_diff_{mean,max,std}`: verl's |p_trainer - p_rollout| over the batch's response "
        "tokens (probabilities, not log-probs), `verl.stat` = `mean`, `max`, `std`."
    ),
)
ROLLOUT_PROBS_CORRELATION = InstrumentSpec(
    semconv.M_ROLLOUT_PROBS_CORRELATION,
    GAUGE,
    "",
    "Pearson correlation of the rollout's and the trainer's token probabilities over the batch",
    source=(
        "`training/rollout_actor_probs_pearson_corr`: near 1 while the rollout engine samples from the policy the "
        "trainer trains (a broken weight sync or diverging numerics pull it down)."
    ),
)
ROLLOUT_MISMATCH = InstrumentSpec(
    semconv.M_ROLLOUT_MISMATCH,
    GAUGE,
    "",
    "Rollout policy against the trained policy over the batch, by verl.mismatch.measure (verl's rollout_corr/*)",
    attributes=(semconv.ATTR_MISMATCH_MEASURE,),
    source=(
        "`rollout_corr/<measure>` (`actor/rollout_corr/<measure>` in bypass mode), `verl.mismatch.measure` = "
        + ", ".join(f"`{m}`" for m in semconv.MISMATCH_MEASURES)
        + ": KL(rollout || trainer) and its k3 estimate, the mean absolute log-perplexity difference, "
        "token and sequence chi-squared."
    ),
)
OFF_POLICY_STALENESS = InstrumentSpec(
    semconv.M_OFF_POLICY_STALENESS,
    GAUGE,
    "{version}",
    "Model versions the trained trajectories lag behind the policy (verl.staleness.bound, verl.stat)",
    attributes=(semconv.ATTR_STALENESS_BOUND, semconv.ATTR_STAT),
    source=(
        "v1 driver: `training/off_policy/trajectory_staleness/{mean,max,min}` (`verl.staleness.bound` = `lower`: "
        "from the newest weights a trajectory used) and `.../trajectory_staleness_worst/*` (`worst`: from the "
        "oldest); 0 in synchronous training."
    ),
)
NONFINITE = InstrumentSpec(
    semconv.M_NONFINITE,
    COUNTER,
    "{value}",
    "NaN or inf values verl logged",
    attributes=(semconv.ATTR_METRIC_KEY,),
    source=(
        "NaN/inf values verl logged: the SDK refuses non-finite measurements, so such a value leaves its gauge at the "
        "last finite value and is counted here."
    ),
)
TRAINING_STALLED = InstrumentSpec(
    semconv.M_TRAINING_STALLED,
    GAUGE,
    "",
    "1 while no training step has finished for OTEL_VERL_STALL_AFTER",
    source=(
        "1 while no training step has finished for `OTEL_VERL_STALL_AFTER`, 0 after it resumed ([Stall "
        "doctor](stall-doctor.md))."
    ),
)
GUARD_TRIGGERED = InstrumentSpec(
    semconv.M_GUARD_TRIGGERED,
    COUNTER,
    "{firing}",
    "Guard rules that fired (attributes verl.guard.rule, verl.guard.action)",
    attributes=(semconv.ATTR_GUARD_RULE, semconv.ATTR_GUARD_ACTION),
    source="Guard rules that fired, with the action each got (TaskRunner; [Guard](guard.md)).",
)
STEP_TIME = InstrumentSpec(
    semconv.M_STEP_TIME,
    GAUGE,
    "s",
    "Seconds of the last step by verl.time.category (they add up to the step)",
    attributes=(semconv.ATTR_TIME_CATEGORY,),
    source=(
        "Where the last step's time went (TaskRunner, from its stage and `verl.wait` spans: "
        "`otel_verl/hooks/accounting.py`); the categories add up to the step; the same figures are the "
        "`verl.time.<category>` attributes of `verl.step` ([Where the time goes](time.md))."
    ),
)
TRAINER_IDLE_RATIO = InstrumentSpec(
    semconv.M_TRAINER_IDLE_RATIO,
    GAUGE,
    "1",
    "Share of the last step the trainer waited for rollouts",
    source=(
        "(`waiting` + `poll_lag`) / step time: the share of the last step the trainer waited for rollouts "
        "(v1's replay buffer)."
    ),
)
TRAINER_POLL_LAG = InstrumentSpec(
    semconv.M_TRAINER_POLL_LAG,
    GAUGE,
    "s",
    "Seconds of the last step the trainer waited after its rollouts were done (v1 replay buffer poll)",
    source=(
        "v1: seconds of the last step the trainer kept waiting after the rollouts it trains on were all done, "
        "until the replay buffer polled TransferQueue again (every 2 s: `otel_verl/hooks/poll_lag.py`; "
        "[Where the time goes](time.md))."
    ),
)
POOL_TIME = InstrumentSpec(
    semconv.M_POOL_TIME,
    GAUGE,
    "s",
    "Seconds of the last step per pool role (verl.pool.role) busy, waiting or idle (verl.pool.state)",
    attributes=(semconv.ATTR_POOL_ROLE, semconv.ATTR_POOL_STATE),
    source=(
        "The last step per pool role (TaskRunner): busy = the stages that hold the role, waiting = the trainer roles' "
        "wait for rollouts, idle = the rest; they add up to the step for each role; `ref`/`critic`/`reward` appear once"
        " a stage of theirs ran; the same figures are `verl.pool.<role>.<state>` attributes of `verl.step`."
    ),
)
GOODPUT_TIME = InstrumentSpec(
    semconv.M_GOODPUT_TIME,
    COUNTER,
    "s",
    "Seconds of training steps per role (verl.goodput.role) in each goodput bucket (verl.goodput.bucket)",
    attributes=(semconv.ATTR_GOODPUT_ROLE, semconv.ATTR_GOODPUT_BUCKET),
    source=(
        "Each step's seconds, per role (`trainer`, `rollout`), as `productive`, `overhead`, `idle` or `wasted` "
        "(TaskRunner, from the step's `verl.step.time` categories and verl's own counts of the step's dropped "
        "groups and aborted samples: `otel_verl/hooks/goodput.py`); the four add up to the step for each role "
        "([Where the time goes](time.md#goodput-by-role))."
    ),
)
GOODPUT_DROPPED_GROUPS = InstrumentSpec(
    semconv.M_GOODPUT_DROPPED_GROUPS,
    COUNTER,
    "{group}",
    "Prompt groups generated and not trained on (verl's filtered, discarded and evicted groups)",
    source=(
        "The sum of the step's " + ", ".join(f"`{k}`" for k in semconv.DROPPED_GROUP_KEYS) + " (verl's v1 replay "
        "buffer logs them only in the steps that had some), added at each step (TaskRunner)."
    ),
)
ROLLOUT_IDLE_RATIO = InstrumentSpec(
    semconv.M_ROLLOUT_IDLE_RATIO,
    GAUGE,
    "1",
    "Share of the last step the trainer did not hold the rollout replicas",
    source=(
        "The rollout role's idle / step time: the share of the last step the trainer did not hold the rollout replicas "
        "(`gen`, `update_weights`, `testing`). On the sync drivers the replicas' own idle share "
        "(`otel_verl/offline/pools.py`) is at least this; v1 `colocate_async`'s replicas also generate during training."
    ),
)
# One gauge per numeric key verl logs, named by ``semconv.metric_name(key)``.
LOGGED_VALUE = InstrumentSpec(
    semconv.METRIC_PREFIX + "<key>",
    GAUGE,
    "",
    "verl logged key {key!r}",
    source=(
        "Every numeric key verl logs (`Tracking.log`): `/` becomes `.`, other characters outside `[A-Za-z0-9_.-]` "
        "become `_` (`actor/kl_loss` -> `verl.actor.kl_loss`, `val-core/gsm8k/reward/mean@4` -> "
        "`verl.val-core.gsm8k.reward.mean_4`)."
    ),
)

# ---------------------------------------------------------------- rollout (agent-loop workers)
TRAJECTORY_DURATION = InstrumentSpec(
    semconv.M_ROLLOUT_TRAJECTORY_DURATION,
    HISTOGRAM,
    "s",
    "Duration of one rollout trajectory (agent loop incl. reward)",
    DURATION_BUCKETS,
    attributes=(semconv.ATTR_ROLLOUT_VALIDATE, semconv.GEN_AI_AGENT_NAME, semconv.ATTR_ROLLOUT_STATUS),
    source="Every trajectory (agent-loop workers), sampled for spans or not.",
)
LLM_CALL_DURATION = InstrumentSpec(
    semconv.M_ROLLOUT_LLM_CALL_DURATION,
    HISTOGRAM,
    "s",
    "Duration of one LLM server generate call",
    DURATION_BUCKETS,
    attributes=(semconv.ATTR_ROLLOUT_VALIDATE, semconv.ATTR_ROLLOUT_STATUS),
    source="Every engine call (agent-loop workers).",
)
# The GenAI conventions' client metrics, from the same emission point as LLM_CALL_DURATION. Both are kept:
# this pair is what GenAI-aware backends and dashboards read (by model and provider); the verl.rollout
# one keeps the range of an RL rollout's calls (the advised buckets end at 81.92 s, a long generation
# runs for minutes), the validate / status split and the kit's queries (docs/rollouts.md).
# No server.address / server.port (recommended, not required): every agent-loop worker calls every
# replica, so they would multiply these series by the replicas; the LLM-call span has them.
GEN_AI_CLIENT_OPERATION_DURATION = InstrumentSpec(
    semconv.M_GEN_AI_CLIENT_OPERATION_DURATION,
    HISTOGRAM,
    "s",
    "GenAI operation duration.",
    GEN_AI_DURATION_BUCKETS,
    attributes=(
        semconv.GEN_AI_OPERATION_NAME,
        semconv.GEN_AI_PROVIDER_NAME,
        semconv.GEN_AI_REQUEST_MODEL,
        semconv.ATTR_ERROR_TYPE,
    ),
    source=(
        "Every engine call (agent-loop workers), training and validation, by the GenAI conventions "
        "([gen-ai-metrics](https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-metrics/)): the same "
        "seconds as `verl.rollout.llm_call.duration`, with the conventions' buckets (to 81.92 s); `error.type` on a "
        "failed or cancelled call (the exception's class) ([Rollouts](rollouts.md#genai-client-metrics))."
    ),
)
GEN_AI_CLIENT_TOKEN_USAGE = InstrumentSpec(
    semconv.M_GEN_AI_CLIENT_TOKEN_USAGE,
    HISTOGRAM,
    "{token}",
    "Number of input and output tokens used.",
    GEN_AI_TOKEN_BUCKETS,
    attributes=(
        semconv.GEN_AI_OPERATION_NAME,
        semconv.GEN_AI_PROVIDER_NAME,
        semconv.GEN_AI_TOKEN_TYPE,
        semconv.GEN_AI_REQUEST_MODEL,
    ),
    source=(
        "Every engine call that returned (agent-loop workers): `gen_ai.token.type` = `input` (the prompt's token "
        "ids, cached prefix included) and `output` (the tokens generated), as on the LLM-call span; a failed call "
        "records none."
    ),
)
RESPONSE_TOKENS = InstrumentSpec(
    semconv.M_ROLLOUT_RESPONSE_TOKENS,
    HISTOGRAM,
    "{token}",
    "Response tokens of one trajectory (verl's response_length)",
    TOKEN_BUCKETS,
    attributes=(semconv.ATTR_ROLLOUT_VALIDATE, semconv.GEN_AI_AGENT_NAME),
    source="Every trajectory's response length.",
)
TAIL_RATIO = InstrumentSpec(
    semconv.M_ROLLOUT_TAIL_RATIO,
    GAUGE,
    "1",
    "Slowest / median trajectory duration of a step in this worker",
    attributes=(semconv.ATTR_ROLLOUT_VALIDATE,),
    source="Slowest / median trajectory duration of the last step in that worker.",
)
DEGENERATE_RATIO = InstrumentSpec(
    semconv.M_ROLLOUT_DEGENERATE_RATIO,
    GAUGE,
    "1",
    "Share of a step's responses in this worker that hit the length limit, were empty or repetitive "
    "(verl.rollout.degenerate.kind)",
    attributes=(semconv.ATTR_ROLLOUT_VALIDATE, semconv.ATTR_ROLLOUT_DEGENERATE_KIND),
    source=(
        "The last step's responses in that worker, measured on their token ids (never their text): `length_limit` = as "
        "long as `rollout.response_length`, `empty` = no token but end-of-sequence/padding, `repetitive` = seq-rep-4 "
        "(the share of repeated 4-grams over the last 256 tokens) at least 0.5 ([Rollouts](rollouts.md#degenerate-"
        "generations))."
    ),
)

# Observable: read at export from the server's own in-flight bookkeeping (a union of request
# intervals, which no client sees); a counter, so busy share per replica is rate().
REPLICA_BUSY_TIME = InstrumentSpec(
    semconv.M_ROLLOUT_REPLICA_BUSY_TIME,
    OBSERVABLE_COUNTER,
    "s",
    "Seconds this rollout replica had at least one request in generate (verl.rollout.replica)",
    attributes=(semconv.ATTR_ROLLOUT_REPLICA,),
    source=(
        "Seconds this replica had at least one request in its server's `generate`, counted in the rollout server actor "
        "(any backend); busy share `rate(verl_rollout_replica_busy_time_seconds_total[5m])`; exported when the replica "
        "goes idle."
    ),
)

# ---------------------------------------------------------------- the rollout engine's own (rollout servers)
# Bridged from the engine's Prometheus registry (``engine_metrics``: every ``vllm:*`` / ``sglang:*``
# family, these are the ones the collector/ kit queries), with verl.rollout.replica and its labels.
_BRIDGED = "vLLM's {} (bridged from its Prometheus registry, per verl.rollout.replica)"
_BRIDGED_SOURCE = (
    "vLLM's `vllm:{}` in the rollout server actor's Prometheus registry, read at each export with the engine's "
    "own labels and `verl.rollout.replica` (`otel_verl/hooks/rollout/engine_metrics.py`; every other `vllm:*` and "
    "`sglang:*` family is bridged the same way)."
)


def _bridged(name: str, kind: str, what: str) -> InstrumentSpec:
    engine_name = name.removeprefix("vllm.").split(".")[0]
    return InstrumentSpec(
        name,
        kind,
        "",
        _BRIDGED.format(what),
        attributes=(semconv.ATTR_ROLLOUT_REPLICA,),
        source=_BRIDGED_SOURCE.format(engine_name),
    )


VLLM_KV_CACHE_USAGE = _bridged(semconv.M_VLLM_KV_CACHE_USAGE, OBSERVABLE_GAUGE, "KV cache usage, 0 to 1")
VLLM_REQUESTS_RUNNING = _bridged(semconv.M_VLLM_REQUESTS_RUNNING, OBSERVABLE_GAUGE, "requests running")
VLLM_REQUESTS_WAITING = _bridged(semconv.M_VLLM_REQUESTS_WAITING, OBSERVABLE_GAUGE, "requests waiting (its queue)")
VLLM_PREEMPTIONS = _bridged(semconv.M_VLLM_PREEMPTIONS, OBSERVABLE_COUNTER, "preemptions")
VLLM_TTFT = _bridged(semconv.M_VLLM_TTFT, HISTOGRAM, "time to first token")
ENGINE: tuple[InstrumentSpec, ...] = (
    VLLM_KV_CACHE_USAGE,
    VLLM_REQUESTS_RUNNING,
    VLLM_REQUESTS_WAITING,
    VLLM_PREEMPTIONS,
    VLLM_TTFT,
)

# ---------------------------------------------------------------- hardware (worker ranks, hardware semconv)
GPU_MEMORY_USAGE = InstrumentSpec(
    semconv.M_GPU_MEMORY_USAGE,
    OBSERVABLE_UP_DOWN_COUNTER,
    "By",
    "GPU memory used",
    attributes=(semconv.ATTR_HW_ID,),
    source=(
        "NVML `nvmlDeviceGetMemoryInfo().used`; without NVML `torch.cuda.mem_get_info` (total - free) of the device the"
        " process uses ([GPU and process metrics](gpu.md))."
    ),
)
GPU_MEMORY_LIMIT = InstrumentSpec(
    semconv.M_GPU_MEMORY_LIMIT,
    OBSERVABLE_UP_DOWN_COUNTER,
    "By",
    "Size of the GPU memory",
    attributes=(semconv.ATTR_HW_ID,),
    source="NVML / torch total memory.",
)
GPU_MEMORY_UTILIZATION = InstrumentSpec(
    semconv.M_GPU_MEMORY_UTILIZATION,
    OBSERVABLE_GAUGE,
    "1",
    "Fraction of GPU memory used",
    attributes=(semconv.ATTR_HW_ID,),
    source="usage / limit.",
)
GPU_UTILIZATION = InstrumentSpec(
    semconv.M_GPU_UTILIZATION,
    OBSERVABLE_GAUGE,
    "1",
    "Fraction of time spent in a specific task (hw.gpu.task)",
    attributes=(semconv.ATTR_HW_ID, semconv.ATTR_HW_GPU_TASK),
    source=(
        "NVML `nvmlDeviceGetUtilizationRates().gpu / 100` (fraction of time a kernel ran); encoder/decoder where the "
        "GPU reports them (NVML only)."
    ),
)
HW_POWER = InstrumentSpec(
    semconv.M_HW_POWER,
    OBSERVABLE_GAUGE,
    "W",
    "Instantaneous power drawn by the GPU",
    attributes=(semconv.ATTR_HW_ID, semconv.ATTR_HW_TYPE),
    source="NVML `nvmlDeviceGetPowerUsage` (mW / 1000).",
)
HW_ENERGY = InstrumentSpec(
    semconv.M_HW_ENERGY,
    OBSERVABLE_COUNTER,
    "J",
    "Energy consumed by the GPU",
    attributes=(semconv.ATTR_HW_ID, semconv.ATTR_HW_TYPE),
    source="NVML `nvmlDeviceGetTotalEnergyConsumption` (mJ / 1000, since the driver loaded).",
)
HW_TEMPERATURE = InstrumentSpec(
    semconv.M_HW_TEMPERATURE,
    OBSERVABLE_GAUGE,
    "Cel",
    "Temperature of the GPU",
    attributes=(semconv.ATTR_HW_ID, semconv.ATTR_HW_TYPE),
    source="NVML `nvmlDeviceGetTemperature` (GPU die).",
)
PROCESS_GPU_MEMORY_USAGE = InstrumentSpec(
    semconv.M_PROCESS_GPU_MEMORY_USAGE,
    OBSERVABLE_UP_DOWN_COUNTER,
    "By",
    "GPU memory held by this process (NVML process list, else torch's caching allocator)",
    attributes=(semconv.ATTR_HW_ID,),
    source=(
        "The memory this rank's own process holds on the device: its entry in NVML's compute process list, else "
        "`torch.cuda.memory_reserved` (which rank leaks)."
    ),
)

# ---------------------------------------------------------------- otel-verl itself (every process with a pipeline)
# Observable: the source of truth is the kernel's per-thread CPU clocks, read only when exported
# (no add() on any hot path); a counter: cumulative and monotonic, so rate() / per-step deltas work.
OVERHEAD_CPU_TIME = InstrumentSpec(
    semconv.M_OVERHEAD_CPU_TIME,
    OBSERVABLE_COUNTER,
    "s",
    "CPU time spent by otel-verl itself in this process: its threads, and its hooks on verl's threads",
    attributes=(semconv.ATTR_OVERHEAD_COMPONENT,),
    source=(
        "otel-verl's own CPU time in each process that has a pipeline (read at every export): its threads by their "
        "kernel thread CPU clocks, `hooks` = its wrappers' work on verl's threads ([Overhead](overhead.md))."
    ),
)

# Observable: the counts are kept by the bounded queues themselves (``instruments.drops``), read at export.
TELEMETRY_DROPPED = InstrumentSpec(
    semconv.M_TELEMETRY_DROPPED,
    OBSERVABLE_COUNTER,
    "{item}",
    "Telemetry otel-verl dropped in this process because a bounded queue was full (otel_verl.dropped.kind)",
    attributes=(semconv.ATTR_DROPPED_KIND,),
    source=(
        "Telemetry dropped because a bounded queue was full (a slow or unreachable metrics exporter): `step` = a step's"
        " logged values never recorded, `metric_export` = a collected metric batch never exported, `spool` = a spooled "
        "export batch dropped, oldest first, from the full on-disk spool; the first drop of each kind also logs one "
        "warning."
    ),
)

# Observable: the counts are kept by the spool itself (``spool.stats``), read at export.
SPOOL_BATCHES = InstrumentSpec(
    semconv.M_SPOOL_BATCHES,
    OBSERVABLE_COUNTER,
    "{batch}",
    "Export batches of this process's on-disk spool, by signal and outcome: spooled (the endpoint did not "
    "take them), resent, dropped (spool full, oldest first), rejected (refused for good when re-sent)",
    attributes=(semconv.ATTR_SIGNAL, semconv.ATTR_SPOOL_OUTCOME),
    source=(
        "The on-disk spool of each process with an OTLP exporter ([Faults](faults.md#the-on-disk-spool)), read at "
        "every export: `spooled` = the endpoint did not take the batch (written to disk), `resent` = taken later "
        "(this process's or an ended process's it adopted), `dropped` = lost (the spool was full, oldest first; "
        "unwritable or unreadable), `rejected` = refused for good when re-sent; only outcomes that happened are "
        "reported."
    ),
)
SPOOL_BYTES = InstrumentSpec(
    semconv.M_SPOOL_BYTES,
    OBSERVABLE_COUNTER,
    "By",
    "Bytes of the export batches counted in otel_verl.spool.batches (the OTLP protobuf requests)",
    attributes=(semconv.ATTR_SIGNAL, semconv.ATTR_SPOOL_OUTCOME),
    source="The bytes of the batches `otel_verl.spool.batches` counts (OTLP protobuf requests).",
)

ALL: tuple[InstrumentSpec, ...] = (
    TRAINING_STEP,
    TRAINING_STEPS,
    LAST_STEP_TIMESTAMP,
    STAGE_DURATION,
    KL,
    REWARD,
    THROUGHPUT,
    ROLLOUT_PROBS_DIFF,
    ROLLOUT_PROBS_CORRELATION,
    ROLLOUT_MISMATCH,
    OFF_POLICY_STALENESS,
    NONFINITE,
    GUARD_TRIGGERED,
    TRAINING_STALLED,
    STEP_TIME,
    TRAINER_IDLE_RATIO,
    TRAINER_POLL_LAG,
    POOL_TIME,
    ROLLOUT_IDLE_RATIO,
    GOODPUT_TIME,
    GOODPUT_DROPPED_GROUPS,
    TRAJECTORY_DURATION,
    LLM_CALL_DURATION,
    GEN_AI_CLIENT_OPERATION_DURATION,
    GEN_AI_CLIENT_TOKEN_USAGE,
    RESPONSE_TOKENS,
    TAIL_RATIO,
    DEGENERATE_RATIO,
    REPLICA_BUSY_TIME,
    GPU_MEMORY_USAGE,
    GPU_MEMORY_LIMIT,
    GPU_MEMORY_UTILIZATION,
    GPU_UTILIZATION,
    HW_POWER,
    HW_ENERGY,
    HW_TEMPERATURE,
    PROCESS_GPU_MEMORY_USAGE,
    OVERHEAD_CPU_TIME,
    TELEMETRY_DROPPED,
    SPOOL_BATCHES,
    SPOOL_BYTES,
)


def logged_value(key: str) -> InstrumentSpec:
    """The gauge that carries a key verl logs (``actor/kl_loss`` -> ``verl.actor.kl_loss``)."""
    return InstrumentSpec(semconv.metric_name(key), GAUGE, LOGGED_VALUE.unit, LOGGED_VALUE.description.format(key=key))


def create(meter: object, spec: InstrumentSpec) -> object:
    """The synchronous instrument ``spec`` describes, on ``meter``."""
    kwargs: dict[str, object] = {"unit": spec.unit, "description": spec.description}
    if spec.kind == GAUGE:
        return meter.create_gauge(spec.name, **kwargs)  # type: ignore[attr-defined]
    if spec.kind == COUNTER:
        return meter.create_counter(spec.name, **kwargs)  # type: ignore[attr-defined]
    if spec.kind == UP_DOWN_COUNTER:
        return meter.create_up_down_counter(spec.name, **kwargs)  # type: ignore[attr-defined]
    if spec.kind == HISTOGRAM:
        return meter.create_histogram(  # type: ignore[attr-defined]
            spec.name, explicit_bucket_boundaries_advisory=spec.buckets, **kwargs
        )
    raise ValueError(f"{spec.name}: {spec.kind} instruments need callbacks (create_observable)")


def create_observable(meter: object, spec: InstrumentSpec, callbacks: list[object]) -> object:
    """The asynchronous instrument ``spec`` describes, read by ``callbacks`` at collection time."""
    factory = {
        OBSERVABLE_GAUGE: "create_observable_gauge",
        OBSERVABLE_COUNTER: "create_observable_counter",
        OBSERVABLE_UP_DOWN_COUNTER: "create_observable_up_down_counter",
    }.get(spec.kind)
    if factory is None:
        raise ValueError(f"{spec.name} is a {spec.kind}")
    return getattr(meter, factory)(spec.name, callbacks=callbacks, unit=spec.unit, description=spec.description)
