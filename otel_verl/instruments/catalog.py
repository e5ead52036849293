"""Every named instrument otel-verl creates: name, kind, unit, buckets, description, side by side.

The one definition. ``Instruments`` (``otel_verl.instruments``) builds them on a process's meter,
``prometheus.prometheus_name`` derives the series names the ``collector/`` kit queries, and
README.md's reference tables are checked against this list (``tests/unit/instruments/test_instruments_catalog.py``).
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
    description: str
    buckets: tuple[float, ...] | None = None


# ---------------------------------------------------------------- training (TaskRunner, Tracking.log)
TRAINING_STEP = InstrumentSpec(semconv.M_TRAINING_STEP, GAUGE, "{step}", "Global step just finished")
TRAINING_STEPS = InstrumentSpec(semconv.M_TRAINING_STEPS, COUNTER, "{step}", "Training steps completed")
LAST_STEP_TIMESTAMP = InstrumentSpec(
    semconv.M_LAST_STEP_TIMESTAMP, GAUGE, "s", "Unix time the last training step ended (heartbeat)"
)
STAGE_DURATION = InstrumentSpec(
    semconv.M_STAGE_DURATION, HISTOGRAM, "s", "Duration of each stage verl times", DURATION_BUCKETS
)
# No unit: Prometheus 3 would name a unit-"1" gauge ``..._ratio``, and neither is a ratio.
KL = InstrumentSpec(semconv.M_KL, GAUGE, "", "KL divergence as logged by verl")
REWARD = InstrumentSpec(semconv.M_REWARD, GAUGE, "", "Mean sequence reward of the batch")
THROUGHPUT = InstrumentSpec(semconv.M_THROUGHPUT, GAUGE, "{token}/s", "Tokens per second per GPU (perf/throughput)")
NONFINITE = InstrumentSpec(semconv.M_NONFINITE, COUNTER, "{value}", "NaN or inf values verl logged")
TRAINING_STALLED = InstrumentSpec(
    semconv.M_TRAINING_STALLED, GAUGE, "", "1 while no training step has finished for OTEL_VERL_STALL_AFTER"
)
GUARD_TRIGGERED = InstrumentSpec(
    semconv.M_GUARD_TRIGGERED, COUNTER, "{firing}", "Guard rules that fired (attribute verl.guard.rule)"
)
STEP_TIME = InstrumentSpec(
    semconv.M_STEP_TIME, GAUGE, "s", "Seconds of the last step by verl.time.category (they add up to the step)"
)
TRAINER_IDLE_RATIO = InstrumentSpec(
    semconv.M_TRAINER_IDLE_RATIO, GAUGE, "1", "Share of the last step the trainer waited for rollouts"
)
TRAINER_POLL_LAG = InstrumentSpec(
    semconv.M_TRAINER_POLL_LAG,
    GAUGE,
    "s",
    "Seconds of the last step the trainer waited after its rollouts were done (v1 replay buffer poll)",
)
POOL_TIME = InstrumentSpec(
    semconv.M_POOL_TIME,
    GAUGE,
    "s",
    "Seconds of the last step per pool role (verl.pool.role) busy, waiting or idle (verl.pool.state)",
)
ROLLOUT_IDLE_RATIO = InstrumentSpec(
    semconv.M_ROLLOUT_IDLE_RATIO, GAUGE, "1", "Share of the last step the trainer did not hold the rollout replicas"
)
# One gauge per numeric key verl logs, named by ``semconv.metric_name(key)``.
LOGGED_VALUE = InstrumentSpec(semconv.METRIC_PREFIX + "<key>", GAUGE, "", "verl logged key {key!r}")

# ---------------------------------------------------------------- rollout (agent-loop workers)
TRAJECTORY_DURATION = InstrumentSpec(
    semconv.M_ROLLOUT_TRAJECTORY_DURATION,
    HISTOGRAM,
    "s",
    "Duration of one rollout trajectory (agent loop incl. reward)",
    DURATION_BUCKETS,
)
LLM_CALL_DURATION = InstrumentSpec(
    semconv.M_ROLLOUT_LLM_CALL_DURATION, HISTOGRAM, "s", "Duration of one LLM server generate call", DURATION_BUCKETS
)
RESPONSE_TOKENS = InstrumentSpec(
    semconv.M_ROLLOUT_RESPONSE_TOKENS,
    HISTOGRAM,
    "{token}",
    "Response tokens of one trajectory (verl's response_length)",
    TOKEN_BUCKETS,
)
TAIL_RATIO = InstrumentSpec(
    semconv.M_ROLLOUT_TAIL_RATIO, GAUGE, "1", "Slowest / median trajectory duration of a step in this worker"
)

# Observable: read at export from the server's own in-flight bookkeeping (a union of request
# intervals, which no client sees); a counter, so busy share per replica is rate().
REPLICA_BUSY_TIME = InstrumentSpec(
    semconv.M_ROLLOUT_REPLICA_BUSY_TIME,
    OBSERVABLE_COUNTER,
    "s",
    "Seconds this rollout replica had at least one request in generate (verl.rollout.replica)",
)

# ---------------------------------------------------------------- hardware (worker ranks, hardware semconv)
GPU_MEMORY_USAGE = InstrumentSpec(semconv.M_GPU_MEMORY_USAGE, OBSERVABLE_UP_DOWN_COUNTER, "By", "GPU memory used")
GPU_MEMORY_LIMIT = InstrumentSpec(
    semconv.M_GPU_MEMORY_LIMIT, OBSERVABLE_UP_DOWN_COUNTER, "By", "Size of the GPU memory"
)
GPU_MEMORY_UTILIZATION = InstrumentSpec(
    semconv.M_GPU_MEMORY_UTILIZATION, OBSERVABLE_GAUGE, "1", "Fraction of GPU memory used"
)
GPU_UTILIZATION = InstrumentSpec(
    semconv.M_GPU_UTILIZATION, OBSERVABLE_GAUGE, "1", "Fraction of time spent in a specific task (hw.gpu.task)"
)
HW_POWER = InstrumentSpec(semconv.M_HW_POWER, OBSERVABLE_GAUGE, "W", "Instantaneous power drawn by the GPU")
HW_ENERGY = InstrumentSpec(semconv.M_HW_ENERGY, OBSERVABLE_COUNTER, "J", "Energy consumed by the GPU")
HW_TEMPERATURE = InstrumentSpec(semconv.M_HW_TEMPERATURE, OBSERVABLE_GAUGE, "Cel", "Temperature of the GPU")
PROCESS_GPU_MEMORY_USAGE = InstrumentSpec(
    semconv.M_PROCESS_GPU_MEMORY_USAGE,
    OBSERVABLE_UP_DOWN_COUNTER,
    "By",
    "GPU memory held by this process (NVML process list, else torch's caching allocator)",
)

# ---------------------------------------------------------------- otel-verl itself (every process with a pipeline)
# Observable: the source of truth is the kernel's per-thread CPU clocks, read only when exported
# (no add() on any hot path); a counter: cumulative and monotonic, so rate() / per-step deltas work.
OVERHEAD_CPU_TIME = InstrumentSpec(
    semconv.M_OVERHEAD_CPU_TIME,
    OBSERVABLE_COUNTER,
    "s",
    "CPU time spent by otel-verl itself in this process: its threads, and its hooks on verl's threads",
)

# Observable: the counts are kept by the bounded queues themselves (``process.drops``), read at export.
TELEMETRY_DROPPED = InstrumentSpec(
    semconv.M_TELEMETRY_DROPPED,
    OBSERVABLE_COUNTER,
    "{item}",
    "Telemetry otel-verl dropped in this process because a bounded queue was full (otel_verl.dropped.kind)",
)

ALL: tuple[InstrumentSpec, ...] = (
    TRAINING_STEP,
    TRAINING_STEPS,
    LAST_STEP_TIMESTAMP,
    STAGE_DURATION,
    KL,
    REWARD,
    THROUGHPUT,
    NONFINITE,
    GUARD_TRIGGERED,
    TRAINING_STALLED,
    STEP_TIME,
    TRAINER_IDLE_RATIO,
    TRAINER_POLL_LAG,
    POOL_TIME,
    ROLLOUT_IDLE_RATIO,
    TRAJECTORY_DURATION,
    LLM_CALL_DURATION,
    RESPONSE_TOKENS,
    TAIL_RATIO,
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
