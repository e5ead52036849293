"""``otel-verl``: command-line tools around a run's telemetry.

Argument parsing only; each command is a module of ``otel_verl.offline``:

``otel-verl summary DIR`` prints what a run wrote with the ``otlp_json_file`` exporters;
``otel-verl report DIR [-o OUT.html]`` renders the same files as one self-contained HTML page;
``otel-verl replay DIR --endpoint URL`` sends them to an OTLP/HTTP endpoint;
``otel-verl doctor`` checks what the instrumentation would do here (exit code 1 on a problem).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="otel-verl", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_sum = sub.add_parser("summary", help="summarise a run's OTLP JSON files")
    p_sum.add_argument("folder", type=Path)
    p_rep = sub.add_parser("report", help="render a run's OTLP JSON files as one self-contained HTML page")
    p_rep.add_argument("folder", type=Path)
    p_rep.add_argument("-o", "--output", type=Path, help="HTML file to write (default: FOLDER/report.html)")
    p_play = sub.add_parser("replay", help="send a run's OTLP JSON files to an OTLP/HTTP endpoint")
    p_play.add_argument("folder", type=Path)
    p_play.add_argument(
        "--endpoint", help="OTLP/HTTP base URL, e.g. http://collector:4318 (default: OTEL_EXPORTER_OTLP_*ENDPOINT)"
    )
    p_play.add_argument("--headers", help="k=v,k2=v2 (default: OTEL_EXPORTER_OTLP_*HEADERS)")
    p_play.add_argument("--timeout", type=float, default=10.0, help="seconds per request (default 10)")
    sub.add_parser("doctor", help="check what the instrumentation would do in this environment")
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    # Each command imports only its own module: `otel-verl summary` needs no HTML, doctor no file reader.
    if ns.cmd == "summary":
        from otel_verl.offline.summary import summary

        return summary(ns.folder)
    if ns.cmd == "report":
        from otel_verl.offline.report import report

        return report(ns.folder, ns.output)
    if ns.cmd == "replay":
        from otel_verl.offline.replay import replay

        return replay(ns.folder, endpoint=ns.endpoint, headers=ns.headers, timeout=ns.timeout)
    if ns.cmd == "doctor":
        from otel_verl.offline.doctor import doctor

        return doctor()
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
