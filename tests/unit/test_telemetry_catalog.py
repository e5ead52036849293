"""``telemetry_catalog`` documents every name ``semconv`` defines: a new span, event or attribute
without its entry fails here (the reference page is written from the catalog)."""

from __future__ import annotations

import pytest

from otel_verl import semconv, telemetry_catalog
from otel_verl.instruments import catalog

SPANS = {d.name for d in telemetry_catalog.SPANS}
EVENTS = {d.name for d in telemetry_catalog.EVENTS}
ATTRIBUTES = {d.name for d in telemetry_catalog.ATTRIBUTES}


def _names(prefix: str) -> dict[str, str]:
    return {k: v for k, v in vars(semconv).items() if k.startswith(prefix) and isinstance(v, str)}


def _documented(value: str, documented: set[str]) -> bool:
    """A name, or a prefix (``verl.wg.``) that a documented pattern (``verl.wg.<method>``) starts with."""
    return value in documented or any(d.startswith(value) and "<" in d[len(value) :] for d in documented)


def _matches(value: str, documented: set[str]) -> bool:
    """``_documented``, or an instance of a pattern (``verl.gen`` of ``verl.<stage>``)."""
    return _documented(value, documented) or any(
        "<" in d and value.startswith(d[: d.index("<")]) and d.endswith(">") for d in documented
    )


@pytest.mark.parametrize(("const", "value"), sorted(_names("SPAN_").items()))
def test_every_span_name_is_documented(const, value):
    assert _matches(value, SPANS), f"semconv.{const} = {value!r} has no entry in telemetry_catalog.SPANS"


@pytest.mark.parametrize(("const", "value"), sorted(_names("EVENT_").items()))
def test_every_event_is_documented(const, value):
    assert value in EVENTS, f"semconv.{const} = {value!r} has no entry in telemetry_catalog.EVENTS"


ATTRIBUTE_PREFIXES = ("ATTR_", "RES_", "GEN_AI_")
# values of an attribute, not attributes
VALUES = {
    "GEN_AI_OPERATION_TEXT_COMPLETION",
    "GEN_AI_OPERATION_EXECUTE_TOOL",
    "GEN_AI_TOKEN_TYPE_INPUT",
    "GEN_AI_TOKEN_TYPE_OUTPUT",
}


@pytest.mark.parametrize(
    ("const", "value"),
    sorted((k, v) for p in ATTRIBUTE_PREFIXES for k, v in _names(p).items() if k not in VALUES),
)
def test_every_attribute_is_documented(const, value):
    assert _documented(value, ATTRIBUTES), f"semconv.{const} = {value!r} has no entry in telemetry_catalog.ATTRIBUTES"


def test_every_attribute_a_span_event_or_metric_names_is_documented():
    named = {a for d in (*telemetry_catalog.SPANS, *telemetry_catalog.EVENTS) for a in d.attributes}
    named |= {a for spec in (*catalog.ALL, *catalog.ENGINE) for a in spec.attributes}
    named |= set(telemetry_catalog.RESOURCE)
    assert named - ATTRIBUTES == set()
    assert len(ATTRIBUTES) == len(telemetry_catalog.ATTRIBUTES)  # one entry each


def test_every_entry_says_what_it_is():
    for d in (*telemetry_catalog.SPANS, *telemetry_catalog.EVENTS, *telemetry_catalog.ATTRIBUTES):
        assert d.doc.strip(), d.name
    for spec in (catalog.LOGGED_VALUE, *catalog.ALL, *catalog.ENGINE):
        assert telemetry_catalog.SOURCES[spec].strip(), spec.name
    assert set(telemetry_catalog.SOURCES) == {catalog.LOGGED_VALUE, *catalog.ALL, *catalog.ENGINE}  # no other entry
