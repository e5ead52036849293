"""``telemetry_catalog`` is the one declaration of every span, event and attribute name: ``semconv``'s
constants are generated from it (``tests/docs/test_docs_generated.py`` checks the block), so what is
left to hold here is what generation cannot: no name written by hand in ``semconv`` besides, every
name the code uses declared, each declaration whole and its name declared once."""

from __future__ import annotations

import ast
from pathlib import Path

from otel_verl import semconv, telemetry_catalog
from otel_verl.instruments import catalog

REPO = Path(__file__).resolve().parents[2]
# values of an attribute, spelled like names (``GEN_AI_*``), written by hand on purpose
VALUES = {
    "GEN_AI_OPERATION_TEXT_COMPLETION",
    "GEN_AI_OPERATION_EXECUTE_TOOL",
    "GEN_AI_TOKEN_TYPE_INPUT",
    "GEN_AI_TOKEN_TYPE_OUTPUT",
}
NAME_PREFIXES = ("ATTR_", "RES_", "SPAN_", "EVENT_", "GEN_AI_")


def test_no_span_event_or_attribute_name_is_written_by_hand_in_semconv():
    """A name constant spelled as a literal outside the generated block would be a second declaration,
    without its type, its place or its text."""
    text = (REPO / "otel_verl" / "semconv.py").read_text(encoding="utf-8")
    begin = text.index("# BEGIN generated span, event and attribute names\n")
    end = text.index("# END generated span, event and attribute names\n")
    first, last = text[:begin].count("\n") + 1, text[:end].count("\n") + 1
    by_hand = [
        node.targets[0].id
        for node in ast.parse(text).body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id.startswith(NAME_PREFIXES)
        and node.targets[0].id not in VALUES
        and isinstance(node.value, ast.Constant)
        and not first < node.lineno < last
    ]
    assert by_hand == [], f"declare them in telemetry_catalog, then run scripts/gen_docs.py: {by_hand}"


def _semconv_names_used(path: Path) -> set[str]:
    """The ``semconv`` names a module uses: ``semconv.X`` (through any alias) and ``from ... semconv import X``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("otel_verl", None):
            aliases |= {a.asname or a.name for a in node.names if a.name == "semconv"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("semconv"):
            used |= {a.name for a in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            used.add(node.attr)
    return used


def test_every_semconv_name_the_code_uses_is_declared():
    """A declaration removed while code still uses its constant would fail only when that code runs,
    inside a hook that swallows the error: the telemetry would silently go."""
    files = [*(REPO / "otel_verl").rglob("*.py"), *(REPO / "scripts").glob("*.py"), *(REPO / "bench").rglob("*.py")]
    missing = {f"{p.relative_to(REPO)}: {n}" for p in files for n in _semconv_names_used(p) if not hasattr(semconv, n)}
    assert len(files) > 50 and missing == set()


def test_every_attribute_a_span_event_or_metric_carries_is_declared():
    declared = set(telemetry_catalog.ATTRIBUTES)
    carried = {a for d in (*telemetry_catalog.SPANS, *telemetry_catalog.EVENTS) for a in d.attributes}
    assert carried - declared == set()  # an Attribute made inline in a span has no constant
    on_metrics = {a for spec in (*catalog.ALL, *catalog.ENGINE) for a in spec.attributes}
    assert on_metrics - {a.name for a in declared} == set()


def test_each_name_is_declared_once():
    for declared in (telemetry_catalog.ATTRIBUTES, telemetry_catalog.SPANS, telemetry_catalog.EVENTS):
        names = [d.name for d in declared]
        assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_every_entry_says_what_it_is():
    for d in (*telemetry_catalog.SPANS, *telemetry_catalog.EVENTS, *telemetry_catalog.ATTRIBUTES):
        assert d.doc.strip(), d.name
    for spec in (catalog.LOGGED_VALUE, *catalog.ALL, *catalog.ENGINE):
        assert telemetry_catalog.SOURCES[spec].strip(), spec.name
    assert set(telemetry_catalog.SOURCES) == {catalog.LOGGED_VALUE, *catalog.ALL, *catalog.ENGINE}  # no other entry
