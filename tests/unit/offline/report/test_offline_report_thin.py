"""A long run's page stays bounded: a drawn series keeps at most ``MAX_LINE_POINTS`` points, its
spikes among them, and the page is written a section at a time."""

from __future__ import annotations

import math

from otel_verl.offline.report.charts import MAX_LINE_POINTS, line_svg, thin


def test_a_short_series_is_drawn_whole():
    data = {s: float(s) for s in range(MAX_LINE_POINTS)}
    assert thin(data) is data


def test_a_long_series_keeps_each_runs_lowest_and_highest_in_step_order():
    n = 10 * MAX_LINE_POINTS
    data = {s: math.sin(s / 50) for s in range(n)}
    data[12_345] = 99.0  # a spike
    data[777] = -99.0
    data[4_000] = math.nan
    out = thin(data)
    assert len(out) <= MAX_LINE_POINTS
    assert out[12_345] == 99.0 and out[777] == -99.0 and 4_000 not in out  # the run's finite extremes
    assert list(out) == sorted(out) and set(out) <= set(data)
    assert all(out[s] == data[s] for s in out)  # values as logged, never averaged
    assert min(out) < n // 100 and max(out) > n - n // 100  # the whole range of steps


def test_a_run_of_only_nonfinite_values_keeps_one():
    data = {s: math.nan for s in range(3 * MAX_LINE_POINTS)}
    out = thin(data, most=10)
    assert len(out) == 5 and all(math.isnan(v) for v in out.values())


def test_a_drawn_curve_is_bounded_whatever_the_runs_length():
    def points(n: int) -> int:
        return line_svg("Reward", "", [("r", {s: float(s % 7) for s in range(n)})]).count("<circle")

    assert points(500) == 500
    assert points(5 * MAX_LINE_POINTS) == points(50 * MAX_LINE_POINTS) <= MAX_LINE_POINTS


def test_the_page_is_the_sections_written_in_turn(tmp_path, monkeypatch):
    from otel_verl.offline.report import page

    made: list[str] = []
    real = page._curves_section

    def curves(report):  # made only when the writer reaches it
        made.append("curves")
        return real(report)

    monkeypatch.setattr(page, "_curves_section", curves)
    from otel_verl.offline.report.model import build

    rep = build(tmp_path)
    parts = page.render_parts(rep)
    first = next(parts)
    assert first == "<!DOCTYPE html>" and made == []
    rest = "".join(parts)
    assert made == ["curves"]
    assert page.render(rep) == first + rest
