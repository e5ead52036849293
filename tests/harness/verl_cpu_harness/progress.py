"""One line per phase of a verl run, read from its console output: what ``python -m
verl_cpu_harness --progress`` (the demo) prints instead of verl's ~1,000 lines of log.

Phases: Ray up, the workers' model loaded, validation before training, then each training step
with its time, reward, KL and response length (verl's own ``step:N - key:value`` line).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from typing import TextIO

from .runner import parse_console_metrics

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MODEL = re.compile(r"(\w+ForCausalLM) contains ([\d.]+\s*\w?) parameters")
# (label, verl keys tried in order) of a training step's line
STEP_FIELDS = (
    ("reward", ("critic/score/mean",)),
    ("kl", ("actor/kl_loss", "actor/ppo_kl")),
    ("entropy", ("actor/entropy",)),
    ("response length", ("response_length/mean",)),
)


class Progress:
    """A text stream for ``run_verl``: prints a line when a phase of the run shows in its output."""

    def __init__(self, steps: int, out: TextIO = sys.stdout, clock: Callable[[], float] = time.monotonic) -> None:
        self.steps, self.out, self.clock = steps, out, clock
        self.start = clock()
        self.said: set[str] = set()

    def write(self, text: str) -> int:
        for line in text.splitlines():
            self._line(_ANSI.sub("", line))
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    def say(self, key: str, message: str) -> None:
        if key not in self.said:
            self.said.add(key)
            print(f"  [{self.clock() - self.start:4.0f} s] {message}", file=self.out, flush=True)

    def _line(self, line: str) -> None:
        if "Started a local Ray instance" in line:
            self.say("ray", "Ray is up: a local cluster for verl's TaskRunner and worker actors")
        elif match := _MODEL.search(line):
            self.say("model", f"workers are up: the actor/rollout model {match[1]} ({match[2]} parameters) is loaded")
        elif "Traceback (most recent call last)" in line:
            self.say("error", "a Python traceback in verl's log (the run may still recover)")
        else:
            for step, values in parse_console_metrics(line).items():
                if step == 0:
                    shown = ", ".join(f"{k} {v:.4g}" for k, v in values.items() if k.startswith("val-core/"))
                    self.say("validation", f"validation before training: {shown or 'done'}")
                    continue
                parts = [f"{values['timing_s/step']:.1f} s"] if "timing_s/step" in values else []
                for label, keys in STEP_FIELDS:
                    key = next((k for k in keys if k in values), None)
                    if key is not None:
                        parts.append(f"{label} {values[key]:.4g}")
                self.say(f"step {step}", f"training step {step}/{self.steps} done: {', '.join(parts)}")
