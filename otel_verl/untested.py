"""A verl outside the tested range: otel-verl starts anyway, and says so.

``opentelemetry-instrument`` skips an instrumentor whose ``instruments`` requirement the installed
library does not meet (``otel_verl.package._instruments``, the range the tests run), with one ERROR
line in the launcher's log. For otel-verl that would be every process of the job: no run id, so no
``verl.plugins`` activation in the Ray workers, no telemetry at all, on the day a user upgrades verl.

``start`` is otel-verl's ``opentelemetry_post_instrument`` entry point: ``opentelemetry-instrument``
runs it after its instrumentors. When it skipped ``VerlInstrumentor`` for the verl version alone, this
starts it (``skip_dep_check``), unless ``OTEL_VERL_UNTESTED_VERL=false`` or a kill switch
(``config.disabled_reason``) says otherwise, and says once which verl, which range, and how to turn it
off. What then runs is what applies: the generic parts (run id, the process pipeline, Ray processes,
GPU) do not depend on verl's internals, and each hook is applied only where its target exists with
the shape its wrapper expects (``hooks.compat.check``); each process says once, in one table with the
versions, which hooks applied and which did not (``hooks.compat.REPORT``); ``otel-verl doctor``
prints the same before a job. Why by default: the user asked for telemetry on the command line, every hook
is fail-safe, and telemetry that silently stops is the failure nobody sees for days.
"""

from __future__ import annotations

import logging
import sys

from otel_verl.package import untested_version

_log = logging.getLogger("otel_verl")


def _in_worker() -> bool:
    """A Ray worker of the job (its bootstrap is otel-verl's ``worker_bootstrap``), not the launcher."""
    return bool(getattr(sys.modules.get("otel_verl.process.worker_bootstrap"), "active", False))


def start() -> None:
    """The ``opentelemetry_post_instrument`` entry point. Never raises."""
    try:
        _start()
    except Exception:  # noqa: BLE001 - never break the program opentelemetry-instrument runs
        _log.debug("otel-verl: the untested-verl check failed", exc_info=True)


def _start() -> None:
    version = untested_version()
    if version is None:
        return  # verl in range (the instrumentor ran, or a kill switch stopped it), or no verl
    from otel_verl import config
    from otel_verl.instrumentor import VerlInstrumentor
    from otel_verl.package import _instruments

    instrumentor = VerlInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry or config.disabled_reason() is not None:
        return
    if not config.settings().untested_verl:
        _log.warning(
            "otel-verl: verl %s is outside the range it was tested with (%s) and %s=false: otel-verl is off",
            version,
            _instruments[0],
            config.UNTESTED_VERL,
        )
        return
    if not _in_worker():  # the launcher says it for the job; each worker's hook table says it again
        _log.warning(
            "otel-verl: verl %s is outside the range it was tested with (%s); starting anyway: each hook is "
            "applied where its target exists with the shape it expects, each process says once which applied "
            "and which did not (`otel-verl doctor`: the same before a job); %s=false turns otel-verl off on an "
            "untested verl",
            version,
            _instruments[0],
            config.UNTESTED_VERL,
        )
    instrumentor.instrument(skip_dep_check=True)
