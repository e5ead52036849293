"""``otel-verl report RUN_DIR``: one self-contained HTML page about a run, from its OTLP JSON files.

Reads what the ``otlp_json_file`` exporters wrote (``traces-*.jsonl``, ``metrics-*.jsonl``) and
renders, with inline CSS, SVG and a few lines of JavaScript (no network, no dependency):

- the stage breakdown of every step (``verl.<stage>`` children of each ``verl.step`` root span),
  as stacked columns and as a table with the span durations (a long run's: its picked steps,
  ``offline.bounded``);
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
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from otel_verl.atomic import write_file
from otel_verl.exits import USAGE, CommandError, say, warn
from otel_verl.offline.otlp_files import run_folder, signal_files
from otel_verl.offline.run.model import NO_POINTS_NOTE, Report, build
from otel_verl.offline.run.page import render, render_parts

__all__ = ["Report", "build", "render", "report", "write_report"]


def write_report(
    folder: str | Path,
    out: str | Path | None = None,
    include_validation: bool = False,
    source: str | None = None,
    notes: Sequence[str] = (),
) -> tuple[Path, Report]:
    """Build and write the page (default ``folder/report.html``); a ``CommandError`` when ``folder``
    holds nothing to show or the page cannot be written. Never writes over an input file; the page
    replaces what is at the path only once it is whole (``atomic.write_file``: a link there is
    replaced, not written through). ``source``: where the files' contents came from, shown instead
    of ``folder`` (a temporary one); its ``notes`` come first and replace the one on missing metrics."""
    folder = run_folder(folder, ("traces", "metrics"))
    path = Path(out) if out is not None else folder / "report.html"
    if path.is_dir():
        raise CommandError(f"-o {path} is a folder; give the HTML file's name", USAGE)
    if not path.parent.exists():  # a typo in -o must not create folders
        raise CommandError(f"-o {path}: the folder {path.parent} does not exist (the report creates no folder)", USAGE)
    inputs = [p for sig in ("traces", "metrics", "logs") for p in signal_files(folder, sig)]
    # the names the inputs are listed under, and the files they lead to
    taken = {p.parent.resolve() / p.name for p in inputs} | {p.resolve() for p in inputs}
    if path.parent.resolve() / path.name in taken:
        raise CommandError(f"-o {path} is one of the run's telemetry files; the report never writes over them", USAGE)
    rep = build(folder, include_validation)
    if source is not None:
        rep.source = source
        rep.notes = [*notes, *(n for n in rep.notes if n != NO_POINTS_NOTE)]
    if not rep.spans and not rep.points:
        why = f" ({rep.skipped.describe()})" if rep.skipped else ""
        raise CommandError(f"the telemetry files in {folder} hold no spans and no metric points{why}")
    try:
        # written a section at a time: a long run's page is never held whole
        write_file(path, (part.encode("utf-8") for part in render_parts(rep)))
    except OSError as exc:  # e.g. a read-only run folder: pass -o
        why = exc.strerror or exc
        raise CommandError(f"cannot write the report to {path}: {why} (choose another place with -o)") from None
    return path, rep


def report(
    folder: Path,
    output: Path | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    include_validation: bool = False,
) -> int:
    """The ``otel-verl report`` command: write the page and say what is in it."""
    out = sys.stdout if out is None else out
    path, rep = write_report(folder, output, include_validation)
    say(
        f"wrote {path}: {rep.totals.count} steps, {rep.spans} spans, {rep.points} metric points"
        + (f" (default timeline: step {rep.default_step}, the slowest)" if rep.default_step is not None else ""),
        out,
    )
    skipped = rep.skipped.describe() if rep.skipped else None
    for note in rep.notes:
        if note != skipped:  # that one goes to stderr
            say(f"  note: {note}", out)
    out.flush()
    if skipped:
        warn("report", skipped, err)
    return 0
