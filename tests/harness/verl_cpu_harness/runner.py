"""Run ``python -m verl.trainer.main_ppo`` on the harness and read its console metrics."""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .assets import make_assets
from .command import ROLLOUT_MODEL, verl_args

# verl's console logger (verl/utils/logger/aggregate_logger.py, LocalLogger.log) prints
#     concat_dict_to_str(data, step) == "step:N - key:value - key:value ..."
# with value = pprint.pformat(v) for every numbers.Number v, so numpy 2 scalars read
# "np.float64(0.5)" / "np.int64(3)", bools "True", and non-finite floats "nan" / "inf".
# Lines printed in a Ray actor are prefixed by Ray, e.g. "(TaskRunner pid=123) step:1 - ...".
_STEP_LINE = re.compile(r"(?:^|[\s)])step:(-?\d+)(?: - (.*))?$")
_NP_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")


def _to_float(text: str) -> float | None:
    text = text.strip()
    match = _NP_SCALAR.match(text)
    if match:
        text = match.group(1)
    if text in ("True", "False"):
        return 1.0 if text == "True" else 0.0
    try:
        return float(text)  # also "nan", "inf", "-inf"
    except ValueError:
        return None


def parse_console_metrics(text: str) -> dict[int, dict[str, float]]:
    """Parse verl console-logger lines into ``{step: {key: value}}``.

    Several lines for one step (e.g. validation metrics logged separately) are merged,
    later values win. Parts that are not ``key:number`` are skipped.
    """
    metrics: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        match = _STEP_LINE.search(line.rstrip())
        if not match:
            continue
        step = int(match.group(1))
        values = metrics.setdefault(step, {})
        for part in (match.group(2) or "").split(" - "):
            key, sep, raw = part.rpartition(":")
            if not sep or not key:
                continue
            value = _to_float(raw)
            if value is not None:
                values[key.strip()] = value
    return {step: values for step, values in metrics.items() if values}


def finite(values: Mapping[str, float]) -> dict[str, float]:
    """Drop nan/inf entries (handy when comparing with exported metrics)."""
    return {k: v for k, v in values.items() if math.isfinite(v)}


class StepWatcher:
    """A ``stream`` for :func:`run_verl`: when (``clock()``) verl's console logger printed each
    step, for tests that act in the middle of a run (kill a component once step N is out)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.seen: dict[int, float] = {}
        self.changed = threading.Condition()
        self._clock = clock

    def write(self, text: str) -> int:
        for match in _STEP_LINE.finditer(text):
            with self.changed:
                self.seen.setdefault(int(match.group(1)), self._clock())
                self.changed.notify_all()
        return len(text)

    def flush(self) -> None:
        pass

    def wait_for(self, step: int, done: threading.Event, timeout: float = 900) -> float | None:
        """When step ``step`` was printed; None if ``done`` is set (the run ended) or on timeout first."""
        with self.changed:
            self.changed.wait_for(lambda: step in self.seen or done.is_set(), timeout)
            return self.seen.get(step)


@dataclass
class RunResult:
    returncode: int
    output: str
    wall_s: float
    command: list[str]

    @property
    def metrics(self) -> dict[int, dict[str, float]]:
        return parse_console_metrics(self.output)


def _resolve_launcher(launcher: str | Sequence[str] | None, python: str) -> list[str]:
    if not launcher:
        return []
    words = shlex.split(launcher) if isinstance(launcher, str) else list(launcher)
    # prefer the tool of the run's venv (works when the venv is not activated)
    if "/" not in words[0]:
        sibling = Path(python).parent / words[0]
        words[0] = str(sibling) if sibling.exists() else (shutil.which(words[0]) or words[0])
    return words


def _kill_session(sid: int) -> None:
    """SIGKILL every process of the run's session: the launcher's process group (raylet,
    GCS, dashboard) and the Ray workers, which have process groups of their own."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            session = int(stat.rsplit(")", 1)[1].split()[3])  # fields after "(comm)": state ppid pgrp session
        except (OSError, ValueError, IndexError):
            continue
        if session == sid:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass


def build_command(
    args: Sequence[str], launcher: str | Sequence[str] | None = None, python: str | None = None
) -> list[str]:
    """``[launcher] python -m verl.trainer.main_ppo args``; ``python`` defaults to this interpreter
    (the vLLM mode runs the venv of ``scripts/vllm_cpu.sh``, whose launcher tools it also takes)."""
    python = python or sys.executable
    return [*_resolve_launcher(launcher, python), python, "-m", "verl.trainer.main_ppo", *args]


def run_verl(
    workdir: Path | str,
    *,
    driver: str = "v1",
    algo: str = "grpo",
    rollout: str = "hfcpu",
    steps: int = 2,
    n_gpus: int = 1,
    val_before_train: bool = True,
    test_freq: int = -1,
    extra: Sequence[str] = (),
    launcher: str | Sequence[str] | None = None,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    stream: TextIO | None = sys.stdout,
    kill_when: Callable[[], bool] | None = None,
) -> RunResult:
    """Make the assets in ``workdir`` and run the trainer there (cwd=workdir).

    ``env`` is the child's whole environment, as for ``subprocess`` (None: inherit this
    process's). Output is streamed to ``stream`` (None: silent), kept in the result and
    written to ``workdir/run.log``. On timeout, or once ``kill_when()`` (asked every second) is
    true, every process of the run's session is killed (returncode 124). ``rollout="vllm"`` runs
    verl's vLLM rollout: ``python`` must then be the interpreter of a venv with vLLM's CPU build
    (``scripts/vllm_cpu.sh``; a failed weight sync hangs such a run: give it a ``timeout``).
    """
    workdir = Path(workdir).resolve()
    assets = make_assets(workdir, ROLLOUT_MODEL[rollout] if rollout in ROLLOUT_MODEL else "tiny")
    args = verl_args(
        assets,
        driver=driver,
        algo=algo,
        rollout=rollout,  # type: ignore[arg-type]
        steps=steps,
        n_gpus=n_gpus,
        val_before_train=val_before_train,
        test_freq=test_freq,
        extra=extra,
    )
    command = build_command(args, launcher, python)
    full_env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    lines: list[str] = []
    start = time.monotonic()
    proc = subprocess.Popen(
        command,
        cwd=workdir,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,  # own process group, so a timeout can kill Ray's children too
    )
    log = open(workdir / "run.log", "w")

    def pump() -> None:  # a thread, so that a silent hang still hits the timeout below
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            log.write(line)
            if stream is not None:
                stream.write(line)
                stream.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    deadline = None if timeout is None else start + timeout
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            returncode = proc.wait(timeout=left if kill_when is None else min(1.0, left or 1.0))
            break
        except subprocess.TimeoutExpired:
            if (deadline is not None and time.monotonic() >= deadline) or (kill_when is not None and kill_when()):
                _kill_session(proc.pid)
                proc.wait()
                returncode = 124
                break
    reader.join(timeout=10)
    log.close()
    return RunResult(returncode, "".join(lines), time.monotonic() - start, command)
