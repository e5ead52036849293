"""End-to-end on the real CPU trainer: Python logs and sampled generations in the OTLP files.

* samples off (the default, the cached runs of tests/e2e): no ``verl.rollout.sample`` record
  and no prompt text in any exported file;
* samples on (tests/shared_runs.py's ``tail_run``, whose rollout faults the samples must survive):
  one record per sampled generation with the real step number, joined to that step's trace, and
  prompt, response and reward equal to what verl itself dumps for the same step with
  ``trainer.rollout_data_dir``; the harness's loops and empty answers are the ones sampled first,
  each record saying why (``verl.sample.picked_because``).

verl 0.9.1 logs nothing at WARNING inside a training step on this harness, so the
trace-id-on-a-Python-log case is proven by tests/unit/process/test_logs.py with verl's real timers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.opskit import file_log_records
from support.shared_runs import SAMPLES_PER_STEP, rollout_dump, tail_run

from otel_verl import semconv

pytestmark = pytest.mark.e2e

PROMPT_TEXT = re.compile(r"\d+\+\d+=\?")  # the harness dataset's prompts: "user\n4+3=?\nassistant\n"


def _value(v: dict):
    ((kind, raw),) = v.items()
    if kind == "intValue":
        return int(raw)
    if kind == "kvlistValue":
        return {kv["key"]: _value(kv["value"]) for kv in raw.get("values", [])}
    if kind == "arrayValue":
        return [_value(v) for v in raw.get("values", [])]
    return raw


def _log_records(folder: Path) -> list[dict]:
    return [
        {
            "resource": {a["key"]: _value(a["value"]) for a in rl["resource"]["attributes"]},
            "event_name": r.get("eventName", ""),
            "trace_id": r.get("traceId", ""),
            "body": _value(r["body"]) if "body" in r else None,
            "attributes": {a["key"]: _value(a["value"]) for a in r.get("attributes", [])},
        }
        for rl, r in file_log_records(folder)
    ]


@pytest.mark.parametrize("driver", ["v0", "v1"])
def test_samples_off_by_default_export_no_prompt_text(verl_runs, driver):
    run = verl_runs.get(driver, "grpo", steps=2)
    assert run.returncode == 0, run.output[-4000:]
    files = sorted(run.telemetry_dir.glob("*.jsonl"))
    # logs are on in these runs (OTEL_LOGS_EXPORTER), but a signal's file exists only once it has a
    # line: a clean v0 run may log no record at all
    assert any(f.name.startswith("traces-taskrunner-") for f in files)
    assert not [r for r in _log_records(run.telemetry_dir) if r["event_name"] == semconv.EVENT_ROLLOUT_SAMPLE]
    for f in files:
        assert not PROMPT_TEXT.search(f.read_text()), f"prompt text in {f.name}"


@pytest.mark.parametrize("driver", ["v0", "v1"])
def test_samples_on_match_verl_dump_step_and_trace(verl_runs, driver):
    run = tail_run(verl_runs, driver)
    dump = rollout_dump(verl_runs, driver)
    samples = [r for r in _log_records(run.telemetry_dir) if r["event_name"] == semconv.EVENT_ROLLOUT_SAMPLE]
    step_traces = {s.attributes[semconv.ATTR_STEP]: s.trace_id for s in run.spans if s.name == semconv.SPAN_STEP}
    assert sorted(step_traces) == [1, 2]
    by_step: dict[int, list[dict]] = {}
    for r in samples:
        by_step.setdefault(r["attributes"][semconv.ATTR_STEP], []).append(r)
    assert sorted(by_step) == [1, 2]
    for step, records in by_step.items():
        assert len(records) == SAMPLES_PER_STEP
        dumped = [json.loads(line) for line in (dump / f"{step}.jsonl").read_text().splitlines()]
        assert {d["step"] for d in dumped} == {step}
        for r in records:
            assert r["resource"][semconv.RES_ROLE] == semconv.ROLE_TASKRUNNER
            assert r["trace_id"] == step_traces[step], "sample not joined to its step's trace"
            body, attrs = r["body"], r["attributes"]
            same = [d for d in dumped if d["input"] == body["prompt"] and d["output"] == body["response"]]
            assert same, f"step {step}: sample not among verl's dumped generations: {body}"
            assert attrs[semconv.ATTR_SAMPLE_REWARD] in {d["score"] for d in same}
            assert attrs[semconv.ATTR_DATA_SOURCE] == "tiny_add"
        _degenerate_first(step, records)


DEGENERATE = {semconv.DEGENERATE_REPETITIVE, semconv.DEGENERATE_EMPTY, semconv.DEGENERATE_LENGTH_LIMIT}


def _degenerate_first(step: int, records: list[dict]) -> None:
    """The harness's loops and empty answers (2 or 3 of each step's 8) are the samples picked first,
    each saying why, as the agent loop's own measure says it of the same token ids."""
    why = [r["attributes"][semconv.ATTR_SAMPLE_PICKED_BECAUSE] for r in records]
    assert why[0] in {semconv.DEGENERATE_REPETITIVE, semconv.DEGENERATE_EMPTY}, f"step {step}: {why}"
    assert why == sorted(why, key=lambda w: w == semconv.PICKED_FIRST), f"step {step}: degenerate not first: {why}"
    for r in records:
        attrs, response = r["attributes"], r["body"]["response"]
        kinds = set(attrs.get(semconv.ATTR_ROLLOUT_DEGENERATE, []))
        picked = attrs[semconv.ATTR_SAMPLE_PICKED_BECAUSE]
        assert picked in kinds if picked in DEGENERATE else picked == semconv.PICKED_FIRST and not kinds, attrs
        if picked == semconv.DEGENERATE_EMPTY:
            assert response == "", response  # the end-of-sequence token alone
        if picked == semconv.DEGENERATE_REPETITIVE:  # one token repeated up to the length limit
            assert semconv.DEGENERATE_LENGTH_LIMIT in kinds and response, attrs
