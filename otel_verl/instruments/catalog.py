"""Every named instrument otel-verl creates: name, kind, unit, buckets, description, side by side.

The one definition. ``Instruments`` (``otel_verl.instruments``) builds them on a process's meter,
``prometheus.prometheus_name`` derives the series names the ``collector/`` kit queries, and
the metrics page (``docs/generated/metrics.md``, by ``scripts/gen_docs.py``) is written from this
list, with where each value comes from (``otel_verl.telemetry_catalog.SOURCES``: documentation
text, kept off the runtime path). Each instrument here is the one declaration of its metric's name:
``semconv``'s ``M_*`` constants are generated from this module (``scripts/gen_docs.py``, with
``M_`` + the instrument's name here).
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


# ---------------------------------------------------------------- training (TaskRunner, Tracking.log)
TRAINING_STEP = InstrumentSpec(
    "verl.training.step",
    GAUGE,
    "{step}",
    "Global step just finished",
)
TRAINING_STEPS = InstrumentSpec(
    "verl.training.steps",
    COUNTER,
    "{step}",
    "Training steps completed",
)
LAST_STEP_TIMESTAMP = InstrumentSpec(
    "verl.training.last_step.timestamp",
    GAUGE,
    "s",
    "Unix time the last training step ended (heartbeat)",
)
STAGE_DURATION = InstrumentSpec(
    "verl.stage.duration",
    HISTOGRAM,
    "s",
    "Duration of each stage verl times",
    DURATION_BUCKETS,
    attributes=(semconv.ATTR_STAGE,),
)
# No unit: Prometheus 3 would name a unit-"1" gauge ``..._ratio``, and neither is a ratio.
KL = InstrumentSpec(
    "verl.training.kl",
    GAUGE,
    "",
    "KL divergence as logged by verl",
    attributes=(semconv.ATTR_KL_SOURCE,),
)
REWARD = InstrumentSpec(
    "verl.training.reward",
    GAUGE,
    "",
    "Mean sequence reward of the batch",
    attributes=(semconv.ATTR_REWARD_SOURCE,),
)
THROUGHPUT = InstrumentSpec(
    "verl.training.throughput",
    GAUGE,
    "{token}/s",
    "Tokens per second per GPU (perf/throughput)",
)
# Rollout/training mismatch and staleness: verl's own values, never recomputed.
ROLLOUT_PROBS_DIFF = InstrumentSpec(
    "verl.training.rollout_probs.diff",
    GAUGE,
    "",
    "Absolute difference of the rollout's and the trainer's token probabilities over the batch (verl.stat)",
    attributes=(semconv.ATTR_STAT,),
)
ROLLOUT_PROBS_CORRELATION = InstrumentSpec(
    "verl.training.rollout_probs.correlation",
    GAUGE,
    "",
    "Pearson correlation of the rollout's and the trainer's token probabilities over the batch",
)
ROLLOUT_MISMATCH = InstrumentSpec(
    "verl.training.rollout_mismatch",
    GAUGE,
    "",
    "Rollout policy against the trained policy over the batch, by verl.mismatch.measure (verl's rollout_corr/*)",
    attributes=(semconv.ATTR_MISMATCH_MEASURE,),
)
OFF_POLICY_STALENESS = InstrumentSpec(
    "verl.training.off_policy.staleness",
    GAUGE,
    "{version}",
    "Model versions the trained trajectories lag behind the policy (verl.staleness.bound, verl.stat)",
    attributes=(semconv.ATTR_STALENESS_BOUND, semconv.ATTR_STAT),
)
NONFINITE = InstrumentSpec(
    "verl.training.nonfinite",
    COUNTER,
    "{value}",
    "NaN or inf values verl logged",
    attributes=(semconv.ATTR_METRIC_KEY,),
)
GUARD_TRIGGERED = InstrumentSpec(
    "verl.guard.triggered",
    COUNTER,
    "{firing}",
    "Guard rules that fired (attributes verl.guard.rule, verl.guard.action)",
    attributes=(semconv.ATTR_GUARD_RULE, semconv.ATTR_GUARD_ACTION),
)
TRAINING_STALLED = InstrumentSpec(
    "verl.training.stalled",
    GAUGE,
    "",
    "1 while no training step has finished for OTEL_VERL_STALL_AFTER",
)
STEP_TIME = InstrumentSpec(
    "verl.step.time",
    GAUGE,
    "s",
    "Seconds of the last step by verl.time.category (they add up to the step)",
    attributes=(semconv.ATTR_TIME_CATEGORY,),
)
TRAINER_IDLE_RATIO = InstrumentSpec(
    "verl.trainer.idle_ratio",
    GAUGE,
    "1",
    "Share of the last step the trainer waited for rollouts",
)
TRAINER_POLL_LAG = InstrumentSpec(
    "verl.trainer.poll_lag",
    GAUGE,
    "s",
    "Seconds of the last step the trainer waited after its rollouts were done (v1 replay buffer poll)",
)
POOL_TIME = InstrumentSpec(
    "verl.pool.time",
    GAUGE,
    "s",
    "Seconds of the last step per pool role (verl.pool.role) busy, waiting or idle (verl.pool.state)",
    attributes=(semconv.ATTR_POOL_ROLE, semconv.ATTR_POOL_STATE),
)
ROLLOUT_IDLE_RATIO = InstrumentSpec(
    "verl.rollout.idle_ratio",
    GAUGE,
    "1",
    "Share of the last step the trainer did not hold the rollout replicas",
)
GOODPUT_TIME = InstrumentSpec(
    "verl.goodput.time",
    COUNTER,
    "s",
    "Seconds of training steps per role (verl.goodput.role) in each goodput bucket (verl.goodput.bucket)",
    attributes=(semconv.ATTR_GOODPUT_ROLE, semconv.ATTR_GOODPUT_BUCKET),
)
GOODPUT_DROPPED_GROUPS = InstrumentSpec(
    "verl.goodput.dropped_groups",
    COUNTER,
    "{group}",
    "Prompt groups generated and not trained on (verl's filtered, discarded and evicted groups)",
)
# One gauge per numeric key verl logs, named by ``semconv.metric_name(key)``.
LOGGED_VALUE = InstrumentSpec(
    semconv.METRIC_PREFIX + "<key>",
    GAUGE,
    "",
    "verl logged key {key!r}",
)

# ---------------------------------------------------------------- rollout (agent-loop workers)
ROLLOUT_TRAJECTORY_DURATION = InstrumentSpec(
    "verl.rollout.trajectory.duration",
    HISTOGRAM,
    "s",
    "Duration of one rollout trajectory (agent loop incl. reward)",
    DURATION_BUCKETS,
    attributes=(semconv.ATTR_ROLLOUT_VALIDATE, semconv.GEN_AI_AGENT_NAME, semconv.ATTR_ROLLOUT_STATUS),
)
ROLLOUT_LLM_CALL_DURATION = InstrumentSpec(
    "verl.rollout.llm_call.duration",
    HISTOGRAM,
    "s",
    "Duration of one LLM server generate call",
    DURATION_BUCKETS,
    attributes=(semconv.ATTR_ROLLOUT_VALIDATE, semconv.ATTR_ROLLOUT_STATUS),
)
# The GenAI conventions' client metrics, from the same emission point as ROLLOUT_LLM_CALL_DURATION. Both are kept:
# this pair is what GenAI-aware backends and dashboards read (by model and provider); the verl.rollout
# one keeps the range of an RL rollout's calls (the advised buckets end at 81.92 s, a long generation
# runs for minutes), the validate / status split and the kit's queries (docs/rollouts.md).
# No server.address / server.port (recommended, not required): every agent-loop worker calls every
# replica, so they would multiply these series by the replicas; the LLM-call span has them.
GEN_AI_CLIENT_OPERATION_DURATION = InstrumentSpec(
    "gen_ai.client.operation.duration",
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
)
GEN_AI_CLIENT_TOKEN_USAGE = InstrumentSpec(
    "gen_ai.client.token.usage",
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
)
ROLLOUT_RESPONSE_TOKENS = InstrumentSpec(
    "verl.rollout.response.tokens",
    HISTOGRAM,
    "{token}",
    "Response tokens of one trajectory (verl's response_length)",
    TOKEN_BUCKETS,
    attributes=(semconv.ATTR_ROLLOUT_VALIDATE, semconv.GEN_AI_AGENT_NAME),
)
ROLLOUT_TAIL_RATIO = InstrumentSpec(
    "verl.rollout.tail_ratio",
    GAUGE,
    "1",
    "Slowest / median trajectory duration of a step in this worker",
    attributes=(semconv.ATTR_ROLLOUT_VALIDATE,),
)
ROLLOUT_DEGENERATE_RATIO = InstrumentSpec(
    "verl.rollout.degenerate_ratio",
    GAUGE,
    "1",
    "Share of a step's responses in this worker that hit the length limit, were empty or repetitive "
    "(verl.rollout.degenerate.kind)",
    attributes=(semconv.ATTR_ROLLOUT_VALIDATE, semconv.ATTR_ROLLOUT_DEGENERATE_KIND),
)

# Observable: read at export from the server's own in-flight bookkeeping (a union of request
# intervals, which no client sees); a counter, so busy share per replica is rate().
ROLLOUT_REPLICA_BUSY_TIME = InstrumentSpec(
    "verl.rollout.replica.busy_time",
    OBSERVABLE_COUNTER,
    "s",
    "Seconds this rollout replica had at least one request in generate (verl.rollout.replica)",
    attributes=(semconv.ATTR_ROLLOUT_REPLICA,),
)

# ---------------------------------------------------------------- the rollout engine's own (rollout servers)
# Bridged from the engine's Prometheus registry (``engine_metrics``: every ``vllm:*`` / ``sglang:*``
# family, these are the ones the collector/ kit queries), with verl.rollout.replica and its labels.
_BRIDGED = "vLLM's {} (bridged from its Prometheus registry, per verl.rollout.replica)"


def _bridged(name: str, kind: str, what: str) -> InstrumentSpec:
    return InstrumentSpec(
        name,
        kind,
        "",
        _BRIDGED.format(what),
        attributes=(semconv.ATTR_ROLLOUT_REPLICA,),
    )


VLLM_KV_CACHE_USAGE = _bridged("vllm.kv_cache_usage_perc", OBSERVABLE_GAUGE, "KV cache usage, 0 to 1")
VLLM_REQUESTS_RUNNING = _bridged("vllm.num_requests_running", OBSERVABLE_GAUGE, "requests running")
VLLM_REQUESTS_WAITING = _bridged("vllm.num_requests_waiting", OBSERVABLE_GAUGE, "requests waiting (its queue)")
VLLM_PREEMPTIONS = _bridged("vllm.num_preemptions", OBSERVABLE_COUNTER, "preemptions")
VLLM_TTFT = _bridged("vllm.time_to_first_token_seconds", HISTOGRAM, "time to first token")
ENGINE: tuple[InstrumentSpec, ...] = (
    VLLM_KV_CACHE_USAGE,
    VLLM_REQUESTS_RUNNING,
    VLLM_REQUESTS_WAITING,
    VLLM_PREEMPTIONS,
    VLLM_TTFT,
)

# ---------------------------------------------------------------- hardware (worker ranks, hardware semconv)
GPU_MEMORY_USAGE = InstrumentSpec(
    "hw.gpu.memory.usage",
    OBSERVABLE_UP_DOWN_COUNTER,
    "By",
    "GPU memory used",
    attributes=(semconv.ATTR_HW_ID,),
)
GPU_MEMORY_LIMIT = InstrumentSpec(
    "hw.gpu.memory.limit",
    OBSERVABLE_UP_DOWN_COUNTER,
    "By",
    "Size of the GPU memory",
    attributes=(semconv.ATTR_HW_ID,),
)
GPU_MEMORY_UTILIZATION = InstrumentSpec(
    "hw.gpu.memory.utilization",
    OBSERVABLE_GAUGE,
    "1",
    "Fraction of GPU memory used",
    attributes=(semconv.ATTR_HW_ID,),
)
GPU_UTILIZATION = InstrumentSpec(
    "hw.gpu.utilization",
    OBSERVABLE_GAUGE,
    "1",
    "Fraction of time spent in a specific task (hw.gpu.task)",
    attributes=(semconv.ATTR_HW_ID, semconv.ATTR_HW_GPU_TASK),
)
HW_POWER = InstrumentSpec(
    "hw.power",
    OBSERVABLE_GAUGE,
    "W",
    "Instantaneous power drawn by the GPU",
    attributes=(semconv.ATTR_HW_ID, semconv.ATTR_HW_TYPE),
)
HW_ENERGY = InstrumentSpec(
    "hw.energy",
    OBSERVABLE_COUNTER,
    "J",
    "Energy consumed by the GPU",
    attributes=(semconv.ATTR_HW_ID, semconv.ATTR_HW_TYPE),
)
HW_TEMPERATURE = InstrumentSpec(
    "hw.temperature",
    OBSERVABLE_GAUGE,
    "Cel",
    "Temperature of the GPU",
    attributes=(semconv.ATTR_HW_ID, semconv.ATTR_HW_TYPE),
)
PROCESS_GPU_MEMORY_USAGE = InstrumentSpec(
    "verl.process.gpu.memory.usage",
    OBSERVABLE_UP_DOWN_COUNTER,
    "By",
    "GPU memory held by this process (NVML process list, else torch's caching allocator)",
    attributes=(semconv.ATTR_HW_ID,),
)

# ---------------------------------------------------------------- otel-verl itself (every process with a pipeline)
# Observable: the source of truth is the kernel's per-thread CPU clocks, read only when exported
# (no add() on any hot path); a counter: cumulative and monotonic, so rate() / per-step deltas work.
OVERHEAD_CPU_TIME = InstrumentSpec(
    "otel_verl.overhead.cpu_time",
    OBSERVABLE_COUNTER,
    "s",
    "CPU time spent by otel-verl itself in this process: its threads, and its hooks on verl's threads",
    attributes=(semconv.ATTR_OVERHEAD_COMPONENT,),
)

# Observable: the counts are kept by the bounded queues themselves (``instruments.drops``), read at export.
TELEMETRY_DROPPED = InstrumentSpec(
    "otel_verl.telemetry.dropped",
    OBSERVABLE_COUNTER,
    "{item}",
    "Telemetry otel-verl dropped in this process because a bounded queue was full (otel_verl.dropped.kind)",
    attributes=(semconv.ATTR_DROPPED_KIND,),
)

# Observable: the counts are kept by the spool itself (``spool.stats``), read at export.
SPOOL_BATCHES = InstrumentSpec(
    "otel_verl.spool.batches",
    OBSERVABLE_COUNTER,
    "{batch}",
    "Export batches of this process's on-disk spool, by signal and outcome: spooled (the endpoint did not "
    "take them), resent, dropped (spool full, oldest first), rejected (refused for good when re-sent)",
    attributes=(semconv.ATTR_SIGNAL, semconv.ATTR_SPOOL_OUTCOME),
)
SPOOL_BYTES = InstrumentSpec(
    "otel_verl.spool.bytes",
    OBSERVABLE_COUNTER,
    "By",
    "Bytes of the export batches counted in otel_verl.spool.batches (the OTLP protobuf requests)",
    attributes=(semconv.ATTR_SIGNAL, semconv.ATTR_SPOOL_OUTCOME),
)

# Every instrument declared above, in order, but the generic gauges' template and the engine's.
ALL: tuple[InstrumentSpec, ...] = tuple(
    v for v in list(globals().values()) if isinstance(v, InstrumentSpec) and v is not LOGGED_VALUE and v not in ENGINE
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
