"""The training-driver hooks (``otel_verl.hooks.trainer``) with verl's real trainer classes.

Trainers are created with ``__new__`` (no workers, no config of verl's); the wrappers are called
directly with a stand-in ``wrapped`` (what wrapt hands them: verl's method, bound), and the
``captured`` fixture checks that these are the wrappers installed on verl's classes.
"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from opentelemetry import trace
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from otel_verl import semconv
from otel_verl.config import settings
from otel_verl.hooks import trainer as trainer_hooks
from otel_verl.process.state import PROCESS


class MyPPOTrainer(PPOTrainerSync):
    """A user's subclass of verl's v1 trainer."""


class PPOTrainerLookalike:
    """Named like verl's v1 trainer, but from another module."""


PPOTrainerLookalike.__name__ = "PPOTrainer"


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """No process or GPU gauges (the process's state is as just started: ``_fresh_process``)."""
    monkeypatch.setenv("OTEL_VERL_PROCESS_METRICS", "false")  # the __init__ hook registers process.* gauges
    monkeypatch.setenv("OTEL_VERL_GPU_METRICS", "false")
    settings.cache_clear()
    yield
    monkeypatch.delenv("OTEL_VERL_PROCESS_METRICS")
    monkeypatch.delenv("OTEL_VERL_GPU_METRICS")
    settings.cache_clear()


def make(cls, **attrs):
    trainer = cls.__new__(cls)
    for key, value in attrs.items():
        setattr(trainer, key, value)
    return trainer


def abstract_ppo_trainer(monkeypatch):
    """An object of exactly verl's ``PPOTrainer`` (an ABC: its abstract methods lifted for the test)."""
    monkeypatch.setattr(PPOTrainer, "__abstractmethods__", frozenset())
    return make(PPOTrainer)


# ------------------------------------------------------------------------------ driver, epoch, step attributes
def test_driver_is_v0_for_ray_ppo_trainer(v0_trainer):
    assert trainer_hooks.driver(v0_trainer) == "v0"
    assert trainer_hooks.driver(v0_trainer) == semconv.DRIVER_V0


def test_driver_is_v1_for_ppo_trainer_and_its_subclasses(monkeypatch):
    assert trainer_hooks.driver(abstract_ppo_trainer(monkeypatch)) == "v1"
    assert trainer_hooks.driver(make(PPOTrainerSync)) == "v1"  # verl's own subclass
    assert trainer_hooks.driver(make(MyPPOTrainer)) == "v1"  # a user's subclass of that
    assert semconv.DRIVER_V1 == "v1"


def test_driver_is_v0_for_anything_else():
    assert trainer_hooks.driver(object()) == "v0"
    assert trainer_hooks.driver(PPOTrainerLookalike()) == "v0"  # same name, not verl's module


@pytest.mark.parametrize(("step", "epoch"), [(0, 0), (1, 0), (4, 0), (5, 1), (9, 2)])
def test_epoch_of_v1_uses_steps_per_epoch(step, epoch):
    trainer = make(PPOTrainerSync, steps_per_epoch=4, train_dataloader=[0] * 100)
    assert trainer_hooks.epoch_of(trainer, step) == epoch


@pytest.mark.parametrize(("step", "epoch"), [(0, 0), (1, 0), (2, 0), (3, 1), (5, 2)])
def test_epoch_of_v0_uses_the_dataloader_length(v0_trainer, step, epoch):
    assert len(v0_trainer.train_dataloader) == 2
    assert trainer_hooks.epoch_of(v0_trainer, step) == epoch


def test_epoch_of_is_none_without_a_length_or_steps_per_epoch(v0_trainer):
    v0_trainer.train_dataloader = iter([0, 1])  # no len()
    assert trainer_hooks.epoch_of(v0_trainer, 3) is None
    v0_trainer.train_dataloader = []  # no steps per epoch
    assert trainer_hooks.epoch_of(v0_trainer, 3) is None
    assert trainer_hooks.epoch_of(make(PPOTrainerSync, steps_per_epoch=0), 3) is None
    assert trainer_hooks.epoch_of(make(RayPPOTrainer), 3) is None  # no dataloader at all


def test_step_attributes_are_a_fresh_dict_each_call(v0_trainer):
    first = trainer_hooks.step_attributes(v0_trainer)
    assert first == {semconv.ATTR_DRIVER: "v0", semconv.ATTR_STEP: 3, semconv.ATTR_EPOCH: 1}
    first["spoiled"] = True
    first[semconv.ATTR_STEP] = 99
    second = trainer_hooks.step_attributes(v0_trainer)
    assert second is not first
    assert second == {semconv.ATTR_DRIVER: "v0", semconv.ATTR_STEP: 3, semconv.ATTR_EPOCH: 1}


