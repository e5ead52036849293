"""Stage spans from verl's real timers (``marked_timer``/``simple_timer`` -> ``_timer``)."""

from __future__ import annotations

import pytest
from opentelemetry.trace import StatusCode

from otel_verl import semconv


def _by_name(spans):
    return {s.name: s for s in spans}


def test_step_trace_has_stage_children_and_exact_durations(captured, v0_trainer):
    from verl.utils.profiler import marked_timer

    timing: dict[str, float] = {}
    with marked_timer("step", timing):
        for stage in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights"):
            with marked_timer(stage, timing):
                sum(range(20_000))
    with marked_timer("testing", timing):  # verl runs validation after the step timer
        pass
    # verl logs its timing_raw as timing_s/<stage> once per step; the stage histogram comes from there
    from verl.utils.tracking import Tracking

    Tracking(project_name="p", experiment_name="e", default_backend=[]).log(
        data={f"timing_s/{k}": v for k, v in timing.items()}, step=3
    )

    spans = _by_name(captured.finished())
    step = spans[semconv.SPAN_STEP]
    assert step.parent is None
    assert step.attributes[semconv.ATTR_STEP] == 3
    assert step.attributes[semconv.ATTR_EPOCH] == 1  # (3 - 1) // 2 steps per epoch
    for stage in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "testing"):
        span = spans["verl." + stage]
        assert span.attributes[semconv.ATTR_STAGE] == stage
        assert span.parent.span_id == step.context.span_id
        assert span.context.trace_id == step.context.trace_id
        seconds = (span.end_time - span.start_time) / 1e9
        assert abs(seconds - timing[stage]) <= max(0.005, 0.05 * timing[stage])

    hist = {p.attributes[semconv.ATTR_STAGE]: p for p in captured.metric_points()[semconv.M_STAGE_DURATION]}
    assert hist["gen"].count == 1
    assert hist["gen"].sum == pytest.approx(timing["gen"], rel=1e-12)
    points = captured.metric_points()
    assert points[semconv.M_TRAINING_STEP][0].value == 3
    assert points[semconv.M_TRAINING_STEPS][0].value == 1


def test_each_step_is_its_own_trace(captured, v0_trainer):
    from verl.utils.profiler import marked_timer

    for step in (1, 2):
        v0_trainer.global_steps = step
        with marked_timer("step", {}):
            pass
    first, second = captured.finished()
    assert first.context.trace_id != second.context.trace_id
    assert [first.attributes[semconv.ATTR_STEP], second.attributes[semconv.ATTR_STEP]] == [1, 2]


def test_stage_exception_is_recorded_and_reraised_unchanged(captured, v0_trainer):
    from verl.utils.profiler import marked_timer

    timing: dict[str, float] = {}
    err = RuntimeError("rollout server died")
    with pytest.raises(RuntimeError) as info:
        with marked_timer("step", timing):
            with marked_timer("gen", timing):
                raise err
    assert info.value is err
    assert timing == {}  # verl skips its timing update on error; we do not change that
    spans = _by_name(captured.finished())
    for name in ("verl.gen", "verl.step"):
        assert spans[name].status.status_code is StatusCode.ERROR
        assert spans[name].events[0].name == "exception"
        assert spans[name].events[0].attributes["exception.message"] == "rollout server died"


def test_no_spans_without_a_trainer_in_the_process(captured):
    """Agent-loop workers time every sample; those timers must not become spans."""
    from verl.utils.profiler import simple_timer

    timing: dict[str, float] = {}
    with simple_timer("generate_sequences", timing):
        pass
    assert "generate_sequences" in timing
    assert captured.finished() == []


def test_uninstrument_leaves_no_spans(captured, v0_trainer):
    from verl.utils.profiler import marked_timer

    from otel_verl import VerlInstrumentor

    VerlInstrumentor().uninstrument()
    with marked_timer("step", {}):
        pass
    assert captured.finished() == []


