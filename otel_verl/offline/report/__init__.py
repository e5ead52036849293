"""``otel-verl report RUN_DIR``: one self-contained HTML page about a run, from its OTLP JSON files.

Reads what the ``otlp_json_file`` exporters wrote (``traces-*.jsonl``, ``metrics-*.jsonl``) and
renders, with inline CSS, SVG and a few lines of JavaScript (no network, no dependency):

- the stage breakdown of every step (``verl.<stage>`` children of each ``verl.step`` root span),
  as stacked columns and as a table with the span durations;
- the timeline of one step (a waterfall of its spans: stages, ``verl.wg.*`` driver calls,
  ``verl.worker.*`` rank spans, ``verl.rollout.trajectory`` spans with their LLM calls drawn
  inside; the v1 driver's trajectories, which are traces of their own, are joined by
  ``verl.rollout.submit_step``), with the step's slowest trajectory marked. The page opens on the
  slowest step; a picker (or a click on a table row) shows any other;
- the rollout latency distribution: trajectory span durations, and the
  ``verl.rollout.trajectory.duration`` histogram metric (which counts every trajectory, not only
  the sampled ones with spans);
- reward, KL, throughput and a few more curves per step, from the gauges exported at each step
  boundary (``verl.training.step`` in the same export says which step), plus a picker for any
  ``verl.<key>`` gauge.

Everything the page shows is in its DOM without JavaScript except the "any metric" chart.
``model`` works it out (``build``), ``page`` (``render``) and ``charts`` draw it, ``assets/`` holds the
stylesheet and the script.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from otel_verl.offline.otlp_files import signal_files
from otel_verl.offline.report.model import Report, build
from otel_verl.offline.report.page import render

__all__ = ["NoTelemetry", "Report", "build", "render", "report", "write_report"]


class NoTelemetry(Exception):
    """The folder holds nothing to report on (the message says why)."""


def write_report(folder: str | Path, out: str | Path | None = None) -> tuple[Path, Report]:
    """Build and write the page (default ``folder/report.html``); raises NoTelemetry when ``folder``
    holds nothing to show."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NoTelemetry(f"{folder} is not a folder")
    if not any(signal_files(folder, sig) for sig in ("traces", "metrics")):
        raise NoTelemetry(f"no telemetry files (traces-*.jsonl, metrics-*.jsonl) in {folder}")
    rep = build(folder)
    if not rep.spans and not rep.points:
        raise NoTelemetry(f"the telemetry files in {folder} hold no spans and no metric points")
    path = Path(out) if out is not None else folder / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(rep), encoding="utf-8")
    return path, rep


def report(folder: Path, output: Path | None = None, out: TextIO | None = None) -> int:
    """The ``otel-verl report`` command: write the page and say what is in it; 1 when nothing was written."""
    out = sys.stdout if out is None else out
    try:
        path, rep = write_report(folder, output)
    except NoTelemetry as exc:
        print(str(exc), file=out)
        return 1
    except OSError as exc:  # e.g. a read-only run folder: pass -o
        print(f"cannot write the report: {exc}", file=out)
        return 1
    print(
        f"wrote {path}: {len(rep.steps)} steps, {rep.spans} spans, {rep.points} metric points"
        + (f" (default timeline: step {rep.default_step}, the slowest)" if rep.default_step is not None else ""),
        file=out,
    )
    for note in rep.notes:
        print(f"  note: {note}", file=out)
    return 0
