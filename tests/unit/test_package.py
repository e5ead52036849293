"""``otel_verl.package``: the declared verl range is the one the tests run, said the same everywhere."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from otel_verl.package import _instruments

REPO = Path(__file__).resolve().parents[2]


def test_the_range_is_the_same_in_package_pyproject_and_readme():
    tomllib = pytest.importorskip("tomllib")
    declared = Requirement(_instruments[0])
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["instruments"]
    assert [str(Requirement(r).specifier) for r in extra] == [str(declared.specifier)]
    readme = (REPO / "README.md").read_text()
    assert f"Supported range: `{_instruments[0]}`" in readme


def test_the_lower_bound_is_the_verl_the_tests_install():
    declared = Requirement(_instruments[0])
    setup = (REPO / "scripts" / "setup.sh").read_text()
    tested = re.search(r"verl\[verl-core\]==([\d.]+)", setup).group(1)
    assert f">={tested}" in str(declared.specifier)  # nothing below what runs end to end
    assert declared.specifier.contains(version("verl"))
