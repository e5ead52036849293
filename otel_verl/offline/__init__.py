"""Tools that work on a run's stored telemetry, off the training path (``otel-verl`` commands).

Nothing here runs inside a training process; ``otel_verl.cli`` calls them. What operates live
things is ``otel_verl.live`` and ``otel_verl.stack``; how every command ends, ``otel_verl.exits``.

* ``summary``: ``otel-verl summary DIR``, the run as a few lines of text;
* ``report``: ``otel-verl report DIR``, the run as one self-contained HTML page;
* ``run/``: the run's model (``run.model.build``) beside its two renderers, ``run.text`` (the
  summary's lines) and ``run.page`` (the report's HTML);
* ``facts/``: one module per fact summary and report state (its fold, its sentence, its data for the
  page), ``facts.folds`` the list of them, ``facts.step_facts`` the list of the per-step ones;
* ``run_reader``: a run folder read at any size, what it holds bounded (``bounded``: per-step
  series, samples, picked steps), handing each fact's fold what it names (``folds``); ``exports``:
  each export placed at its step; ``values``: small rules over the values read;
* ``replay``: ``otel-verl replay DIR``, the stored OTLP JSON sent to an OTLP/HTTP endpoint
  (``http_post``: how it talks to an endpoint it does not trust); ``replay_spool``:
  ``otel-verl replay --spool DIR``, the batches dead processes left in a spool folder, sent only
  to the endpoint their own process recorded;
* ``otlp_files``: reads the OTLP JSON-lines files the ``otlp_json_file`` exporters write, each
  field it uses checked as ``json_format`` reads it (``otlp_fields``); a traces or metrics line of
  the usual shape decoded into typed structs (``otlp_typed``).
"""