def test_step_attributes_follow_the_step_and_the_driver():
    trainer = make(PPOTrainerSync, global_steps=4, steps_per_epoch=4)
    assert trainer_hooks.step_attributes(trainer) == {"verl.driver": "v1", "verl.step": 4, "verl.epoch": 0}
    trainer.global_steps = 5
    assert trainer_hooks.step_attributes(trainer) == {"verl.driver": "v1", "verl.step": 5, "verl.epoch": 1}
    trainer.global_steps = None  # before fit sets a step: the driver only
    assert trainer_hooks.step_attributes(trainer) == {"verl.driver": "v1"}
    no_epoch = make(RayPPOTrainer, global_steps=2, train_dataloader=iter([]))
    assert trainer_hooks.step_attributes(no_epoch) == {"verl.driver": "v0", "verl.step": 2}


# ------------------------------------------------------------------------------ the wrappers installed
@pytest.mark.parametrize(
    ("cls", "method", "wrapper"),
    [
        (RayPPOTrainer, "__init__", trainer_hooks._trainer_init_wrapper),
        (RayPPOTrainer, "init_workers", trainer_hooks._init_workers_wrapper),
        (RayPPOTrainer, "_validate", trainer_hooks._validate_wrapper),
        (RayPPOTrainer, "fit", trainer_hooks._fit_wrapper),
        (PPOTrainer, "__init__", trainer_hooks._trainer_init_wrapper),
        (PPOTrainer, "init", trainer_hooks._init_workers_wrapper),
        (PPOTrainer, "_validate", trainer_hooks._validate_wrapper),
        (PPOTrainer, "fit", trainer_hooks._fit_wrapper),
    ],
)
def test_instrument_puts_these_wrappers_on_verls_trainers(captured, cls, method, wrapper):
    chain, attr = [], cls.__dict__[method]
    while hasattr(attr, "_self_wrapper"):  # fit also carries the guard's wrapper, outside this one
        chain.append(attr._self_wrapper)
        attr = attr.__wrapped__
    assert wrapper in chain


# ------------------------------------------------------------------------------ init / init_workers
def test_init_is_a_verl_init_root_span_with_the_redacted_config(captured):
    cfg = OmegaConf.create({"trainer": {"project_name": "proj-a", "api_key": "secret-123"}})
    trainer = make(PPOTrainerSync, config=cfg, global_steps=0, steps_per_epoch=4)
    with PROCESS.telemetry.tracer.start_as_current_span("caller"):  # verl's init is a trace of its own
        assert trainer_hooks._init_workers_wrapper(lambda: "ready", trainer, (), {}) == "ready"
    (span,) = [s for s in captured.finished() if s.name == semconv.SPAN_INIT]
    assert span.name == "verl.init"
    assert span.parent is None
    text = span.attributes[semconv.ATTR_CONFIG]
    assert '"project_name":"proj-a"' in text
    assert "secret-123" not in text
    assert span.attributes[semconv.ATTR_DRIVER] == "v1"
    assert PROCESS.identity.role == "taskrunner" and PROCESS.identity.project == "proj-a"


# ------------------------------------------------------------------------------ _validate
def test_validate_outside_a_span_is_a_verl_validation_root_span(captured, v0_trainer):
    seen = []

    def wrapped(*args, **kwargs):
        seen.append((args, kwargs, trace.get_current_span()))
        return {"val/score": 0.5}

    result = trainer_hooks._validate_wrapper(wrapped, v0_trainer, (), {"merged": True})
    assert result == {"val/score": 0.5}
    ((args, kwargs, current),) = seen
    assert (args, kwargs) == ((), {"merged": True})

    (span,) = captured.finished()
    assert span.name == semconv.SPAN_VALIDATION == "verl.validation"
    assert span.parent is None
    assert current.get_span_context().span_id == span.context.span_id  # current while verl validates
    assert dict(span.attributes) == {
        "verl.validation.initial": False,  # step 3: not the validation before training
        "verl.driver": "v0",
        "verl.step": 3,
        "verl.epoch": 1,
        "verl.trainer.class": "RayPPOTrainer",
    }
    assert span.status.status_code == trace.StatusCode.UNSET
    assert not trace.get_current_span().get_span_context().is_valid  # context restored
    assert PROCESS.trainer is v0_trainer


def test_validate_before_training_is_initial(captured):
    trainer = make(PPOTrainerSync, global_steps=0, steps_per_epoch=4)
    trainer_hooks._validate_wrapper(lambda: None, trainer, (), {})
    (span,) = captured.finished()
    assert span.name == "verl.validation"
    assert span.attributes[semconv.ATTR_VALIDATION_INITIAL] is True
    assert span.attributes[semconv.ATTR_DRIVER] == "v1"
    assert span.attributes[semconv.ATTR_TRAINER_CLASS] == "PPOTrainerSync"


def test_validate_inside_a_span_opens_none(captured, v0_trainer):
    calls = []
    with PROCESS.telemetry.tracer.start_as_current_span("verl.testing") as outer:
        result = trainer_hooks._validate_wrapper(
            lambda: calls.append(trace.get_current_span()) or "metrics", v0_trainer, (), {}
        )
    assert result == "metrics"
    assert calls == [outer]  # verl ran under the enclosing span
    assert [s.name for s in captured.finished()] == ["verl.testing"]


