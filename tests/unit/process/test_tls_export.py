"""OTLP over TLS with auth headers, through the standard ``OTEL_EXPORTER_OTLP_*`` variables only:
an OTLP/gRPC receiver on 127.0.0.1 with a certificate from a self-signed CA."""

from __future__ import annotations

import datetime
import ipaddress
from concurrent import futures

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from otel_verl import config, semconv
from otel_verl.process.resource import Identity
from otel_verl.process.telemetry import build_own


def _cert(subject: str, issuer_key, issuer_name, key, *, ca: bool):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer_name or x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(obj) -> bytes:
    if hasattr(obj, "private_bytes"):
        return obj.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    return obj.public_bytes(serialization.Encoding.PEM)


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list = []
        self.auth: list[str] = []

    def Export(self, request, context):  # noqa: N802 - gRPC method name
        self.auth.append(dict(context.invocation_metadata()).get("authorization", ""))
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                self.spans.extend(ss.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def tls_receiver(tmp_path):
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("otel-verl test CA", ca_key, None, ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert("localhost", ca_key, ca.subject, key, ca=False)
    ca_path = tmp_path / "ca.pem"
    ca_path.write_bytes(_pem(ca))
    receiver = _Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(_pem(key), _pem(cert))]))
    server.start()
    yield port, ca_path, receiver
    server.stop(0)


@pytest.mark.parametrize("trusted", [True, False], ids=["ca-given", "ca-missing"])
def test_spans_reach_a_tls_receiver_with_auth_header(monkeypatch, tmp_path, tls_receiver, trusted):
    port, ca_path, receiver = tls_receiver
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "none")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"https://localhost:{port}")
    if trusted:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(ca_path))
    else:  # the system trust store does not know our CA: nothing may be sent in clear or accepted
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_CERTIFICATE", raising=False)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20s3cret")
    monkeypatch.setenv("OTEL_VERL_FILE_DIR", str(tmp_path))
    config.settings.cache_clear()
    tel = build_own(Identity(role=semconv.ROLE_TASKRUNNER))
    with tel.tracer.start_as_current_span("verl.step"):
        pass
    tel.flush(10 if trusted else 3)
    tel.shutdown(5 if trusted else 1)
    config.settings.cache_clear()
    if not trusted:
        assert receiver.spans == []
        return
    assert [s.name for s in receiver.spans] == ["verl.step"]
    assert receiver.auth and all(a == "Bearer s3cret" for a in receiver.auth)
