"""The generated parts of the documentation (``docs/generated/``) are what the code says now:
``scripts/gen_docs.py`` writes them from ``otel_verl.config``, ``telemetry_catalog``,
``instruments.catalog``/``prometheus`` and the guard's built-in rules, so a setting, span,
attribute, metric or rule cannot be documented otherwise than it is."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from otel_verl import config
from otel_verl.instruments import catalog
from otel_verl.instruments.prometheus import prometheus_name

REPO = Path(__file__).resolve().parents[2]


def _gen():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_files_are_up_to_date():
    gen = _gen()
    assert gen.stale() == [], "run: .venv/bin/python scripts/gen_docs.py"


def test_check_mode_fails_on_a_stale_file(tmp_path):
    gen = _gen()
    for name, text in gen.render().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert gen.stale(tmp_path) == []
    (tmp_path / "settings.md").write_text("old\n", encoding="utf-8")
    assert gen.stale(tmp_path) == ["settings.md"]
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_docs.py"), "--check"], capture_output=True)
    assert done.returncode == 0, done.stderr  # the committed ones


def test_semconvs_metric_names_are_generated_from_the_catalog(tmp_path, monkeypatch):
    """Each ``semconv.M_*`` constant is its instrument's name in ``instruments.catalog`` (the one
    declaration), and a constant missing, added or changed by hand is out of date."""
    from otel_verl import semconv

    specs = {k: v for k, v in vars(catalog).items() if isinstance(v, catalog.InstrumentSpec)}
    names = {k: v for k, v in vars(semconv).items() if k.startswith("M_")}
    assert names == {f"M_{k}": s.name for k, s in specs.items() if s is not catalog.LOGGED_VALUE}
    gen = _gen()
    copy = tmp_path / "otel_verl" / "semconv.py"
    copy.parent.mkdir()
    text = (REPO / "otel_verl" / "semconv.py").read_text(encoding="utf-8")
    monkeypatch.setattr(gen, "REPO", tmp_path)
    for stale in ("", text.replace('M_KL = "verl.training.kl"\n', ""), text.replace('"verl.training.kl"', '"kl"')):
        copy.write_text(stale or text, encoding="utf-8")
        assert gen.stale_blocks() == ([] if not stale else ["otel_verl/semconv.py"])


def test_semconvs_span_event_and_attribute_names_are_generated_from_the_telemetry_catalog(tmp_path, monkeypatch):
    """Each span, event and attribute constant of ``semconv`` is its declaration's name in
    ``telemetry_catalog`` (a pattern's: its part before ``<``), every declaration has one, and a
    constant missing or changed by hand is out of date."""
    from otel_verl import semconv, telemetry_catalog

    declared = {
        k: v.name.partition("<")[0]
        for k, v in vars(telemetry_catalog).items()
        if not k.startswith("_")
        and isinstance(v, (telemetry_catalog.Attribute, telemetry_catalog.Span, telemetry_catalog.Event))
    }
    assert (
        len(declared)
        == len(telemetry_catalog.ATTRIBUTES) + len(telemetry_catalog.SPANS) + len(telemetry_catalog.EVENTS) - 1
    )  # the LLM call's span: its name is made by semconv.llm_call_span_name
    assert {k: getattr(semconv, k, None) for k in declared} == declared
    assert semconv.ATTR_TIME_PREFIX == "verl.time." and semconv.SPAN_STAGE_PREFIX == "verl."
    gen = _gen()
    copy = tmp_path / "otel_verl" / "semconv.py"
    copy.parent.mkdir()
    text = (REPO / "otel_verl" / "semconv.py").read_text(encoding="utf-8")
    monkeypatch.setattr(gen, "REPO", tmp_path)
    for stale in (text.replace('ATTR_EPOCH = "verl.epoch"\n', ""), text.replace('"verl.epoch"', '"epoch"')):
        copy.write_text(stale, encoding="utf-8")
        assert gen.stale_blocks() == ["otel_verl/semconv.py"]


def test_a_pattern_is_declared_as_a_prefix_and_only_a_pattern(monkeypatch):
    """The constant of ``verl.time.<category>`` is ``ATTR_TIME_PREFIX = "verl.time."``: a pattern
    under another kind of constant name, or a ``*_PREFIX`` without a pattern, cannot be generated."""
    from otel_verl import telemetry_catalog as t

    gen = _gen()
    for const, name in (("ATTR_ODD", "verl.odd.<x>"), ("ATTR_ODD_PREFIX", "verl.odd."), ("ATTR_ODD_PREFIX", "a.<b")):
        monkeypatch.setattr(t, const, t.Attribute(name, "int", "x"), raising=False)
        with pytest.raises(ValueError, match=const):
            gen.span_event_attribute_names()
        monkeypatch.delattr(t, const)


def _rows(text: str, name: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith(f"| `{name}` |")]
    return [[c.strip() for c in row.strip("|").split(" | ")] for row in rows]


@pytest.mark.parametrize("spec", catalog.ALL, ids=lambda s: s.name)
def test_every_instrument_has_one_row_with_its_kind_unit_and_prometheus_name(spec):
    rows = _rows(_gen().render()["metrics.md"], spec.name)
    assert len(rows) == 1, f"{spec.name}: {len(rows)} rows"
    cells = rows[0]
    assert cells[1].split()[0] == spec.kind.removeprefix("observable_")
    assert cells[2].strip("`") == spec.unit
    assert f"`{prometheus_name(spec)}" in cells[4]
    assert cells[5], f"{spec.name} has no source"


@pytest.mark.parametrize("var", config.VARIABLES, ids=lambda v: v.name)
def test_every_setting_has_one_row_with_its_default(var):
    rows = _rows(_gen().render()["settings.md"], var.name)
    assert len(rows) == 1 and var.default_text() in rows[0][1] and rows[0][2] == var.doc.replace("|", "\\|")
