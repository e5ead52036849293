"""``otel_verl.offline.summary`` on small synthetic OTLP JSON files (the real run: tests/e2e/test_cli_summary.py)."""

from __future__ import annotations

import io
import os

import pytest
from support.otlp_json import gauge, llm_call, span, write_metrics, write_spans

from otel_verl import semconv
from otel_verl.exits import CommandError
from otel_verl.offline.report import build, render
from otel_verl.offline.run.text import MAX_STEP_COLUMNS
from otel_verl.offline.summary import summary


def _summary(folder, **kwargs) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    assert summary(folder, out=out, err=err, **kwargs) == 0
    return out.getvalue(), err.getvalue()


def _row(text: str, label: str) -> list[str]:
    """The cells of the table row that starts with ``label``."""
    line = next(line for line in text.splitlines() if line.startswith(f"  {label} "))
    return line[len(label) + 2 :].split()


def test_summary_speaks_rl_first_then_telemetry(v1_run):
    text, err = _summary(v1_run)
    assert err == ""
    lines = text.splitlines()
    assert lines[0] == "verl run run-1 (service verl, driver v1): 2 training steps, 4.2 s in steps"
    assert _row(text, "step") == ["1", "2"]
    assert _row(text, "total") == ["1.95", "2.30"]
    assert _row(text, "gen") == ["1.00", "2.00"]
    assert _row(text, "old_log_prob") == ["0.25", "-"] and _row(text, "adv") == ["-", "0.10"]
    assert _row(text, "critic/score/mean") == ["0.25", "0.75"]
    assert _row(text, "actor/kl_loss") == ["0.025", "0.075"]
    assert _row(text, "actor/entropy") == ["4", "3"]
    # the slowest trajectory: the training one of step 2 (1.4 s), not the 5 s validation one
    i = lines.index(
        "slowest rollout trajectory (training trajectories only; --include-validation counts validation ones too):"
    )
    assert lines[i + 1].startswith("  1.40 s, sample 1 rollout 0, submitted at step 2, ")
    assert "3.5x its step's median, in a gen stage of 2.00 s" in lines[i + 1]
    assert "A step's rollout ends with its slowest trajectory" in lines[i + 2]
    # then the OpenTelemetry view
    # one count of processes: those that sent anything (the metrics' processes also sent spans here)
    assert lines.index("telemetry: 27 spans and 12 metric points from 3 processes; 3 processes sent spans:") > i
    assert "  taskrunner pid 10: 10 spans" in lines and "  worker0 pid 11: 3 spans" in lines
    step1 = next(line for line in lines if line.startswith("  step 1: trace "))
    assert step1.endswith(", 4 trajectories, worker spans from ranks 0")


def test_include_validation_changes_the_slowest_and_says_so(v1_run):
    text, _ = _summary(v1_run, include_validation=True)
    lines = text.splitlines()
    i = lines.index("slowest rollout trajectory (training and validation trajectories):")
    assert lines[i + 1].startswith("  5.00 s, validation span ")
    assert ", submitted at step 2, 5.6x its step's median" in lines[i + 1]


def test_metrics_show_one_value_per_step_repeats_included(tmp_path):
    reward = {semconv.ATTR_REWARD_SOURCE: "score"}
    for step in (1, 2, 3):
        metrics = [gauge(semconv.M_TRAINING_STEP, step), gauge(semconv.M_REWARD, 0.5, **reward)]
        if step != 2:
            metrics.append(gauge("verl.actor.grad_norm", 1.5))
        write_metrics(tmp_path, "taskrunner", 1, step * 10.0, metrics)
    # a periodic export between step boundaries (no step gauge) adds no column
    write_metrics(tmp_path, "taskrunner", 1, 35.0, [gauge(semconv.M_REWARD, 9.0, **reward)])
    text, _ = _summary(tmp_path)
    assert "metrics at each training step (the value verl logged, as exported at the end of the step):" in text
    assert _row(text, "step") == ["1", "2", "3"]
    assert _row(text, "critic/score/mean") == ["0.5", "0.5", "0.5"]  # not collapsed into one value
    assert _row(text, "actor/grad_norm") == ["1.5", "-", "1.5"]
    assert "note: no spans" in text  # metrics only: the summary says why there is no stage table


