"""A real verl run on CPU with otel-verl, zero-code: ``opentelemetry-instrument python -m
verl.trainer.main_ppo ...`` as a subprocess (``run_verl``), exporting with the OTLP JSON file
exporters into the run's own ``telemetry`` folder (unless ``env`` says otherwise), read back with
otel-verl's own readers. The e2e tests' run (``verl_runs`` in tests/conftest.py caches it per
configuration) and the benchmarks' that measure whole runs (``bench/self_cost.py``,
``bench/tail_cost.py``, ``bench/stack_load.py``).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .runner import run_verl

if TYPE_CHECKING:
    from otel_verl.offline.otlp_files import MetricPoint, SpanRecord

RUN_TIMEOUT_S = 900


@dataclass
class Run:
    driver: str
    algo: str
    returncode: int
    output: str
    console: dict[int, dict[str, float]]  # verl's own console log: the ground truth
    spans: list[SpanRecord]
    points: list[MetricPoint]
    telemetry_dir: Path
    wall_s: float = 0.0  # the whole job, launcher start to exit
    exit_tail_s: float | None = None  # from verl's last console step line to the job's exit


class _LastStepClock:
    """A text stream for run_verl that notes when verl's console logger printed a step."""

    def __init__(self) -> None:
        self.last_step: float | None = None

    def write(self, text: str) -> int:
        if " step:" in text and " - " in text:
            self.last_step = time.monotonic()
        return len(text)

    def flush(self) -> None:
        pass


def telemetry_env(folder: Path) -> dict[str, str]:
    return {
        "OTEL_TRACES_EXPORTER": "otlp_json_file",
        "OTEL_METRICS_EXPORTER": "otlp_json_file",
        "OTEL_LOGS_EXPORTER": "otlp_json_file",  # logs-*.jsonl: python logging and samples
        "OTEL_VERL_FILE_DIR": str(folder),
        "OTEL_VERL_SPOOL_DIR": str(folder / "spool"),  # a run's own, not the user's default of the host
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",  # only step-boundary exports in these runs
        "OTEL_SERVICE_NAME": "verl-e2e",
    }


def run_instrumented(
    workdir: Path,
    driver: str,
    algo: str,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
    **kwargs,
) -> Run:
    from otel_verl.offline.otlp_files import read_metric_points, read_spans

    shutil.rmtree(workdir / "telemetry", ignore_errors=True)
    folder = workdir / "telemetry"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    clock = _LastStepClock()
    result = run_verl(
        workdir,
        driver=driver,
        algo=algo,
        launcher="opentelemetry-instrument",
        env={**clean, **telemetry_env(folder), **(env or {})},
        timeout=RUN_TIMEOUT_S if timeout_s is None else timeout_s,
        stream=clock,
        **kwargs,
    )
    ended = time.monotonic()
    return Run(
        driver,
        algo,
        result.returncode,
        result.output,
        result.metrics,
        read_spans(folder) if folder.exists() else [],
        read_metric_points(folder) if folder.exists() else [],
        folder,
        result.wall_s,
        None if clock.last_step is None else ended - clock.last_step,
    )
