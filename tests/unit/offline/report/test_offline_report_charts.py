"""``otel_verl.offline.report.charts``: the axis ticks, text formats and colours the SVG charts share."""

from __future__ import annotations

import math
import sys

import pytest

from otel_verl.offline.run.charts import OTHER, STAGE_COLORS, duration, esc, nice_ticks, stage_colors


def test_nice_ticks():
    assert nice_ticks(0, 2.865) == [0, 1, 2, 3]
    assert nice_ticks(0, 10, 5) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(-0.3, 0.3, 4) == pytest.approx([-0.4, -0.2, 0, 0.2, 0.4])
    assert nice_ticks(1, 1) == [1]


def test_nice_ticks_of_any_finite_range_are_finite_ordered_and_few():
    """A gauge can hold any double: the axis of its chart has ticks for every range."""
    ranges = [
        (-1.7e308, 1.7e308),  # hi - lo overflows
        (-sys.float_info.max, sys.float_info.max),
        (0.0, 5e-324),  # (hi - lo) / n is 0: no power of ten
        (1e15, 1e15 + 10),  # ticks need all 16 digits
        (3.0, 3.0000000000000004),  # one double apart
        (1e-300, 2e-300),  # rounded to 12 decimals, every tick was 0 and the loop never ended
    ]
    for lo, hi in ranges:
        for n in (1, 4, 5, 8):
            ticks = nice_ticks(lo, hi, n)
            assert all(math.isfinite(t) for t in ticks) and ticks == sorted(set(ticks)), (lo, hi, n, ticks)
            assert 2 <= len(ticks) <= 2 * n + 3 and ticks[0] <= lo and ticks[-1] >= hi - (hi / 2 - lo / 2) * 1e-6


def test_text_formats_and_stage_colors():
    assert (duration(0.0123), duration(2.5), duration(900)) == ("12.3 ms", "2.500 s", "15.0 min")
    assert esc('<a href="x">') == "&lt;a href=&quot;x&quot;&gt;"
    colors = stage_colors(["gen", "my_stage"])
    assert colors["gen"] == STAGE_COLORS["gen"] and colors["my_stage"] not in STAGE_COLORS.values()
    assert list(colors) == ["gen", "my_stage", OTHER]  # "other" (step time outside any stage) comes last


def test_a_curve_leaves_non_finite_values_out():
    """A NaN loss is kept in the record (the guard fires on it) but has no place on an axis."""
    from otel_verl.offline.run.charts import line_svg

    svg = line_svg("loss", "", [("loss", {1: 0.5, 2: float("nan"), 3: float("inf"), 4: 0.25})])
    assert "nan" not in svg.lower() and "inf" not in svg.lower() and "<polyline" in svg
    assert "No finite values" in line_svg("loss", "", [("loss", {1: float("nan")})])
