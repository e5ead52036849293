"""The real runs that several test modules read, each made once per session through ``verl_runs``
(tests/conftest.py). A test that can check its claim on one of these takes it instead of a run of
its own: a verl run on CPU costs about a minute of CI, whatever it checks.

* ``tail_run``: one per driver, 2 steps, no validation, with the harness's rollout faults (every
  5th sampled request 1 s slow; every 2nd a loop or an empty answer; noisy rollout log-probs; on
  v1 every 7th request fails), a rollout span budget below the trajectories per step, and sampled
  generations on beside verl's own dump (``trainer.rollout_data_dir``). Read by
  test_rollout_tail_e2e (the long tail, generation health and the guard's rule on it),
  test_mismatch_e2e (rollout/training mismatch), test_logs_e2e (samples against verl's dump) and
  tests/ops/test_query_grammar.
* ``UserCodeRuns``: one per driver, 2 steps, user code on the plain OpenTelemetry API (a custom
  reward function that POSTs each response to an HTTP endpoint, a custom agent loop:
  ``verl_cpu_harness.user_telemetry``) with every instrumentation ``opentelemetry-bootstrap -a
  install`` picks on the job's ``PYTHONPATH``, exporting to the OTLP JSON files and over OTLP to
  local receivers (OTLP/HTTP and OTLP/gRPC for different signals). Read by
  test_bootstrap_instrumentations and test_user_telemetry (fixture ``user_code_runs``).
* ``switched_off_run``: v0 GRPO launched by ``opentelemetry-instrument`` with otel-verl switched
  off (``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=verl``), its actor rank killed in step 2
  (``VERL_CPU_HARNESS_KILL_AT``). Read by test_verl_cpu (the switch leaves no telemetry, even on
  a job's error path) and faults/test_worker_death (the job fails as it does without otel-verl).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.components import require

STEPS = 2
CLUSTER_RANKS = 2  # cluster_run's data-parallel ranks (tests/e2e/conftest.py)
WANDB_SECRET = "wandb-SECRET-4f1c9e"  # in cluster_run's config
HF_SECRET = "hf_SECRET_9a7b3d"  # in cluster_run's Ray runtime_env
KILL_AT = "compute_log_prob:2"  # the actor rank's 2nd log-prob call: step 2 (val_before_train makes none)
KILLED_STEPS = 3
TAIL_BUDGET = 3  # rollout trees kept per step: below the 8 trajectories of a step
TAIL_SLOW_S = 1.0
TAIL_FAIL_EVERY = 7  # v1 only: on v0 a failed trajectory fails the step
# every 2nd sampled request answers a loop or an empty response, in turn: a quarter of a step's 8
# responses each, above the guard's degenerate_responses threshold (0.2) at both steps
TAIL_DEGENERATE_EVERY = 2
GUARD_DEGENERATE_RULE = "degenerate_responses"
SAMPLES_PER_STEP = 3
SAMPLED = {
    "OTEL_VERL_SAMPLES": "true",
    "OTEL_VERL_SAMPLES_EVERY_N_STEPS": "1",
    "OTEL_VERL_SAMPLES_PER_STEP": str(SAMPLES_PER_STEP),
}
TAIL_ENV = {
    "OTEL_VERL_ROLLOUT_SPANS_PER_STEP": str(TAIL_BUDGET),
    "OTEL_VERL_ROLLOUT_SLOWEST_PER_STEP": "1",
    "VERL_CPU_HARNESS_SLOW_EVERY": f"5:{TAIL_SLOW_S}",
    # test_mismatch_e2e.py's; sigma 2: with a quarter of the responses loops (whose probabilities the
    # noise leaves correlated), sigma 1 left verl's correlation at 0.51 at a v1 step
    "VERL_CPU_HARNESS_LOGPROB_NOISE": "2.0",
    "VERL_CPU_HARNESS_DEGENERATE_EVERY": str(TAIL_DEGENERATE_EVERY),  # generation health
    # the guard's generation-health rule only records (its action chosen per rule); the mismatch rule
    # keeps the global action (alert)
    "OTEL_VERL_GUARD_ACTIONS": f"{GUARD_DEGENERATE_RULE}=record",
    **SAMPLED,
}


def rollout_dump(verl_runs: Any, driver: str) -> Path:
    """Where verl itself dumps the tail run's generations (``trainer.rollout_data_dir``)."""
    return verl_runs.root / f"rollout-dump-{driver}"


