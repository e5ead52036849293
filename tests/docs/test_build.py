"""The documentation site builds in strict mode: a broken link, a missing anchor, a page left out
of the navigation or a missing included file fails (``mkdocs.yml``'s ``validation``, snippets'
``check_paths``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.components import require_module

REPO = Path(__file__).resolve().parents[2]
HOW = "`bash scripts/setup.sh` installs it (the test extra: mkdocs, mkdocs-material)"


def _build(config: Path, site: Path, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_the_site_builds_strictly(tmp_path):
    require_module("mkdocs", HOW)
    require_module("material", HOW)
    built = _build(REPO / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert "WARNING" not in built.stderr, built.stderr[-3000:]
    for page in ("index.html", "configuration/index.html", "reference/index.html", "benchmarks/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    reference = (tmp_path / "site" / "reference" / "index.html").read_text(encoding="utf-8")
    assert "verl_stage_duration_seconds_bucket" in reference  # the generated tables are in the page


def test_a_broken_link_fails_the_build(tmp_path):
    """The check above can fail: the same site with one link to a page that does not exist."""
    require_module("mkdocs", HOW)
    require_module("material", HOW)
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(REPO / "docs"), str(docs)], check=True)
    subprocess.run(["cp", "-r", str(REPO / "bench"), str(tmp_path / "bench")], check=True)
    (tmp_path / "mkdocs.yml").write_text((REPO / "mkdocs.yml").read_text(encoding="utf-8"), encoding="utf-8")
    page = docs / "guard.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n[gone](no-such-page.md)\n", encoding="utf-8")
    built = _build(tmp_path / "mkdocs.yml", tmp_path / "site", cwd=tmp_path)
    assert built.returncode != 0
    assert "no-such-page.md" in built.stderr
