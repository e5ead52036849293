"""``otel_verl.offline.report.charts``: the axis ticks, text formats and colours the SVG charts share."""

from __future__ import annotations

import pytest

from otel_verl.offline.report.charts import OTHER, STAGE_COLORS, duration, esc, nice_ticks, stage_colors


def test_nice_ticks():
    assert nice_ticks(0, 2.865) == [0, 1, 2, 3]
    assert nice_ticks(0, 10, 5) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(-0.3, 0.3, 4) == pytest.approx([-0.4, -0.2, 0, 0.2, 0.4])
    assert nice_ticks(1, 1) == [1]


def test_text_formats_and_stage_colors():
    assert (duration(0.0123), duration(2.5), duration(900)) == ("12.3 ms", "2.500 s", "15.0 min")
    assert esc('<a href="x">') == "&lt;a href=&quot;x&quot;&gt;"
    colors = stage_colors(["gen", "my_stage"])
    assert colors["gen"] == STAGE_COLORS["gen"] and colors["my_stage"] not in STAGE_COLORS.values()
    assert list(colors) == ["gen", "my_stage", OTHER]  # "other" (step time outside any stage) comes last
