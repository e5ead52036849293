"""``verl.wait`` spans (``otel_verl.hooks.waits``): the v1 replay buffer's wait for finished
rollouts, as a child of the stage it waits in; verl's result and errors pass through."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from otel_verl import semconv
from otel_verl.hooks import waits
from otel_verl.process.state import PROCESS


def _sample(global_steps, partition_id, batch_size):
    return ("batch", {"m": 1.0})


def test_replay_buffer_sample_is_a_wait_span_inside_the_stage(captured, v0_trainer):
    tracer = PROCESS.telemetry.tracer
    with tracer.start_as_current_span("verl.gen") as stage:
        result = waits.sample_wrapper(_sample, object(), (3,), {"partition_id": "train", "batch_size": 4})
    assert result == ("batch", {"m": 1.0})
    (wait,) = [s for s in captured.finished() if s.name == semconv.SPAN_WAIT]
    assert wait.parent.span_id == stage.get_span_context().span_id
    assert dict(wait.attributes) == {
        semconv.ATTR_WAIT_FOR: "rollouts",
        semconv.ATTR_WAIT_SOURCE: "replay_buffer.sample",
        semconv.ATTR_WAIT_PARTITION: "train",
        semconv.ATTR_STEP: 3,
        semconv.ATTR_WAIT_NEEDED: 4,
        semconv.ATTR_WAIT_POLLS: 0,  # verl's first poll found enough (this stand-in never polls)
    }


def test_an_error_passes_through_and_is_on_the_span(captured, v0_trainer):
    def broken(*args, **kwargs):
        raise TimeoutError("no rollouts")

    with pytest.raises(TimeoutError, match="no rollouts"):
        waits.sample_wrapper(broken, object(), (3, "train", 4), {})
    (wait,) = [s for s in captured.finished() if s.name == semconv.SPAN_WAIT]
    assert wait.status.status_code == trace.StatusCode.ERROR


def test_no_span_outside_the_trainer_process(captured):
    assert waits.sample_wrapper(_sample, object(), (3, "train", 4), {})[0] == "batch"
    assert not [s for s in captured.finished() if s.name == semconv.SPAN_WAIT]