def test_validate_error_ends_the_span_with_the_error_and_raises_it(captured, v0_trainer):
    error = ValueError("validation broke")

    def wrapped():
        raise error

    with pytest.raises(ValueError) as raised:
        trainer_hooks._validate_wrapper(wrapped, v0_trainer, (), {})
    assert raised.value is error
    (span,) = captured.finished()
    assert span.name == "verl.validation"
    assert span.status.status_code == trace.StatusCode.ERROR


# ------------------------------------------------------------------------------ fit
@pytest.fixture
def flushes(captured, monkeypatch):
    calls = []
    monkeypatch.setattr(PROCESS.telemetry, "flush", lambda *a, **kw: calls.append("flush"))
    return calls


def test_fit_flushes_when_training_ends(flushes, v0_trainer):
    order = []

    def wrapped(*args, **kwargs):
        order.append(("fit", args, kwargs, list(flushes)))
        return "done"

    assert trainer_hooks._fit_wrapper(wrapped, v0_trainer, ("manager",), {"k": 1}) == "done"
    assert order == [("fit", ("manager",), {"k": 1}, [])]  # not flushed before verl's fit ran
    assert flushes == ["flush"]
    assert PROCESS.trainer is v0_trainer


def test_fit_flushes_when_it_raises_and_the_error_passes_through_unchanged(flushes):
    trainer = make(PPOTrainerSync, global_steps=7, steps_per_epoch=4)
    error = RuntimeError("worker actor died")

    def wrapped():
        raise error

    with pytest.raises(RuntimeError) as raised:
        trainer_hooks._fit_wrapper(wrapped, trainer, (), {})
    assert raised.value is error
    assert raised.value.args == ("worker actor died",)
    assert flushes == ["flush"]


def test_fit_error_is_not_replaced_by_a_failing_flush(captured, monkeypatch, v0_trainer):
    def broken_flush(*args, **kwargs):
        raise OSError("exporter down")

    monkeypatch.setattr(PROCESS.telemetry, "flush", broken_flush)
    error = KeyboardInterrupt()

    def wrapped():
        raise error

    with pytest.raises(KeyboardInterrupt) as raised:
        trainer_hooks._fit_wrapper(wrapped, v0_trainer, (), {})
    assert raised.value is error
    assert trainer_hooks._fit_wrapper(lambda: 42, v0_trainer, (), {}) == 42


# ------------------------------------------------------------------------------ __init__
@pytest.mark.parametrize("cls", [RayPPOTrainer, PPOTrainerSync])
def test_init_names_the_process_a_taskrunner_of_the_project_and_experiment(captured, cls):
    trainer = make(cls)
    cfg = OmegaConf.create({"trainer": {"project_name": "proj-a", "experiment_name": "exp-7"}})

    def wrapped(config):  # verl's __init__, bound: it stores the config
        trainer.config = config
        return None

    assert PROCESS.identity.role != "taskrunner"
    assert trainer_hooks._trainer_init_wrapper(wrapped, trainer, (cfg,), {}) is None
    identity = PROCESS.identity
    assert identity.role == semconv.ROLE_TASKRUNNER == "taskrunner"
    assert identity.project == "proj-a"
    assert identity.experiment == "exp-7"
    assert PROCESS.trainer is trainer


def test_init_without_project_or_experiment_names_only_the_role(captured):
    trainer = make(RayPPOTrainer)

    def wrapped(config):
        trainer.config = config

    cfg = OmegaConf.create({"trainer": {"project_name": None, "experiment_name": ""}})
    trainer_hooks._trainer_init_wrapper(wrapped, trainer, (cfg,), {})
    assert PROCESS.identity.role == "taskrunner"
    assert PROCESS.identity.project is None
    assert PROCESS.identity.experiment is None


def test_init_resets_the_step_attribute_cache(captured):
    old = make(PPOTrainerSync, global_steps=1, steps_per_epoch=1)
    assert trainer_hooks.step_attributes(old)[semconv.ATTR_DRIVER] == "v1"
    new = make(RayPPOTrainer, global_steps=1, train_dataloader=[0])
    trainer_hooks._trainer_init_wrapper(lambda: None, new, (), {})
    assert trainer_hooks._attrs_cache == (None, None, {})
    assert trainer_hooks.step_attributes(new) == {"verl.driver": "v0", "verl.step": 1, "verl.epoch": 0}


def test_a_new_trainer_at_the_same_step_never_gets_the_old_ones_attributes():
    """The cache holds the trainer by weak reference: a later trainer (even at a freed one's
    address, without ``__init__`` running) computes its own attributes."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    for _ in range(20):
        v1 = make(PPOTrainerSync, global_steps=3, steps_per_epoch=4)
        assert trainer_hooks.step_attributes(v1)[semconv.ATTR_DRIVER] == semconv.DRIVER_V1
        del v1
        v0 = make(RayPPOTrainer, global_steps=3, train_dataloader=[0, 1])
        attrs = trainer_hooks.step_attributes(v0)
        assert (attrs[semconv.ATTR_DRIVER], attrs[semconv.ATTR_EPOCH]) == (semconv.DRIVER_V0, 1)
