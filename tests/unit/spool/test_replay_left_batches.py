"""``otel-verl replay --spool DIR``: what ended verl processes left in their spools, sent by hand."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from verl_cpu_harness.otlp_receiver import OtlpReceiver

from otel_verl import cli
from otel_verl.exits import CommandError
from otel_verl.offline.replay_spool import replay_spool
from otel_verl.spool import store as spool


def _spans(*ids: int) -> bytes:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for i in ids:
        span = scope.spans.add(name="verl.step", trace_id=bytes(15) + bytes([i]), span_id=bytes(7) + bytes([i]))
        span.start_time_unix_nano, span.end_time_unix_nano = 1, 2
    return request.SerializeToString()


def _logs(n: int) -> bytes:
    request = ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    for i in range(n):
        scope.log_records.add().body.string_value = f"record {i}"
    return request.SerializeToString()


def _left_by_a_dead_process(
    root: Path, batches: dict[str, list[bytes]], url: str | None, host: str = "node-a", kind: str = "http"
) -> Path:
    """The spool a process left (written, then handed back as at its end): its folder. Its exporters
    sent to ``url`` (``/v1/<signal>`` under it; None: it recorded no destination)."""
    s = spool.Spool(str(root), spool.MIB, host=host)
    for signal in batches:
        dest = None if url is None else spool.Destination(kind, f"{url}/v1/{signal}", b"[]")
        assert s.folder_name(signal, dest) == signal
    for signal, bodies in batches.items():
        for body in bodies:
            assert s.put(signal, signal, body)
    name = s.name
    s.close()
    return root / name


def _replay(root: Path, url: str, **kwargs) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = replay_spool(root, endpoint=url, env={}, out=out, err=err, timeout=5.0, **kwargs)
    return rc, out.getvalue(), err.getvalue()


def test_every_batch_goes_out_as_protobuf_oldest_first_and_is_removed(tmp_path):
    root = tmp_path / "spool"
    with OtlpReceiver() as rx:
        folder = _left_by_a_dead_process(root, {"traces": [_spans(1, 2), _spans(3)], "logs": [_logs(4)]}, rx.url)
        rc, out, _ = _replay(root, rx.url)
    assert rc == 0
    assert rx.span_ids() == ["0000000000000001", "0000000000000002", "0000000000000003"]
    assert sorted(p for p, _, _ in rx.requests) == ["/v1/logs", "/v1/traces", "/v1/traces"]
    assert all(h["content-type"] == "application/x-protobuf" for _, h, _ in rx.requests)
    assert "3 spans in 2 batches" in out and "4 log records in 1 batches" in out and "ok: 3 spooled batches" in out
    assert not folder.exists() and list(root.iterdir()) == []


def test_one_process_folder_can_be_named(tmp_path):
    root = tmp_path / "spool"
    with OtlpReceiver() as rx:
        one = _left_by_a_dead_process(root, {"traces": [_spans(1)]}, rx.url)
        other = _left_by_a_dead_process(root, {"traces": [_spans(2)]}, rx.url)
        rc, _, _ = _replay(one, rx.url)
    assert rc == 0 and rx.span_ids() == ["0000000000000001"]
    assert not one.exists() and other.exists()


def test_a_folder_a_running_process_holds_is_left_alone(tmp_path):
    root = tmp_path / "spool"
    with OtlpReceiver() as rx:
        live = spool.Spool(str(root), spool.MIB, host="node-a")
        live.folder_name("traces", spool.Destination("http", f"{rx.url}/v1/traces", b"[]"))
        assert live.put("traces", "traces", _spans(7))  # holds its lock while it lives
        dead = _left_by_a_dead_process(root, {"traces": [_spans(1)]}, rx.url)
        rc, out, err = _replay(root, rx.url)
    assert rc == 0 and rx.span_ids() == ["0000000000000001"]
    assert "1 folders in use by a running process (left alone)" in out and "in use by a running process" in err
    assert (root / live.name / "traces" / "0000000000000001.pb").exists() and not dead.exists()
    live.close()


def test_what_the_endpoint_does_not_take_stays_for_a_later_try(tmp_path):
    root = tmp_path / "spool"
    with OtlpReceiver(status=400) as rx:
        port = int(rx.url.rpartition(":")[2])
        folder = _left_by_a_dead_process(root, {"traces": [_spans(1), _spans(2)]}, rx.url)
        with pytest.raises(CommandError, match="2 batches not accepted"):
            _replay(root, rx.url)
    assert len(list((folder / "traces").glob("*.pb"))) == 2
    with OtlpReceiver(port=port) as rx:  # a later try with an endpoint that takes them
        assert _replay(root, rx.url)[0] == 0
    assert not folder.exists()


def test_a_dead_endpoint_costs_one_timeout_per_signal_and_keeps_everything(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = tmp_path / "spool"
    folder = _left_by_a_dead_process(root, {"traces": [_spans(i) for i in range(1, 6)]}, f"http://127.0.0.1:{port}")
    with pytest.raises(CommandError, match="5 batches not accepted"):
        _replay(root, f"http://127.0.0.1:{port}")
    assert len(list((folder / "traces").glob("*.pb"))) == 5


def test_partial_success_rejections_are_counted(tmp_path):
    root = tmp_path / "spool"
    with OtlpReceiver(answer={"partialSuccess": {"rejectedSpans": "1", "errorMessage": "no"}}) as rx:
        _left_by_a_dead_process(root, {"traces": [_spans(1, 2)]}, rx.url)
        with pytest.raises(CommandError, match="1 items rejected"):
            _replay(root, rx.url)


def test_files_that_are_no_request_are_named_and_kept(tmp_path):
    root = tmp_path / "spool"
    with OtlpReceiver() as rx:
        folder = _left_by_a_dead_process(root, {"traces": [_spans(1)]}, rx.url)
        (folder / "traces" / "0000000000000009.pb").write_bytes(b"\xff\xff not protobuf")
        secret = tmp_path / "secret"
        secret.write_bytes(_spans(5))
        (folder / "traces" / "0000000000000008.pb").symlink_to(secret)
        with pytest.raises(CommandError, match="2 files unreadable"):
            _replay(root, rx.url)
    assert rx.span_ids() == ["0000000000000001"]  # the link's target was never read
    assert (folder / "traces" / "0000000000000009.pb").exists()


def test_a_symlinked_spool_folder_is_not_read(tmp_path):
    real = tmp_path / "real"
    _left_by_a_dead_process(real, {"traces": [_spans(1)]}, "http://127.0.0.1:9")
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(CommandError, match="not a spool folder"):
        _replay(tmp_path / "link", "http://127.0.0.1:9")


def test_the_cli_takes_a_run_folder_or_a_spool_not_both(tmp_path, capsys):
    assert cli.main(["replay"]) == 2
    assert cli.main(["replay", str(tmp_path), "--spool", str(tmp_path)]) == 2
    assert "one of them" in capsys.readouterr().err
    root = tmp_path / "spool"
    with OtlpReceiver() as rx:
        _left_by_a_dead_process(root, {"traces": [_spans(1)]}, rx.url)
        assert cli.main(["replay", "--spool", str(root), "--endpoint", rx.url]) == 0
    assert rx.span_ids() == ["0000000000000001"]


def test_a_folder_goes_only_to_its_recorded_endpoint_unless_the_user_says_otherwise(tmp_path, capsys):
    """A folder recorded for another endpoint (another job's), for an OTLP/gRPC one, or with no record
    is kept and named; ``--ignore-recorded-endpoint`` sends them all to the endpoint given."""
    root = tmp_path / "spool"
    with OtlpReceiver() as rx:
        mine = _left_by_a_dead_process(root, {"traces": [_spans(1)]}, rx.url)
        theirs = _left_by_a_dead_process(root, {"traces": [_spans(2)]}, "https://their-collector:4318")
        grpc = _left_by_a_dead_process(root, {"traces": [_spans(3)]}, "http://127.0.0.1:4317", kind="grpc")
        unknown = _left_by_a_dead_process(root, {"logs": [_logs(1)]}, None)
        with pytest.raises(CommandError, match="3 spool folders kept for another endpoint"):
            _replay(root, rx.url)
        assert rx.span_ids() == ["0000000000000001"] and not mine.exists()
        assert not [p for p, _, _ in rx.requests if p == "/v1/logs"]
        for kept in (theirs, grpc, unknown):
            assert list(kept.glob("*/*.pb")), kept
        out = capsys.readouterr()
        assert cli.main(["replay", "--spool", str(root), "--endpoint", rx.url]) == 1
        said = capsys.readouterr().out
        assert "recorded for https://their-collector:4318/v1/traces (http)" in said and "(grpc)" in said, said
        assert "no recorded endpoint" in said and "--ignore-recorded-endpoint" in said, said
        assert cli.main(["replay", "--spool", str(root), "--endpoint", rx.url, "--ignore-recorded-endpoint"]) == 0
        assert sorted(rx.span_ids()) == ["0000000000000001", "0000000000000002", "0000000000000003"]
    assert list(root.iterdir()) == [], out
