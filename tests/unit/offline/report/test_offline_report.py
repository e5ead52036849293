"""``otel-verl report`` (``otel_verl.offline.report``): writing the page, and the command's answers."""

from __future__ import annotations

import io

import pytest
from offline_otlp_json import gauge, write_metrics

from otel_verl import cli, semconv
from otel_verl.offline.errors import PROBLEM, USAGE, CommandError
from otel_verl.offline.otlp_files import read_metric_points
from otel_verl.offline.report import report, write_report


def test_empty_partial_and_broken_folders(tmp_path):
    with pytest.raises(CommandError, match="no telemetry files") as exc:
        write_report(tmp_path)
    assert exc.value.code == PROBLEM
    with pytest.raises(CommandError, match="does not exist") as exc:
        write_report(tmp_path / "missing")
    assert exc.value.code == USAGE
    (tmp_path / "metrics-worker0-1.jsonl").write_text("")
    with pytest.raises(CommandError, match="no spans and no metric points"):
        write_report(tmp_path)
    # metrics only, plus the half-written last line of a killed process
    reward = gauge(semconv.M_REWARD, 0.5, **{semconv.ATTR_REWARD_SOURCE: "score"})
    write_metrics(tmp_path, "taskrunner", 1, 1, [gauge(semconv.M_TRAINING_STEP, 1), reward])
    with open(tmp_path / "metrics-taskrunner-1.jsonl", "a") as f:
        f.write('{"resourceMetrics": [{"reso')
    path, rep = write_report(tmp_path, tmp_path / "out" / "r.html")
    assert path.exists() and rep.steps == [] and len(read_metric_points(tmp_path)) == 2
    assert any("no spans" in n for n in rep.notes)
    assert "skipped 1 line: metrics-taskrunner-1.jsonl line 2 (cut short)" in rep.notes
    page = path.read_text()
    assert "No <code>verl.step</code> spans." in page and 'data-value="0.5"' in page


def test_cli_report(v1_run, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert cli.main(["report", str(v1_run), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out}: 2 steps" in text and "step 2, the slowest" in text
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert cli.main(["report", str(v1_run)]) == 0 and (v1_run / "report.html").exists()  # default place
    buf = io.StringIO()
    assert report(v1_run, v1_run / "missing-dir-file" / "x.html", out=buf) == 0  # parents are made
    (tmp_path / "blocker").write_text("")
    with pytest.raises(CommandError, match="cannot write the report to .*blocker/x.html"):
        report(v1_run, tmp_path / "blocker" / "x.html", out=buf)
