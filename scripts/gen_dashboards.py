"""Write the ops kit's Grafana dashboards from their code (``scripts/dashboards/``, grafana-foundation-sdk).

    python scripts/gen_dashboards.py            # (re)write collector/grafana/dashboards/*.json
    python scripts/gen_dashboards.py --check    # exit 1, naming them, when a committed file is not what the code makes

Each dashboard is built with Grafana's own types and builders (grafana-foundation-sdk, a test
dependency: ``pip install -e '.[test]'``), so a field can only be one the schema has, and written
as Grafana's "Export for sharing externally" does: data-source variables, ``__inputs`` and
``__requires`` (scripts/dashboards/kit.py). Keys are sorted, so a change to the code shows in the
JSON's diff as that change alone. Edit the code, never the JSON: ``tests/ops/test_grafana.py``
runs the check, and every query it makes runs against real Prometheus in ``tests/ops``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "collector" / "grafana" / "dashboards"
if str(Path(__file__).resolve().parent) not in sys.path:  # scripts/dashboards, also when a test loads this
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from dashboards import DASHBOARDS, kit  # noqa: E402
from grafana_foundation_sdk.cog.encoder import JSONEncoder  # noqa: E402


def dashboard_json(build) -> dict:
    """The JSON object of the dashboard ``build()`` makes, ready to import (``__inputs``)."""
    return kit.exported(json.loads(json.dumps(build().build(), cls=JSONEncoder)))


def render() -> dict[str, str]:
    """file name -> the text of each dashboard."""
    return {
        name: json.dumps(dashboard_json(build), indent=2, ensure_ascii=False, sort_keys=True) + "\n"
        for name, build in DASHBOARDS.items()
    }


def stale(folder: Path = OUT) -> list[str]:
    """The dashboards in ``folder`` that differ from what the code makes (or are missing or extra)."""
    texts = render()
    present = {p.name for p in folder.glob("*.json")}
    old = [n for n, t in texts.items() if not (folder / n).is_file() or (folder / n).read_text(encoding="utf-8") != t]
    return sorted(old + [n for n in present - texts.keys()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed dashboard is out of date")
    args = parser.parse_args(argv)
    if args.check:
        old = stale()
        if old:
            print(
                f"not what scripts/dashboards makes: {', '.join(old)}; run: python scripts/gen_dashboards.py",
                file=sys.stderr,
            )
            return 1
        return 0
    for name, text in render().items():
        path = OUT / name
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
