"""``summary`` and ``report`` on a run folder other jobs wrote into: values that once stopped them,
special files that kept them reading forever, and names made to drive the terminal."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.otlp_json import (
    _attrs,
    gauge,
    llm_call,
    log_record,
    span,
    traj_hist,
    write_logs,
    write_metrics,
    write_spans,
)

from otel_verl import semconv
from otel_verl.offline.facts.pools import REPLICA_IDLE, STATES
from otel_verl.offline.facts.step_trace import RANKS
from otel_verl.offline.report import write_report
from otel_verl.offline.summary import summary

REPO = Path(__file__).resolve().parents[3]


def _cli(*argv: str) -> subprocess.CompletedProcess:
    """``python -m otel_verl.cli`` with a strict UTF-8 stdout, as a terminal has (not a StringIO,
    which takes any str); a command that never ends is stopped and fails the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(REPO), PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "otel_verl.cli", *argv], env=env, capture_output=True, text=True, timeout=300
    )


def _run(folder: Path) -> None:
    sid, root = span(semconv.SPAN_STEP, "a" * 16, 0, 2, verl__step=1)
    _, gen = span("verl.gen", "a" * 16, 0, 1, sid, verl__stage="gen")
    _, traj = span(semconv.SPAN_ROLLOUT_TRAJECTORY, "a" * 16, 0.1, 0.9, sid)
    write_spans(folder, "taskrunner", 1, [root, gen, traj])


def test_values_that_stopped_summary_and_report_are_skipped_or_drawn(tmp_path):
    """A span that ends before it starts (IndexError in the latency histogram), a lone surrogate
    (UnicodeEncodeError when printed), gauges at the ends of the doubles (OverflowError in the axis
    ticks) or a hair apart (a tick loop that never ended): skipped and named, or drawn."""
    _run(tmp_path)
    sid, root = span(semconv.SPAN_STEP, "b" * 16, 10, 12, verl__step=2)
    _, backwards = span(semconv.SPAN_ROLLOUT_TRAJECTORY, "b" * 16, 11, 10.5, sid)
    _, surrogate = span("verl.\ud800", "b" * 16, 10, 11, sid, verl__stage="\ud800")
    write_spans(tmp_path, "worker", 2, [backwards])  # json.dumps writes the escape "\ud800"
    write_spans(tmp_path, "worker", 3, [surrogate])
    write_spans(tmp_path, "taskrunner", 4, [root])
    for step, reward, entropy in ((1, -1.7e308, 1e-300), (2, 1.7e308, 2e-300)):
        values = [gauge(semconv.M_REWARD, reward, **{semconv.ATTR_REWARD_SOURCE: "score"})]
        values.append(gauge("verl.actor.entropy", entropy))
        write_metrics(tmp_path, "taskrunner", 1, 20 + step, [gauge(semconv.M_TRAINING_STEP, step), *values])
    result = _cli("summary", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "2 training steps" in result.stdout and "-1.7e+308" in result.stdout and "\\ud800" not in result.stdout
    assert "traces-worker-2.jsonl line 1 (a span that ends before it starts)" in result.stderr
    assert "traces-worker-3.jsonl line 1 (text that is not UTF-8 (a lone surrogate))" in result.stderr
    path, rep = write_report(tmp_path)
    assert [r.step for r in rep.steps] == [1, 2] and "1.7e+308" in path.read_text()


def test_fifos_and_devices_in_the_folder_are_named_not_read(tmp_path):
    """A traces-*.jsonl link to /dev/zero or a FIFO made summary and report read forever."""
    _run(tmp_path)
    write_metrics(tmp_path, "taskrunner", 1, 3, [gauge(semconv.M_TRAINING_STEP, 1)])
    (tmp_path / "traces-zero-2.jsonl").symlink_to("/dev/zero")
    (tmp_path / "metrics-zero-2.jsonl").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "traces-fifo-3.jsonl")
    for command in ("summary", "report"):
        result = _cli(command, str(tmp_path))
        assert result.returncode == 0, result.stderr
        assert "skipped 3 unreadable files: " in result.stderr
        assert "traces-zero-2.jsonl (cannot read: not a regular file (a character device))" in result.stderr
        assert "traces-fifo-3.jsonl (cannot read: not a regular file (a FIFO))" in result.stderr


