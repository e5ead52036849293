"""Tools that work on a run's stored telemetry (or on the environment), off the training path.

Nothing here runs inside a training process; the ``otel-verl`` commands (``otel_verl.cli``) call them.

* ``summary``: ``otel-verl summary DIR``, the run as a few lines of text;
* ``report``: ``otel-verl report DIR``, the run as one self-contained HTML page;
* ``replay``: ``otel-verl replay DIR``, the stored OTLP JSON sent to an OTLP/HTTP endpoint;
* ``doctor``: ``otel-verl doctor``, what the instrumentation would do in this environment;
* ``otlp_files``: reads the OTLP JSON-lines files the ``otlp_json_file`` exporters write;
* ``endpoints``: the OTLP endpoint rule (``OTEL_EXPORTER_OTLP_*``) replay and doctor share;
* ``run_facts``: what summary and report both state (the slowest trajectory, values per step);
* ``errors``: how a command ends (exit codes, the one stderr line) and how it prints (``say``);
* ``text``: text from a run folder made safe to show (bounded, control characters escaped);
* ``atomic``: an output file written whole or not at all, never through a planted link.
"""
