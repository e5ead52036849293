"""Tools that work on a run's stored telemetry, off the training path (``otel-verl`` commands).

Nothing here runs inside a training process; ``otel_verl.cli`` calls them. What operates live
things is ``otel_verl.live`` and ``otel_verl.stack``; how every command ends, ``otel_verl.exits``.

* ``summary``: ``otel-verl summary DIR``, the run as a few lines of text;
* ``report``: ``otel-verl report DIR``, the run as one self-contained HTML page;
* ``replay``: ``otel-verl replay DIR``, the stored OTLP JSON sent to an OTLP/HTTP endpoint
  (``http_post``: how it talks to an endpoint it does not trust); ``replay_spool``:
  ``otel-verl replay --spool DIR``, the batches dead processes left in a spool folder, sent only
  to the endpoint their own process recorded;
* ``otlp_files``: reads the OTLP JSON-lines files the ``otlp_json_file`` exporters write, each
  field it uses checked as ``json_format`` reads it (``otlp_fields``); a traces or metrics line of
  the usual shape decoded into typed structs (``otlp_typed``);
* ``run_reader``: a run folder read at any size, what it holds bounded (``bounded``: per-step
  series, samples, picked steps);
* ``run_facts``: what summary and report both state (the slowest trajectory, values per step);
* ``health``, ``generation``, ``goodput``: the health box's facts (non-finite values, alerts,
  validation; degenerate responses; goodput by role);
* ``pools``: busy and idle seconds of each rollout replica, from the LLM-call spans.
"""
