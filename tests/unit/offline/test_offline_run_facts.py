"""``otel_verl.offline.run_facts``: the rules summary and report share."""

from __future__ import annotations

import pytest

from otel_verl import semconv
from otel_verl.offline.otlp_files import SpanRecord
from otel_verl.offline.run_facts import slowest_rule, slowest_trajectory, tail_ratio, trajectory_pool


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