def test_names_reach_the_terminal_escaped(tmp_path):
    """A stage named to retitle the terminal, clear it or reverse text is printed as escapes, and
    so is a file name with such bytes (or bytes no encoding has) in the warning naming it."""
    sid, root = span(semconv.SPAN_STEP, "a" * 16, 0, 3, verl__step=1, verl__driver="\x1b[8m")
    names = ["\x1b]0;owned\x07", "\x1b[2J\x1b[H", "\x9b31m", "evil\u202etxt.exe", "two\nlines"]
    stages = [span(f"verl.s{i}", "a" * 16, i * 0.5, i * 0.5 + 0.5, sid, verl__stage=n)[1] for i, n in enumerate(names)]
    write_spans(tmp_path, "taskrunner", 1, [root, *stages], **{semconv.RES_RUN_ID: "run\x1bc"})
    bad = os.fsdecode(b"traces-\x1b[2J\xff-2.jsonl")  # the \xff byte is a lone surrogate in Python
    (tmp_path / bad).write_text("not json\n")
    out, err = io.StringIO(), io.StringIO()
    assert summary(tmp_path, out=out, err=err) == 0
    text = out.getvalue() + err.getvalue()
    assert not [c for c in text if (ord(c) < 32 and c != "\n") or 0x7F <= ord(c) < 0xA0 or c == "\u202e"]
    assert "\\x1b]0;owned\\x07" in text and "\\x9b31m" in text and "evil\\u202etxt.exe" in text
    assert "two\\nlines" in text and "verl run run\\x1bc (service verl, driver \\x1b[8m)" in text
    assert "traces-\\x1b[2J\\udcff-2.jsonl line 1 (not JSON)" in err.getvalue()
    text.encode("utf-8")  # a lone surrogate could not even be printed
    page = write_report(tmp_path)[0].read_text()  # its note names the file too: the page can be written
    assert "traces-\\x1b[2J\\udcff-2.jsonl" in page


def _rich_run(folder: Path) -> None:
    """Every attribute summary and report read: stages, trajectories, LLM calls on a server, worker
    ranks, step time and pool accounting, gauges, a trajectory histogram, overhead counters, stalls."""
    pools = {"verl__pool__actor__busy": 0.5, "verl__time__rollout": 0.5}
    sid, root = span(semconv.SPAN_STEP, "a" * 16, 0, 2, verl__step=1, verl__driver="v1", **pools)
    _, gen = span("verl.gen", "a" * 16, 0, 1, sid, verl__stage="gen", verl__step=1)
    wid, wg = span("verl.wg.update", "a" * 16, 1, 1.5, sid, verl__stage="update_actor")
    _, worker = span("verl.worker.update", "a" * 16, 1, 1.4, wid, verl__rank=0)
    rollout = {"verl__rollout__submit_step": 1, "verl__rollout__sample_index": 0, "verl__rollout__index": 0}
    tid, traj = span(
        semconv.SPAN_ROLLOUT_TRAJECTORY, "b" * 16, 0.1, 0.9, None, verl__rollout__response_tokens=5, **rollout
    )
    _, call = llm_call("b" * 16, 0.2, 0.8, tid, verl__rollout__server__id="r0")
    write_spans(folder, "taskrunner", 1, [root, gen, wg, traj, call], **{semconv.RES_RANK: 0, "host.name": "n"})
    write_spans(folder, "worker", 2, [worker], **{semconv.RES_RANK: 0})
    cost = {"asDouble": 0.1, "attributes": _attrs({semconv.ATTR_OVERHEAD_COMPONENT: "hooks"})}
    own = {"name": semconv.M_OVERHEAD_CPU_TIME, "sum": {"aggregationTemporality": 2, "dataPoints": [cost]}}
    for step in (1, 2):
        reward = gauge(semconv.M_REWARD, 0.5 * step, **{semconv.ATTR_REWARD_SOURCE: "score"})
        write_metrics(folder, "taskrunner", 1, 2 + step, [gauge(semconv.M_TRAINING_STEP, step), reward, own])
    write_metrics(folder, "worker", 3, 2, [traj_hist([1, 1, 0, 0], 0.7)])
    stalled = log_record(semconv.EVENT_TRAINING_STALLED, "no step", 30, verl__step=2, verl__stall__seconds=31.0)
    stacks = log_record(semconv.EVENT_STALL_STACKS, 'Thread "main" (ident 1):\n  File "x.py", line 1', 31, verl__step=2)
    write_logs(folder, "taskrunner", 1, [stalled, stacks], **{"ray.actor.class": "TaskRunner"})


