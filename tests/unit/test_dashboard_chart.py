"""The dashboard's throughput chart (rip5/dashboard/chart.py): rates from counter samples."""

from __future__ import annotations

import pytest

from rip5.dashboard.chart import Rate, Sample, Throughput, svg_chart


def test_rates_are_increases_per_second_between_consecutive_samples() -> None:
    chart = Throughput(kept=3)
    chart.add(Sample(1_000, 100, 10))
    chart.add(Sample(3_000, 140, 30))
    chart.add(Sample(3_000, 999, 999))  # not later: ignored
    chart.add(Sample(4_000, 150, 40))
    assert chart.rates() == [Rate(3_000, 20.0, 10.0), Rate(4_000, 10.0, 10.0)]
    chart.add(Sample(5_000, 5, 2))  # a broker restarted: its counters start again at 0
    assert chart.rates() == [Rate(4_000, 10.0, 10.0), Rate(5_000, 5.0, 2.0)]  # 3 kept


def test_a_chart_needs_two_samples() -> None:
    with pytest.raises(ValueError, match="at least 2 samples"):
        Throughput(kept=1)
    chart = Throughput()
    chart.add(Sample(1_000, 1, 1))
    assert chart.rates() == []
    assert "waiting for two samples" in svg_chart([])


def test_the_svg_scales_both_lines_to_the_highest_rate() -> None:
    svg = svg_chart([Rate(1_000, 0.0, 0.0), Rate(3_000, 50.0, 25.0)], width=100, height=50)
    assert 'class="in"' in svg
    assert 'points="0.0,50.0 100.0,0.0"' in svg  # in: 0 then the top
    assert 'points="0.0,50.0 100.0,25.0"' in svg  # out: half of it
    assert "50 msg/s" in svg
    assert "last 2 s: in 50.0/s (blue), out 25.0/s (green)" in svg