@pytest.mark.parametrize("steps", [None, [], [2, 3]])
def test_profiler_stages_get_spans_only_where_the_profiler_may_run(captured, v0_trainer, steps):
    """v0 times ``start_profile``/``stop_profile`` every step; with ``global_profiler.steps`` unset
    (verl's default) they do nothing, and make no span (nor, for ``start_profile``, a trace of its own)."""
    from omegaconf import OmegaConf
    from verl.utils.profiler import marked_timer

    v0_trainer.config = OmegaConf.create({"global_profiler": {"steps": steps}})
    timing: dict[str, float] = {}
    with marked_timer("start_profile", timing):
        pass
    with marked_timer("step", timing):
        with marked_timer("gen", timing):
            pass
    with marked_timer("stop_profile", timing):
        pass
    assert set(timing) == {"start_profile", "step", "gen", "stop_profile"}  # verl's own timing as ever
    names = sorted(s.name for s in captured.finished())
    profiled = ["verl.start_profile", "verl.stop_profile"] if steps else []
    assert names == sorted(["verl.step", "verl.gen", *profiled])


def test_profiler_stages_keep_their_spans_when_the_config_is_unknown(captured, v0_trainer):
    from verl.utils.profiler import marked_timer

    with marked_timer("stop_profile", {}):  # no ``config`` on this trainer
        pass
    assert [s.name for s in captured.finished()] == ["verl.stop_profile"]


def test_validation_and_checkpoint_stages_tell_the_stall_clock(captured, v0_trainer, monkeypatch):
    """verl's ``testing`` and ``save_checkpoint`` timers, and a validation outside any stage,
    are the long stages the stall clock measures against their own norm (``stall.watchdog``)."""
    from verl.utils.profiler import marked_timer

    from otel_verl.hooks import trainer as trainer_hooks
    from otel_verl.stall import watchdog

    clock = watchdog.StepClock()
    monkeypatch.setattr(watchdog, "STEP_CLOCK", clock)
    monkeypatch.setattr("otel_verl.hooks.stages.STEP_CLOCK", clock)
    monkeypatch.setattr(trainer_hooks, "STEP_CLOCK", clock)
    seen = []
    trainer_hooks._validate_wrapper(lambda: seen.append(clock.stage[0]), v0_trainer, (), {})
    timing: dict[str, float] = {}
    with marked_timer("step", timing):
        with marked_timer("gen", timing):
            seen.append(clock.stage)
        for name in ("save_checkpoint", "testing"):
            with marked_timer(name, timing):
                seen.append(clock.stage[0])
    assert seen == ["testing", None, "save_checkpoint", "testing"]
    assert clock.stage is None
    assert {k: len(v) for k, v in clock.stage_durations.items()} == {"testing": 2, "save_checkpoint": 1}


def test_each_stage_value_has_its_steps_stage_span_as_exemplar(captured, v0_trainer):
    """The histogram is recorded on the background recorder (an empty context there): the exemplar of
    a step's ``timing_s/<stage>`` value is still exactly that step's span of that stage."""
    from verl.utils.profiler import marked_timer
    from verl.utils.tracking import Tracking

    tracking = Tracking(project_name="p", experiment_name="e", default_backend=[])
    for step in (1, 2):
        v0_trainer.global_steps = step
        timing: dict[str, float] = {}
        with marked_timer("step", timing):
            for stage in ("gen", "update_actor"):
                with marked_timer(stage, timing):
                    pass
        tracking.log(data={f"timing_s/{k}": v for k, v in timing.items()}, step=step)
        points = captured.metric_points()  # a collection per step, as each step's export
        spans = {
            s.attributes.get(semconv.ATTR_STAGE, "step"): s
            for s in captured.finished()
            if s.attributes.get(semconv.ATTR_STEP) == step
        }
        hist = {p.attributes[semconv.ATTR_STAGE]: p for p in points[semconv.M_STAGE_DURATION]}
        for stage in ("step", "gen", "update_actor"):  # step: the step's root span
            exemplars = [e for e in hist[stage].exemplars if e.value == timing[stage]]
            assert exemplars, (step, stage, hist[stage].exemplars)
            ctx = spans[stage].context
            assert {(e.trace_id, e.span_id) for e in exemplars} == {(ctx.trace_id, ctx.span_id)}, (step, stage)
