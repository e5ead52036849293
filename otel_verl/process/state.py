"""``PROCESS``: this process's state, shared by every hook: who it is, its pipeline, its trainer.

The pipeline is built on first use (``telemetry``), after the first hooks had a chance to say
who this process is (``identify``), so the identity ends up in the resource. Providers passed to
``instrument()`` are kept here, and only here (``use_providers``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace
from opentelemetry.trace import SpanContext

from otel_verl import per_process
from otel_verl._safe import warn_once
from otel_verl.instruments import Instruments
from otel_verl.process import global_providers, logs
from otel_verl.process.resource import Identity

if TYPE_CHECKING:
    from otel_verl.process.telemetry import Telemetry


class ProcessState:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.identity = Identity()
        self._telemetry: Telemetry | None = None
        self._given: tuple[Any, Any] | None = None  # (tracer, meter) providers given to instrument()
        self._given_logs: Any = None  # a LoggerProvider given to instrument()
        self._instruments: Instruments | None = None
        self._trainer: weakref.ReferenceType[Any] | None = None
        self._on_built: list[Callable[[], None]] = []  # said once the pipeline is first built (on_built)
        # (id of the step's timing dict, the step span's context): stages verl times outside
        # the ``step`` timer (``testing``) join that step's trace.
        self.last_step: tuple[int, SpanContext] | None = None
        # stage -> the context of its last span in the current (or just ended) step: the exemplar of
        # that step's ``verl.stage.duration`` value (verl logs its timing_s after the spans ended).
        self.stage_spans: dict[str, SpanContext] = {}

    # -- configuration -------------------------------------------------------------
    def use_providers(self, tracer_provider: Any, meter_provider: Any, logger_provider: Any = None) -> None:
        """Providers passed to ``instrument()``; None for all three: build this process's own.

        Given a tracer or meter provider, the other one defaults to the global one."""
        with self._lock:
            given = (tracer_provider, meter_provider)
            self._given = given if any(p is not None for p in given) else None
            self._given_logs = logger_provider
            self._telemetry = None
            self._instruments = None
        if logger_provider is not None:
            logs.attach(logger_provider)

    def identify(self, **fields: Any) -> None:
        """Record who this process is; the resource is made from it when telemetry is first used
        (later changes no longer reach the resource)."""
        with self._lock:
            for key, value in fields.items():
                if value is not None:
                    setattr(self.identity, key, value)

    def on_built(self, call: Callable[[], None]) -> None:
        """Call ``call`` (once per registration, never raising) when this process's telemetry is
        first built; nothing when it is built already. How a hook-side report is said at the
        pipeline's start without the pipeline importing hooks."""
        with self._lock:
            if call not in self._on_built:
                self._on_built.append(call)

    # -- access --------------------------------------------------------------------
    @property
    def built(self) -> bool:
        """Whether this process's telemetry (and so its resource) is made already."""
        return self._telemetry is not None

    @property
    def telemetry(self) -> Telemetry:
        tel = self._telemetry
        if tel is None:
            with self._lock:
                built = self._telemetry is None
                if built:
                    self._telemetry = self._build()
                tel = self._telemetry
            if built:  # this process's telemetry starts: e.g. the hook table is said (hooks.compat)
                for call in list(self._on_built):
                    try:
                        call()
                    except Exception:  # noqa: BLE001 - a report must never break the process
                        warn_once("on built", "a call at the telemetry's start failed", exc_info=True)
        return tel

    def _build(self) -> Telemetry:
        # the SDK is imported here, on first use: verl processes that never run a hook skip it
        from otel_verl.process.telemetry import Telemetry, build_own, noop_telemetry

        if self._given is not None:
            tp, mp = self._given
            return Telemetry(tp or trace.get_tracer_provider(), mp or metrics.get_meter_provider())
        try:
            telemetry = build_own(self.identity)
        except Exception:  # noqa: BLE001 - no telemetry is better than a rebuild per hook call
            warn_once("telemetry build", "could not build this process's telemetry; it stays off", exc_info=True)
            return noop_telemetry()
        if telemetry.owned:  # user code's plain OpenTelemetry API reaches the run's pipeline too
            try:
                global_providers.install(telemetry.tracer_provider, telemetry.meter_provider, telemetry.logger_provider)
            except Exception:  # noqa: BLE001
                warn_once("global providers", "could not install the global providers", exc_info=True)
        return telemetry

    @property
    def instruments(self) -> Instruments:
        """Every named instrument, created once on this process's meter."""
        inst = self._instruments
        if inst is None:
            meter = self.telemetry.meter
            with self._lock:
                if self._instruments is None:
                    self._instruments = Instruments(meter)
                inst = self._instruments
        return inst

    def logger_provider(self) -> Any:
        """The LoggerProvider logs and samples go to in this process, or None (logs off)."""
        if self._given_logs is not None:
            return self._given_logs
        return getattr(self.telemetry, "logger_provider", None)

    @property
    def trainer(self) -> Any:
        return self._trainer() if self._trainer is not None else None

    @trainer.setter
    def trainer(self, value: Any) -> None:
        self._trainer = weakref.ref(value) if value is not None else None

    def forget_run(self) -> None:
        """``uninstrument()``: drop the trainer, the last step and a given logger provider (the
        pipeline stays: its exit shutdown is registered)."""
        self.trainer = None
        self.last_step = None
        self.stage_spans = {}
        self._given_logs = None

    def reset(self) -> None:
        """As in a process that just started: no identity, no pipeline, no providers given, no run.
        The pipeline was ended before (``otel_verl.process.telemetry`` registers after this module:
        its reset runs first, bounded). What is said once the pipeline is built stays (registered at
        import)."""
        self.use_providers(None, None)
        with self._lock:
            self.identity = Identity()
        self.forget_run()


PROCESS = ProcessState()
per_process.register(__name__, reset=PROCESS.reset)
