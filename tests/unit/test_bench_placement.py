"""The placement and detection simulations (rip5 bench placement), small and seeded:
forecast placement keeps the busiest node closer to the mean than count-based placement,
and the hysteresis detector marks a slow disk quickly with no false positive."""

from __future__ import annotations

import pytest

from rip5.bench import placement


def test_forecast_placement_beats_count_based_on_diurnal_loads_with_fewer_moves() -> None:
    count_based, forecast = placement.simulate_placement(
        nodes=20, groups=600, days=3, seed=7, bursts=False
    )
    assert forecast.peak_over_mean < count_based.peak_over_mean
    assert forecast.moves < count_based.moves
    assert forecast.peak_over_mean_worst > 1.0


def test_a_slow_disk_is_marked_in_three_windows_without_false_positives() -> None:
    results = {r.detector: r for r in placement.simulate_detection(nodes=30, seed=3)}
    tracked = next(r for name, r in results.items() if "hysteresis" in name)
    alone = next(r for name, r in results.items() if "alone" in name)
    assert tracked.detection_s == 30.0
    assert (tracked.false_nodes, tracked.false_windows) == (0, 0)
    assert alone.false_windows > 0  # the spikes hysteresis filters out


def test_the_command_prints_both_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert placement.main(["--nodes", "10", "--groups", "100", "--days", "3"]) == 0
    out = capsys.readouterr().out
    assert out.count("| count-based (today) |") == 2
    assert "median/MAD + hysteresis" in out


def test_too_small_a_simulation_is_refused() -> None:
    with pytest.raises(ValueError, match="nodes"):
        placement.simulate_placement(nodes=3, groups=100, days=3, seed=1)