ODD_VALUES = {
    "as written": None,
    "string": {"stringValue": "<b>x</b>"},
    "int": {"intValue": "-7"},
    "double": {"doubleValue": 1e300},
    "bool": {"boolValue": True},
    "array": {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}]}},
    "map": {"kvlistValue": {"values": [{"key": "k", "value": {"arrayValue": {}}}]}},
    "empty": {},
}


def _every_attribute_becomes(folder: Path, value: dict) -> None:
    """Each attribute of every item and resource set to ``value`` (a step span keeps its step: no
    step, no table), as another job could have written them."""

    def walk(node):
        if isinstance(node, dict):
            for key, child in node.items():
                if key == "attributes" and isinstance(child, list):
                    for kv in child:
                        if not (kv["key"] == semconv.ATTR_STEP and node.get("name") == semconv.SPAN_STEP):
                            kv["value"] = value
                else:
                    walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    for path in folder.glob("*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for line in lines:
            walk(line)
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.mark.parametrize("kind", sorted(ODD_VALUES))
def test_attributes_of_any_type_do_not_stop_summary_or_report(tmp_path, kind):
    """OTLP lets an attribute be any value: an array where a stage name should be (unhashable as a
    list), a string where seconds should be (no number format), a map, nothing."""
    _rich_run(tmp_path)
    if ODD_VALUES[kind] is not None:
        _every_attribute_becomes(tmp_path, ODD_VALUES[kind])
    out, err = io.StringIO(), io.StringIO()
    assert summary(tmp_path, out=out, err=err) == 0 and err.getvalue() == ""
    assert "verl run " in out.getvalue()
    path, rep = write_report(tmp_path)
    assert rep.spans == 6 and [r.step for r in rep.steps] == [1] and path.read_text().endswith("</html>")
    if kind == "as written":  # what the others change: each part of the page had its data
        step = rep.steps[0]
        assert list(step.stages) == ["gen", "update_actor"] and RANKS.of(step) == ["0"] and STATES.of(step)
        assert rep.slowest is not None and REPLICA_IDLE.of(step) and rep.stall_reports and rep.overhead is not None
        assert rep.trajectory_metric is not None and rep.curves


def test_a_trace_of_any_shape_has_a_timeline(tmp_path):
    """Span ids are unique only if the writer says so: a span whose id is its own parent's (the
    timeline's walk went round for ever), and a chain of parents deeper than Python's recursion."""
    sid, root = span(semconv.SPAN_STEP, "a" * 16, 0, 10, verl__step=1)
    _, child = span("verl.gen", "a" * 16, 0, 1, sid, verl__stage="gen")
    _, again = span("verl.again", "a" * 16, 0, 1, child["spanId"])
    again["spanId"] = child["spanId"]  # its own parent
    chain, parent = [], sid
    for i in range(3000):
        parent, s = span(f"verl.depth{i}", "a" * 16, 1, 2, parent)
        chain.append(s)
    write_spans(tmp_path, "taskrunner", 1, [root, child, again, *chain])
    path, rep = write_report(tmp_path)
    rows = rep.timelines[1].rows
    assert [r.span.name for r in rows[:3]] == [semconv.SPAN_STEP, "verl.gen", "verl.again"]
    assert len(rows) == 3 + 3000 and path.read_text().endswith("</html>")
    out = io.StringIO()
    assert summary(tmp_path, out=out) == 0 and "1 training steps" in out.getvalue()