def test_long_runs_show_the_first_and_last_steps(tmp_path):
    n = MAX_STEP_COLUMNS + 8
    for step in range(1, n + 1):
        write_metrics(
            tmp_path, "taskrunner", 1, step, [gauge(semconv.M_TRAINING_STEP, step), gauge(semconv.M_THROUGHPUT, step)]
        )
    text, _ = _summary(tmp_path)
    half = MAX_STEP_COLUMNS // 2
    assert _row(text, "step") == [*map(str, range(1, half + 1)), "...", *map(str, range(n - half + 1, n + 1))]
    assert f"(steps 1-{half} and {n - half + 1}-{n} of {n}; the report has all)" in text


def test_summary_names_what_it_skipped(v1_run):
    with open(v1_run / "traces-taskrunner-10.jsonl", "a") as f:
        f.write('{"resourceSpans": [{"reso')  # a process killed while writing
    (v1_run / "metrics-junk-1.jsonl").write_bytes(os.urandom(4096).replace(b"\n", b"") + b"\n")
    (v1_run / "traces-dir-2.jsonl").mkdir()
    text, err = _summary(v1_run)
    assert _row(text, "gen") == ["1.00", "2.00"]  # the rest is shown
    assert err.count("\n") == 1 and err.startswith(
        "otel-verl summary: warning: skipped 2 lines and 1 unreadable file: "
    )
    assert "traces-dir-2.jsonl (cannot read: Is a directory)" in err
    assert "metrics-junk-1.jsonl line 1 (not UTF-8 text)" in err
    assert "traces-taskrunner-10.jsonl line 2 (cut short)" in err


def test_nothing_readable_is_an_error(tmp_path):
    with pytest.raises(CommandError, match="no telemetry files"):
        summary(tmp_path)
    sid, root = span(semconv.SPAN_STEP, "a" * 16, 0, 1, verl__step=1)
    (tmp_path / "traces-x-1.jsonl").write_text('{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5}]}]}]}\n')
    with pytest.raises(CommandError, match=r"no spans or metric points could be read .*not an OTLP traces request"):
        summary(tmp_path)
    write_spans(tmp_path, "taskrunner", 1, [root])
    text, err = _summary(tmp_path)
    assert "1 training steps" in text and "traces-x-1.jsonl line 1 (not an OTLP traces request)" in err


def _engine_run(folder, latency_of_second_call, legacy=False):
    """One v0-style step: two trajectories; the slowest one's two LLM calls each have the engine's
    ``llm_request`` span (queue / prefill / decode), written by the rollout server."""
    folder.mkdir()
    trace = "e" * 16
    sid, step = span(semconv.SPAN_STEP, trace, 0, 3.0, verl__step=1, verl__driver="v0")
    gid, gen = span("verl.gen", trace, 0.1, 2.9, sid, verl__stage="gen", verl__step=1)
    rollout, engine = [], []
    for i, dur in enumerate((2.0, 0.5)):
        tid, traj = span(
            semconv.SPAN_ROLLOUT_TRAJECTORY, trace, 0.2, 0.2 + dur, gid,
            verl__rollout__submit_step=1, verl__rollout__sample_index=i, verl__rollout__index=0,
        )  # fmt: skip
        rollout.append(traj)
        if i:
            continue
        for n, latency in enumerate(({"queue": 0.1, "prefill": 0.2, "decode": 0.5}, latency_of_second_call)):
            cid, call = llm_call(trace, 0.3 + n, 1.2 + n, tid, legacy)
            rollout.append(call)
            attrs = {f"gen_ai__latency__{k}": v for k, v in latency.items()}
            attrs = {k.replace("__queue", "__time_in_queue").replace("__prefill", "__time_in_model_prefill")
                     .replace("__decode", "__time_in_model_decode"): v for k, v in attrs.items()}  # fmt: skip
            engine.append(span(semconv.SPAN_ENGINE_REQUEST, trace, 0.31 + n, 1.19 + n, cid, **attrs)[1])
    write_spans(folder, "taskrunner", 10, [step, gen])
    write_spans(folder, "agent_loop_worker", 12, rollout)
    write_spans(folder, "rollout_server", 13, engine)
    return folder


