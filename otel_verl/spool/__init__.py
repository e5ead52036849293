"""The on-disk spool: what an OTLP endpoint did not take, kept on the node and sent later.

* ``store``: the spool folders (one per process, signal and destination), their batch files, the
  bound, adoption of a dead process's folders;
* ``exporters``: the SDK's OTLP exporters behind the spool (sends in their own thread, a batch the
  endpoint does not take goes to disk), the closing and draining at shutdown;
* ``resend``: a spooled batch (OTLP protobuf) sent again with the exporter's own session or channel;
* ``stats``: what the spool took, re-sent and lost (``otel_verl.spool.*`` counters).

What ended processes left is also sent from the command line: ``otel-verl replay --spool``
(``otel_verl.offline.replay_spool``, over offline's OTLP/HTTP replay client).
"""
