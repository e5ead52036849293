"""``otel-verl replay DIR --endpoint URL``: a run's OTLP JSON files sent to an OTLP/HTTP endpoint;
``--spool DIR``: what ended verl processes left in their on-disk spools."""

from __future__ import annotations

import argparse
from pathlib import Path

from otel_verl.cli.options import EPILOG, byte_count, seconds
from otel_verl.exits import USAGE, CommandError


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "replay",
        help="send a run's OTLP JSON files, or what verl processes spooled, to an OTLP/HTTP endpoint",
        epilog=EPILOG,
    )
    parser.add_argument("folder", type=Path, nargs="?", help="the run's OTEL_VERL_FILE_DIR")
    parser.add_argument(
        "--spool",
        type=Path,
        metavar="DIR",
        help="instead: send the batches ended processes left in this spool folder (OTEL_VERL_SPOOL_DIR, "
        "default /var/tmp/otel-verl-spool-UID), removing each once accepted; a folder goes only to the "
        "OTLP/HTTP endpoint its process recorded (others are kept and named)",
    )
    parser.add_argument(
        "--ignore-recorded-endpoint",
        action="store_true",
        help="with --spool: send every spooled batch to the endpoint given, also those a process recorded for "
        "another endpoint (or an OTLP/gRPC one) and those with no record",
    )
    parser.add_argument(
        "--endpoint", help="OTLP/HTTP base URL, e.g. http://collector:4318 (default: OTEL_EXPORTER_OTLP_*ENDPOINT)"
    )
    parser.add_argument("--headers", help="k=v,k2=v2 (default: OTEL_EXPORTER_OTLP_*HEADERS)")
    parser.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        help="deadline of each request in seconds, its retries included (default 10)",
    )
    parser.add_argument(
        "--max-request-bytes",
        type=byte_count,
        default=None,
        help="split stored lines above this size into several requests (default 20 MiB, the Collector's default limit)",
    )
    parser.set_defaults(handler=run)


def run(ns: argparse.Namespace) -> int:
    from otel_verl.offline.replay import MAX_REQUEST_BYTES, replay

    if (ns.folder is None) == (ns.spool is None):
        raise CommandError("replay: give a run folder or --spool DIR (one of them)", USAGE)
    if ns.spool is not None:
        from otel_verl.offline.replay_spool import replay_spool

        return replay_spool(
            ns.spool, ns.endpoint, ns.headers, ns.timeout, ignore_recorded_endpoint=ns.ignore_recorded_endpoint
        )
    limit = ns.max_request_bytes or MAX_REQUEST_BYTES
    return replay(ns.folder, ns.endpoint, ns.headers, ns.timeout, max_request_bytes=limit)
