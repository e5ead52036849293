"""``otel_verl.offline.endpoints``: the OTLP endpoint rule replay and doctor share."""

from __future__ import annotations

from otel_verl.offline.endpoints import (
    GRPC_DEFAULT,
    HTTP_DEFAULT,
    is_http,
    signal_endpoint,
    signal_protocol,
    signal_variable,
)


def test_defaults_per_protocol():
    assert HTTP_DEFAULT == "http://localhost:4318" and GRPC_DEFAULT == "http://localhost:4317"
    assert signal_endpoint("traces", {}) == "http://localhost:4318/v1/traces"
    assert signal_endpoint("logs", {}, protocol="http/json") == "http://localhost:4318/v1/logs"
    assert signal_endpoint("metrics", {}, protocol="grpc") == "http://localhost:4317"


def test_base_endpoint_gets_the_signal_path_over_http_only():
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": " http://collector:4318/ "}
    assert signal_endpoint("metrics", env) == "http://collector:4318/v1/metrics"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317/"}
    assert signal_endpoint("metrics", env, protocol="grpc") == "http://collector:4317/"


def test_per_signal_endpoint_is_used_as_is():
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://tempo:4318/custom/traces",
    }
    assert signal_endpoint("traces", env) == "http://tempo:4318/custom/traces"
    assert signal_endpoint("traces", env, protocol="grpc") == "http://tempo:4318/custom/traces"
    assert signal_endpoint("metrics", env) == "http://base:4318/v1/metrics"
    assert signal_endpoint("traces", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "  "}) == HTTP_DEFAULT + "/v1/traces"


def test_an_explicit_base_replaces_the_environment():
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://ignored:1", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored:2"}
    assert signal_endpoint("traces", env, base="http://flag:4318/") == "http://flag:4318/v1/traces"
    assert signal_endpoint("traces", env, base="") == "http://ignored:1"  # an empty flag is no flag


def test_protocol_per_signal_then_general_then_grpc():
    assert signal_protocol("traces", {}) == "grpc"
    assert signal_protocol("traces", {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}) == "http/protobuf"
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"}
    assert (signal_protocol("metrics", env), signal_protocol("traces", env)) == ("grpc", "http/protobuf")
    assert is_http("http/json") and is_http("http/protobuf") and not is_http("grpc")
    assert signal_variable("HEADERS", "logs") == "OTEL_EXPORTER_OTLP_LOGS_HEADERS"
