"""``python -m otel_verl.cli``: the ``otel-verl`` command."""

from otel_verl.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
