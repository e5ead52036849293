"""``otel_verl.endpoints``: the OTLP endpoint rule replay and doctor share."""

from __future__ import annotations

import pytest

from otel_verl.endpoints import (
    GRPC_DEFAULT,
    HTTP_DEFAULT,
    is_http,
    protocol_problem,
    resolve,
    shown,
    signal_endpoint,
    signal_protocol,
    signal_variable,
    url_problem,
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


@pytest.mark.parametrize(
    ("url", "protocol", "problem"),
    [
        ("http://collector:4318", "http/protobuf", None),
        ("https://collector/otlp", "http/json", None),
        ("collector:4317", "grpc", None),  # the gRPC exporter takes host:port
        ("collector:4318", "http/protobuf", "OTLP/HTTP needs http:// or https://"),
        ("not a url", "grpc", "it contains a space"),
        ("", "grpc", "it is empty"),
        ("ftp://collector", "grpc", "the scheme is 'ftp', not http or https"),
        ("http://", "http/protobuf", "it has no host"),
        ("http://collector:99999", "grpc", "its port is not a number from 0 to 65535"),
        ("http://[::1", "grpc", "Invalid IPv6 URL"),
    ],
)
def test_url_problem(url, protocol, problem):
    assert url_problem(url, protocol) == problem


def test_resolve_names_where_the_endpoint_came_from():
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://logs:1/x"}
    traces = resolve("traces", env)
    assert (traces.source, traces.raw, traces.url) == (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "not a url",
        "not a url/v1/traces",
    )
    assert (
        traces.problem("http/protobuf")
        == "OTEL_EXPORTER_OTLP_ENDPOINT='not a url' is not a valid URL (it contains a space)"
    )
    assert (
        resolve("logs", env).source == "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
        and resolve("logs", env).problem("grpc") is None
    )
    assert resolve("traces", env, base="http://flag:4318").source == "--endpoint"
    assert resolve("metrics", {}, protocol="grpc").source == "default"
    secret = resolve("traces", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://me:pw@c:123456"})
    assert "pw" not in secret.problem("http/protobuf") and "[REDACTED]@c:123456" in secret.problem("http/protobuf")


def test_protocol_problem_and_shown():
    assert (
        protocol_problem("traces", {}) is None
        and protocol_problem("traces", {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) is None
    )
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "thrift"}
    assert protocol_problem("metrics", env) == (
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL='thrift' is not one of grpc, http/protobuf, http/json"
    )
    assert shown("http://a:b@h:1/p?token=x") == "http://[REDACTED]@h:1/p?[REDACTED]" and shown("h:4317") == "h:4317"
