"""``otel-verl summary RUN_DIR``: a run's stored telemetry as a few lines of text.

Reads what the ``otlp_json_file`` exporters wrote (``OTEL_VERL_FILE_DIR``) through the run's
model (``run.model.build``: one reading of the run for both tools) and prints, in RL terms
first: the training steps and the time of each stage, reward/KL and the other curves of the report
at each step, the slowest rollout trajectory and its step's tail; then, in OpenTelemetry terms, the
processes that reported and each step's trace. What the reader skipped is named on stderr. Every
line goes out through ``errors.say``: names from the files reach the terminal escaped and bounded.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from otel_verl.exits import CommandError, say, warn
from otel_verl.offline.otlp_files import run_folder
from otel_verl.offline.run.model import build
from otel_verl.offline.run.text import lines


def summary(
    folder: Path, out: TextIO | None = None, err: TextIO | None = None, include_validation: bool = False
) -> int:
    """Print the summary of ``folder``; a ``CommandError`` when it holds nothing readable."""
    out = sys.stdout if out is None else out
    rep = build(run_folder(folder, ("traces", "metrics")), include_validation)
    skipped = rep.skipped.describe() if rep.skipped else None
    if not rep.spans and not rep.points:
        raise CommandError(
            f"no spans or metric points could be read from {folder}" + (f" ({skipped})" if skipped else "")
        )
    for line in lines(rep):
        say(line, out)
    out.flush()
    if skipped:
        warn("summary", skipped, err)
    return 0
