"""``otel_verl.offline.facts.slowest`` and ``facts.time_went``: the rules summary and report share."""

from __future__ import annotations

import pytest

from otel_verl import semconv
from otel_verl.offline.facts.slowest import slowest_rule, slowest_trajectory, trajectory_pool
from otel_verl.offline.facts.tails import tail_ratio
from otel_verl.offline.otlp_files import SpanRecord


def _traj(span_id: str, seconds: float, validate: bool = False, name: str = semconv.SPAN_ROLLOUT_TRAJECTORY):
    attrs = {semconv.ATTR_ROLLOUT_VALIDATE: True} if validate else {}
    return SpanRecord(name, "t", span_id, "", 0, int(seconds * 1e9), attrs, {}, "STATUS_CODE_UNSET")


def test_the_slowest_is_a_training_trajectory_unless_validation_is_asked_for():
    spans = [_traj("a", 1.0), _traj("b", 3.0), _traj("v", 9.0, validate=True), _traj("x", 20.0, name="verl.gen")]
    assert [s.span_id for s in trajectory_pool(spans)] == ["a", "b"]
    assert slowest_trajectory(spans).span_id == "b"
    assert slowest_trajectory(spans, include_validation=True).span_id == "v"
    assert slowest_trajectory([_traj("v", 9.0, validate=True)]) is None  # no fallback to validation
    assert slowest_trajectory([_traj("a", 2.0), _traj("c", 2.0)]).span_id == "c"  # ties: one answer for both tools
    assert (
        "--include-validation" in slowest_rule(False) and slowest_rule(True) == "training and validation trajectories"
    )


def test_tail_ratio_is_slowest_over_median():
    assert tail_ratio([_traj("a", 1.0), _traj("b", 1.0), _traj("c", 4.0)]) == pytest.approx(4.0)
    assert tail_ratio([]) is None and tail_ratio([_traj("a", 0.0)]) is None


# -- where a step's time went (time_went.attributed_seconds) ------------------------------------------
def _span(name: str, span_id: str, parent: str, start_s: float, end_s: float, **attrs) -> SpanRecord:
    return SpanRecord(name, "t", span_id, parent, int(start_s * 1e9), int(end_s * 1e9), attrs, {}, "STATUS_CODE_UNSET")


def test_covered_seconds_counts_overlaps_once_and_clips_to_the_parent():
    from otel_verl.offline.facts.time_went import covered_seconds

    parent = _span("verl.gen", "g", "s", 10.0, 14.0)
    children = [
        _span("a", "a", "g", 9.0, 11.0),  # starts before the parent: 1 s inside
        _span("b", "b", "g", 10.5, 12.0),  # overlaps a
        _span("c", "c", "g", 13.0, 15.0),  # ends after the parent: 1 s inside
    ]
    assert covered_seconds(parent, children) == pytest.approx(3.0)
    assert covered_seconds(parent, []) == 0.0


def test_attributed_seconds_is_the_child_covered_part_of_the_stages():
    from otel_verl.offline.facts.time_went import attributed_seconds

    step = _span(semconv.SPAN_STEP, "s", "", 0.0, 10.0)
    trace = [
        step,
        _span("verl.gen", "g", "s", 0.0, 6.0, **{semconv.ATTR_STAGE: "gen"}),
        _span(semconv.SPAN_WAIT, "w", "g", 0.5, 5.5),  # the replay buffer's wait: 5 of gen's 6 s
        _span("verl.adv", "a", "s", 6.0, 7.0, **{semconv.ATTR_STAGE: "adv"}),  # driver work: no child
        _span("verl.update_actor", "u", "s", 7.0, 9.5, **{semconv.ATTR_STAGE: "update_actor"}),
        _span("verl.wg.actor_rollout_update_actor", "wg", "u", 7.1, 9.4),
        _span("verl.wg.x", "x", "s", 9.6, 9.9),  # a child of the step, not of a stage: residual
    ]
    assert attributed_seconds(step, trace) == pytest.approx(5.0 + 2.3)
