"""What every ``otel-verl`` command shares (``otel_verl.cli`` dispatches to ``offline`` and ``live``).

* ``errors``: how a command ends (exit codes, the one stderr line) and how it prints (``say``);
* ``text``: text from a file or an endpoint made safe to show (bounded, control characters escaped);
* ``atomic``: an output file written whole or not at all, never through a planted link;
* ``endpoints``: the OTLP endpoint rule (``OTEL_EXPORTER_OTLP_*``) that replay and doctor share.
"""
