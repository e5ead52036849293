"""``sitecustomize`` of a verl job's Ray workers: OpenTelemetry's auto-instrumentation without a
configurator (``otel_verl.process.worker_bootstrap``). This folder is put on the workers'
``PYTHONPATH`` in place of ``opentelemetry-instrument``'s own; it holds this one module only, since
every module here is importable by its bare name in those processes."""

from otel_verl.process.worker_bootstrap import initialize, run_next_sitecustomize

initialize()
run_next_sitecustomize()  # the one this module shadows (a user's, a distribution's), once
