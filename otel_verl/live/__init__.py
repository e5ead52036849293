"""What reads live things: the environment's endpoints and a running Jaeger (``otel-verl`` commands).

* ``doctor``: ``otel-verl doctor``, what the instrumentation would do in this environment (it
  resolves the exporters and probes their endpoints);
* ``jaeger_report``: ``otel-verl report --jaeger URL --run RUN_ID``, a live run's traces read from
  Jaeger's API into the report page.

The backend stack itself (``otel-verl stack``) is ``otel_verl.stack``.
"""
