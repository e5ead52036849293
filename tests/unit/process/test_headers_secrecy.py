"""The token of ``OTEL_VERL_OTLP_HEADERS_FILE`` (or of ``OTEL_EXPORTER_OTLP_HEADERS``) never reaches a
log line, whatever the shape of the file: a process builds its OTLP exporters (HTTP and gRPC) from
each file below with every logger at DEBUG, and nothing it logs holds the token.

The shapes a user writes are read (``process.otlp_headers``): the token alone (what ``otel-verl
stack --token-file`` and the Collector's ``bearertokenauth`` take), ``Authorization: Bearer ...``,
``Authorization=Bearer ...``, the SDK's ``authorization=Bearer%20...``, JSON; CRLF line ends, a
symlink and another user's file too. The others are refused with a warning that names the file
and the shape, never the content."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

TOKEN = "s3cr3t-T0ken-9f8e7d"
BEARER = {"authorization": f"Bearer {TOKEN}"}

# For each case: point the setting at its file, build the OTLP exporters, print their headers.
CHILD = textwrap.dedent(
    """
    import json, logging, os, sys
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http
    from otel_verl import _safe, config
    from otel_verl.process import exporters, otlp_headers
    from otel_verl.process.resource import Identity

    PROTOCOL = {"content-type", "user-agent", "content-encoding"}  # the HTTP exporter's own
    out = {}
    for name, path, env_headers in json.loads(sys.argv[1]):
        for var, value in (("OTEL_VERL_OTLP_HEADERS_FILE", path), ("OTEL_EXPORTER_OTLP_HEADERS", env_headers)):
            os.environ.pop(var, None) if value is None else os.environ.__setitem__(var, value)
        config.settings.cache_clear()
        otlp_headers.file_headers.cache_clear()
        _safe._seen.clear()
        print("CASE", name, file=sys.stderr, flush=True)
        seen = []
        for cls, kind in ((Http, "otlp_proto_http"), (Grpc, "otlp_proto_grpc")):
            exporter = exporters.make_exporter(kind, cls, "traces", Identity())
            inner = getattr(exporter, "inner", exporter)  # behind the spool (spool_export)
            sent = inner._headers if hasattr(inner, "_headers") else inner._client._headers  # gRPC, HTTP
            seen.append({k.lower(): v for k, v in dict(sent or {}).items() if k.lower() not in PROTOCOL})
            exporter.shutdown()
        out[name] = seen
    print(json.dumps(out))
    """
)


def _file(path, text: str | bytes, mode: int = 0o600) -> str:
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    path.chmod(mode)
    return str(path)


def test_no_shape_of_headers_file_puts_the_token_in_a_log_line(tmp_path):
    bare = _file(tmp_path / "token", TOKEN + "\n")
    link = tmp_path / "link"
    link.symlink_to(bare)
    cases = {  # name: (file, OTEL_EXPORTER_OTLP_HEADERS, the headers the exporters send)
        "bare token": (bare, None, BEARER),
        "bare token, CRLF, no final newline": (_file(tmp_path / "crlf", f"# ours\r\n{TOKEN}"), None, BEARER),
        "bare base64 token": (_file(tmp_path / "b64", TOKEN + "==\n"), None, {"authorization": f"Bearer {TOKEN}=="}),
        "symlink to a bare token": (str(link), None, BEARER),
        "Bearer x alone": (_file(tmp_path / "value", f"Bearer {TOKEN}\n"), None, BEARER),
        "Authorization: Bearer": (_file(tmp_path / "colon", f"Authorization: Bearer {TOKEN}\r\n"), None, BEARER),
        "Authorization=Bearer x": (_file(tmp_path / "eq", f"Authorization=Bearer {TOKEN}\n"), None, BEARER),
        "SDK shape": (
            _file(tmp_path / "sdk", f"authorization=Bearer%20{TOKEN},x-tenant=rl\n"),
            "x-team=a",
            {**BEARER, "x-tenant": "rl", "x-team": "a"},
        ),
        "JSON": (_file(tmp_path / "json", json.dumps({"Authorization": f"Bearer {TOKEN}"})), None, BEARER),
        # refused: one warning naming the file and why, no headers from it
        "empty": (_file(tmp_path / "empty", ""), None, {}),
        "two lone words": (_file(tmp_path / "two", f"{TOKEN}\n{TOKEN}x\n"), None, {}),
        "broken JSON": (_file(tmp_path / "badjson", '{"authorization": "Bearer ' + TOKEN), None, {}),
        "JSON list": (_file(tmp_path / "jsonlist", json.dumps([TOKEN])), None, {}),
        "huge": (_file(tmp_path / "huge", f"{TOKEN}\n" * 10_000), None, {}),
        "not UTF-8": (_file(tmp_path / "latin1", TOKEN.encode() + b"\xff\n"), None, {}),
        "readable by all": (_file(tmp_path / "all", TOKEN, mode=0o644), None, BEARER),
        # a malformed OTEL_EXPORTER_OTLP_HEADERS: the SDK's warning quotes it, with the file set or not
        "bad environment, file set": (bare, f"Authorization: Bearer {TOKEN}x", BEARER),
        "bad environment, no file": (None, f"Authorization: Bearer {TOKEN}", {}),
    }
    if os.geteuid() == 0:  # root reads another user's file (as a Kubernetes secret's root-owned mount)
        other = _file(tmp_path / "other", TOKEN)
        os.chown(other, 65534, 65534)
        cases["another user's file"] = (other, None, BEARER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_VERL_SPOOL": "off", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    arg = json.dumps([[name, path, headers] for name, (path, headers, _) in cases.items()])
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, arg], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sent = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, (_, _, expected) in cases.items():
        assert sent[name] == [expected, expected], name  # HTTP and gRPC alike
    log = proc.stderr
    assert TOKEN not in log, [line for line in log.splitlines() if TOKEN in line]
    by_case = dict(part.split("\n", 1) for part in log.split("CASE ")[1:])
    for name in ("empty", "two lone words", "broken JSON", "JSON list", "huge", "not UTF-8"):
        assert f"OTEL_VERL_OTLP_HEADERS_FILE={cases[name][0]} " in by_case[name], (name, by_case[name])
    assert "line 1 is neither" in by_case["two lone words"]
    assert "holds no header" in by_case["empty"]
    assert "chmod 600" in by_case["readable by all"]
    assert "Header format invalid" in by_case["bad environment, no file"]  # the SDK's warning, its value hidden
    assert "OTEL_EXPORTER_OTLP_HEADERS has 1 entries" in by_case["bad environment, file set"]


def test_the_exporters_own_log_lines_name_no_credentials_of_the_endpoint(caplog):
    """The SDK's gRPC exporter names its endpoint in every failure line, ``user:pass@`` included;
    otel-verl's filter on the exporters' loggers (``sdk_log_throttle``) strips it."""
    import logging
    import socket

    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from otel_verl.process import sdk_log_throttle

    with socket.socket() as s:  # a port nothing listens on: the export fails at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exporter = OTLPSpanExporter(endpoint=f"http://user:{TOKEN}@127.0.0.1:{port}", insecure=True, timeout=1)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The line must reach the filter whatever ran before in this process: the SDK's DuplicateFilter
    # drops a template logged in the same 20 s by an earlier test, a throttle left attached one of
    # the same kind in the last 5 minutes.
    grpc_logger = logging.getLogger("opentelemetry.exporter.otlp.proto.grpc.exporter")
    duplicates = [f for f in grpc_logger.filters if type(f).__name__ == "DuplicateFilter"]
    for f in duplicates:
        grpc_logger.removeFilter(f)
    sdk_log_throttle.detach()
    sdk_log_throttle.attach()
    try:
        with caplog.at_level(logging.DEBUG):
            provider.get_tracer("t").start_span("s").end()
    finally:
        provider.shutdown()
        sdk_log_throttle.detach()
        for f in duplicates:
            grpc_logger.addFilter(f)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
    assert any(f"127.0.0.1:{port}" in line for line in lines), lines  # it did say where it failed
    assert not [line for line in lines if TOKEN in line]
