"""An export outage and what it cost, from the spool's counters, in ``facts.spool``, ``summary`` and the report."""

from __future__ import annotations

import io
from pathlib import Path

from support.otlp_json import T0, _attrs, gauge, span, write_metrics, write_spans

from otel_verl import semconv
from otel_verl.offline.facts.spool import spool_facts
from otel_verl.offline.otlp_files import read_metric_points
from otel_verl.offline.run.model import build
from otel_verl.offline.run.page import render
from otel_verl.offline.summary import summary


def _spool(time_s: float, name: str, **by_outcome: int) -> dict:
    points = [
        {
            "asInt": str(n),
            "attributes": _attrs({semconv.ATTR_SIGNAL: "traces", semconv.ATTR_SPOOL_OUTCOME: outcome}),
            "timeUnixNano": str(T0 + int(time_s * 1e9)),
        }
        for outcome, n in by_outcome.items()
    ]
    return {"name": name, "sum": {"aggregationTemporality": 2, "isMonotonic": True, "dataPoints": points}}


def _run(folder: Path, worker_dropped: int = 0) -> Path:
    folder.mkdir()
    write_spans(folder, "taskrunner", 10, [span(semconv.SPAN_STEP, "1" * 16, 10.0, 11.0, verl__step=1)[1]])
    write_metrics(folder, "taskrunner", 10, 11.0, [gauge(semconv.M_TRAINING_STEP, 1)])
    # the TaskRunner spooled 4 batches, re-sent 2 by its second export and all 4 by its last
    for t, resent in ((11.0, 2), (12.0, 4)):
        write_metrics(
            folder,
            "taskrunner",
            10,
            t,
            [
                _spool(t, semconv.M_SPOOL_BATCHES, spooled=4, resent=resent),
                _spool(t, semconv.M_SPOOL_BYTES, spooled=4096, resent=resent * 1024),
            ],
        )
    extra = {"dropped": worker_dropped} if worker_dropped else {}
    write_metrics(folder, "worker0", 11, 11.5, [_spool(11.5, semconv.M_SPOOL_BATCHES, spooled=2, resent=2, **extra)])
    return folder


def test_an_outage_with_nothing_lost_says_so(tmp_path):
    facts = spool_facts(read_metric_points(_run(tmp_path / "run")))
    assert facts is not None and facts.processes == 2
    assert facts.batches == {"spooled": 6, "resent": 6}  # each process's last value, summed
    line = facts.line()
    assert line.startswith("export outage: the endpoint did not take 6 batches (0.0 MiB) of 2 processes")
    assert line.endswith("6 re-sent; nothing lost")


def test_lost_batches_are_said_in_capitals(tmp_path):
    facts = spool_facts(read_metric_points(_run(tmp_path / "run", worker_dropped=1)))
    assert "LOST: 1 batches dropped from the full spool (OTEL_VERL_SPOOL_MAX_MB)" in facts.line()


def test_a_run_without_an_outage_says_nothing(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    write_metrics(folder, "taskrunner", 10, 11.0, [gauge(semconv.M_TRAINING_STEP, 1)])
    assert spool_facts(read_metric_points(folder)) is None


def test_summary_and_report_say_it(tmp_path):
    folder = _run(tmp_path / "run")
    out = io.StringIO()
    assert summary(folder, out=out, err=io.StringIO()) == 0
    assert "  export outage: the endpoint did not take 6 batches" in out.getvalue()
    page = render(build(folder))
    assert 'id="spool"' in page and "nothing lost" in page