@pytest.mark.parametrize("legacy", [False, True])  # LLM calls as otel-verl names them, and as it did
def test_the_slowest_trajectorys_engine_time_is_split_into_queue_prefill_decode(tmp_path, legacy):
    folder = _engine_run(tmp_path / "t", {"queue": 0.3, "prefill": 0.1, "decode": 0.4}, legacy)
    text, _ = _summary(folder)
    lines = text.splitlines()
    i = lines.index("  in the engine (its llm_request spans under the trajectory's LLM calls), each step's slowest:")
    assert lines[i + 1] == (
        "    step 1: queue 0.400 s (20%), prefill 0.300 s (15%), decode 0.900 s (45%), "
        "outside the engine 0.400 s (20%) of its 2.000 s"
    )
    from otel_verl.offline.run import model, page

    html = page.render(model.build(folder))
    assert '<div id="engine-split">' in html and "step 1: queue 0.400 s (20%)" in html


@pytest.mark.parametrize("bad", [{"queue": "NaN"}, {"queue": -1.0}, {"queue": "0.5"}, {"queue": True}, {}])
def test_an_engine_span_without_usable_latencies_is_left_out_and_said(tmp_path, bad):
    folder = _engine_run(tmp_path / "t", {"queue": 0.3, "prefill": 0.1, "decode": 0.4, **bad} if bad else {})
    text, _ = _summary(folder)
    line = next(line for line in text.splitlines() if line.startswith("    step 1: "))
    assert line.startswith("    step 1: queue 0.100 s (5%), prefill 0.200 s (10%), decode 0.500 s (25%), ")
    assert line.endswith("of its 2.000 s; 1 of its 2 LLM calls without one")


def test_no_engine_spans_no_engine_lines(v1_run):
    text, _ = _summary(v1_run)
    assert "in the engine" not in text


def test_a_step_with_a_failed_span_and_its_worker_ranks_are_said_in_both_tools(tmp_path):
    """``facts.step_trace``: a span of the step's trace that failed marks the step in the summary and
    the page's stage table; the ranks that sent ``verl.worker.*`` spans are named."""
    spans = []
    for step, status in ((1, "STATUS_CODE_ERROR"), (2, None)):
        trace = f"{step:016x}"
        sid, root = span(semconv.SPAN_STEP, trace, 10 * step, 10 * step + 2, verl__step=step)
        stage_id, stage = span("verl.gen", trace, 10 * step, 10 * step + 1, sid, status, verl__stage="gen")
        _, worker = span("verl.worker.gen", trace, 10 * step, 10 * step + 0.5, stage_id, verl__rank=step - 1)
        spans += [root, stage, worker]
    write_spans(tmp_path, "taskrunner", 1, spans)
    out = io.StringIO()
    assert summary(tmp_path, out=out, err=io.StringIO()) == 0
    said = out.getvalue().splitlines()
    assert any(x.startswith("  step 1: trace ") and x.endswith("worker spans from ranks 0; ERROR") for x in said)
    assert any(x.startswith("  step 2: trace ") and x.endswith("worker spans from ranks 1") for x in said)
    page = render(build(tmp_path))
    assert '<tr data-step="1" class="error">' in page and '<tr data-step="2">' in page
