"""``otel-verl report`` (``otel_verl.offline.report``): writing the page, and the command's answers."""

from __future__ import annotations

import io
import os

import pytest
from support.otlp_json import gauge, write_metrics

from otel_verl import cli, semconv
from otel_verl.exits import PROBLEM, USAGE, CommandError
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
    (tmp_path / "out").mkdir()
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
    # a typo in -o creates no folder: it fails, clearly, as a usage error
    with pytest.raises(CommandError, match=r"-o .*missing-dir/x.html: the folder .*missing-dir does not exist") as e:
        report(v1_run, tmp_path / "missing-dir" / "x.html", out=buf)
    assert e.value.code == 2 and not (tmp_path / "missing-dir").exists()
    assert cli.main(["report", str(v1_run), "-o", str(tmp_path / "nonexistent-dir" / "r.html")]) == 2
    assert "the report creates no folder" in capsys.readouterr().err
    assert not (tmp_path / "nonexistent-dir").exists()
    (tmp_path / "blocker").write_text("")
    with pytest.raises(CommandError, match="cannot write the report to .*blocker/x.html"):
        report(v1_run, tmp_path / "blocker" / "x.html", out=buf)


def test_a_report_that_fails_leaves_the_previous_one(v1_run, tmp_path, monkeypatch):
    """The page replaces the file only once it is whole: a failure while writing (here a section
    that cannot be encoded, after the first was written, then a rename that fails) leaves the
    previous report, and no litter."""
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    out.write_text("previous report")
    monkeypatch.setattr("otel_verl.offline.report.render_parts", lambda rep: iter(["<!DOCTYPE html>", "\ud800"]))
    with pytest.raises(UnicodeError):
        write_report(v1_run, out)
    assert out.read_text() == "previous report" and sorted(p.name for p in out.parent.iterdir()) == ["report.html"]
    monkeypatch.undo()

    def no_rename(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("otel_verl.atomic.os.replace", no_rename)
    with pytest.raises(CommandError, match="cannot write the report to .*: No space left on device"):
        write_report(v1_run, out)
    assert out.read_text() == "previous report" and sorted(p.name for p in out.parent.iterdir()) == ["report.html"]


def test_a_link_planted_at_the_output_path_is_replaced_not_written_through(v1_run, tmp_path):
    """Someone who can write the run folder links report.html to a file of the user's: the page
    replaces the link, and the file it pointed to stays as it was."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    (v1_run / "report.html").symlink_to(victim)
    path, _ = write_report(v1_run)
    assert victim.read_text() == "the user's file"
    assert not path.is_symlink() and path.read_text().startswith("<!DOCTYPE html>")
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # as open() would have made it


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_an_input_is_never_written_over(v1_run):
    """-o naming a telemetry file is refused; a link to one at the output path is replaced."""
    traces = sorted(v1_run.glob("traces-*.jsonl"))[0]
    before = traces.read_bytes()
    with pytest.raises(CommandError, match="is one of the run's telemetry files") as exc:
        write_report(v1_run, traces)
    assert exc.value.code == USAGE and traces.read_bytes() == before
    (v1_run / "report.html").symlink_to(traces)
    path, _ = write_report(v1_run)
    assert traces.read_bytes() == before and not path.is_symlink()
