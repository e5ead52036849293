"""``otel_verl.offline.report.page``: the rendered page is self-contained, escaped and shows the values."""

from __future__ import annotations

import json
import re

from offline_otlp_json import gauge, span, write_metrics, write_spans

from otel_verl import semconv
from otel_verl.offline.report import build, render
from otel_verl.offline.report.page import asset


def test_rendered_page_is_self_contained_and_shows_the_values(v1_run):
    rep = build(v1_run)
    page = render(rep)
    # nothing fetched from anywhere: no src/href to other documents, no CSS imports or urls
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", page)
    assert "@import" not in page and "url(" not in page and "<link" not in page
    assert re.findall(r"https?://[^\s\"'<]+", page) == ["http://www.w3.org/2000/svg"]  # the SVG namespace in JS
    assert page.count('<tr data-step="') == 2 + 2  # stage table + curve table
    assert 'data-stage="gen" data-seconds="1.0"' in page and ">1.000<" in page
    assert '<section class="timeline shown" data-step="2">' in page
    assert '<section class="timeline" data-step="1">' in page
    sid = rep.steps[1].slowest.span_id
    assert f'class="row kind-traj slowest linked" data-span-id="{sid}"' in page
    assert f'<code class="span-id">{sid}</code> <b class="seconds">1.400 s</b>' in page
    assert 'data-step="2" data-value="0.75"' in page
    json_blob = re.search(r'<script type="application/json" id="gauge-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(json_blob)["verl.training.reward{verl.reward.source=score}"] == {"1": 0.25, "2": 0.75}


def test_names_from_the_files_are_escaped(tmp_path):
    _, root = span(semconv.SPAN_STEP, "a" * 16, 0, 1, verl__step=1)
    _, stage = span("verl.<img>", "a" * 16, 0, 0.5, root["spanId"], verl__stage="<script>alert(1)</script>")
    write_spans(tmp_path, "taskrunner", 1, [root, stage])
    write_metrics(tmp_path, "taskrunner", 1, 2, [gauge(semconv.M_TRAINING_STEP, 1), gauge("verl.x</script>", 1.0)])
    page = render(build(tmp_path))
    assert "<script>alert" not in page and "<img>" not in page and '</script>"' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("</script>") == 2  # the JSON blob and the code, nothing from the data


def test_stylesheet_and_script_come_from_the_package_assets(v1_run):
    page = render(build(v1_run))
    css, js = asset("report.css"), asset("report.js")
    assert "table.num" in css and "getElementById('step-pick')" in js
    assert f"<style>{css}</style>" in page and f"<script>{js}</script>" in page
