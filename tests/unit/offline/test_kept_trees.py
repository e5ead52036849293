"""Runs whose rollout trees were sampled at the end (``hooks/rollout/keep``): ``summary`` and
``report`` point at each step's slowest trajectory and its kept tree, and take the step's
trajectory count and tail ratio from the workers' long-tail events (measured over every
trajectory), not from the few trees exported.
"""

from __future__ import annotations

from support.otlp_json import _attrs, llm_call, span, write_spans

from otel_verl import semconv
from otel_verl.offline.facts.tails import ALL_TRAJECTORIES, RATIO
from otel_verl.offline.run import model, page
from otel_verl.offline.run.text import lines

T = "ab" * 8  # the step's trace (span() doubles it to 32 hex digits)


def _run(folder):
    step_id, step = span(semconv.SPAN_STEP, T, 0, 4, **{"verl.step": 1})
    gen_id, gen = span(semconv.SPAN_GEN, T, 0, 3, parent=step_id, **{"verl.stage": "gen", "verl.step": 1})
    batch_id, batch = span(semconv.SPAN_ROLLOUT_BATCH, T, 0.1, 2.9, parent=gen_id, **{"verl.rollout.submit_step": 1})
    slow_id, slow = span(
        semconv.SPAN_ROLLOUT_TRAJECTORY,
        T,
        0.2,
        2.2,
        parent=batch_id,
        verl__rollout__submit_step=1,
        verl__rollout__kept_because="slowest",
        verl__rollout__slowest_rank=1,
    )
    _, call = llm_call(T, 0.3, 2.0, parent=slow_id)
    _, reward = span(semconv.SPAN_REWARD_WORKER, T, 2.05, 2.1, parent=slow_id)
    sampled = [
        span(
            semconv.SPAN_ROLLOUT_TRAJECTORY,
            T,
            0.2,
            0.2 + d,
            parent=batch_id,
            verl__rollout__submit_step=1,
            verl__rollout__kept_because="sample",
            verl__rollout__sample_rate=2 / 7,
        )[1]
        for d in (0.3, 0.4)
    ]
    batch["events"] = [
        {
            "name": semconv.EVENT_SLOWEST_TRAJECTORY,
            "timeUnixNano": "1",
            "attributes": _attrs(
                {
                    semconv.ATTR_ROLLOUT_SUBMIT_STEP: 1,
                    semconv.ATTR_ROLLOUT_VALIDATE: False,
                    semconv.ATTR_ROLLOUT_DURATION: 2.0,
                    semconv.ATTR_ROLLOUT_TAIL_RATIO: 5.0,
                    semconv.ATTR_ROLLOUT_TRAJECTORIES: 8,
                    semconv.ATTR_ROLLOUT_SLOWEST_SPAN_ID: slow_id,
                }
            ),
        }
    ]
    write_spans(folder, semconv.ROLE_TASKRUNNER, 10, [step, gen])
    write_spans(folder, semconv.ROLE_AGENT_LOOP, 12, [batch, slow, call, *sampled])
    write_spans(folder, semconv.ROLE_REWARD_WORKER, 13, [reward])
    return slow_id


def test_summary_and_report_point_at_each_steps_slowest_kept_tree(tmp_path):
    slow_id = _run(tmp_path)
    rep = model.build(tmp_path)
    (row,) = rep.steps
    assert row.slowest.span_id == slow_id
    assert row.trajectories == 3 and ALL_TRAJECTORIES.of(row) == 8  # trees exported / trajectories run
    assert RATIO.of(row) == 5.0  # the worker's figure over all 8, not 2.0 / 0.4 from the three trees
    call = semconv.llm_call_span_name("Qwen/Qwen2.5-0.5B")
    assert sorted(s.name for s in row.tree) == [call, semconv.SPAN_REWARD_WORKER]
    text = lines(rep)
    assert f"    slowest trajectory (trees of 3 of its 8): span {slow_id} in trace {T * 2}, 2 spans below it" in text
    assert (
        f"  its tree (kept because slowest): trace {T * 2} span {slow_id}, 1 {call}, 1 {semconv.SPAN_REWARD_WORKER}"
    ) in text
    html = page.render(rep)
    assert (
        f"Its tree: 1 <code>{call}</code>, 1 <code>{semconv.SPAN_REWARD_WORKER}</code>, "
        "kept because <code>slowest</code>."
    ) in html