def tail_run(verl_runs: Any, driver: str) -> Any:
    env = dict(TAIL_ENV)
    if driver == "v1":
        env["VERL_CPU_HARNESS_FAIL_EVERY"] = str(TAIL_FAIL_EVERY)
    run = verl_runs.get(
        driver,
        "grpo",
        steps=STEPS,
        val_before_train=False,
        env=env,
        extra=[f"trainer.rollout_data_dir={rollout_dump(verl_runs, driver)}"],
    )
    assert run.returncode == 0, run.output[-4000:]
    return run


def switched_off_run(verl_runs: Any) -> Any:
    env = {"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "verl", "VERL_CPU_HARNESS_KILL_AT": KILL_AT}
    return verl_runs.get("v0", "grpo", steps=KILLED_STEPS, env=env)


# driver -> the protocol of each signal (the other protocol for the other signals)
USER_CODE_PROTOCOLS = {
    "v0": {"traces": "http/protobuf", "metrics": "grpc", "logs": "http/protobuf"},
    "v1": {"traces": "grpc", "metrics": "http/protobuf", "logs": "grpc"},
}
USER_REWARD_PATH = "/reward"  # where the user's reward function POSTs each response


def _endpoints(protocols: dict[str, str], http_url: str, grpc_url: str) -> dict[str, str]:
    env = {}
    for signal, protocol in protocols.items():
        env[f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"] = protocol
        env[f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"] = (
            f"{http_url}/v1/{signal}" if protocol == "http/protobuf" else grpc_url
        )
    return env


class UserCodeRuns:
    """The user-code runs, made on first use (``verl_cpu_harness.instrumented.run_instrumented``). Each run
    also has ``received`` / ``received_grpc``: what the local receivers got."""

    def __init__(self, root: Path, run_instrumented: Callable[..., Any]) -> None:
        self._root = root
        self._run = run_instrumented
        self._runs: dict[str, Any] = {}

    def get(self, driver: str) -> Any:
        if driver not in self._runs:
            self._runs[driver] = self._make(driver)
        return self._runs[driver]

    def _make(self, driver: str) -> Any:
        from verl_cpu_harness import bootstrap_site
        from verl_cpu_harness import user_telemetry as ut
        from verl_cpu_harness.otlp_receiver import OtlpReceiver

        from support.otlp_grpc_receiver import GrpcReceiver

        try:
            site, requirements = bootstrap_site.build()
        except Exception as exc:  # noqa: BLE001 - no package index here
            require("the instrumentations opentelemetry-bootstrap picks", f"pip could not get them: {exc}")
        assert len(requirements) >= 15, requirements
        workdir = self._root / f"user-code-{driver}"
        workdir.mkdir(parents=True)
        spool = workdir / "spool"
        # an earlier job's spool folder: the spooler threads start with the pipeline, not from
        # inside a first export (test_bootstrap_instrumentations says why that matters)
        spool.mkdir(mode=0o700)
        path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
        with OtlpReceiver() as rx, GrpcReceiver() as grx:
            env = {
                "PYTHONPATH": path,
                "OTEL_TRACES_EXPORTER": "otlp_json_file,otlp",
                "OTEL_METRICS_EXPORTER": "otlp_json_file,otlp",
                "OTEL_LOGS_EXPORTER": "otlp_json_file,otlp",
                "OTEL_VERL_SPOOL_DIR": str(spool),
                **_endpoints(USER_CODE_PROTOCOLS[driver], rx.url, grx.url),
                ut.HTTP_URL_VAR: rx.url + USER_REWARD_PATH,
            }
            run = self._run(workdir, driver, "grpo", env=env, steps=STEPS, extra=tuple(ut.overrides(workdir)))
        assert run.returncode == 0, run.output[-4000:]
        assert sorted(k for k in run.console if k > 0) == list(range(1, STEPS + 1))
        run.received = rx.requests
        run.received_grpc = grx.requests
        return run
