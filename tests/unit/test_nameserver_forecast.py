"""nameserver.forecast: Holt-Winters per group, node forecasts as exact incremental sums."""

from __future__ import annotations

import math

import pytest

from nameserver.forecast import ForecastParams, LoadBook, LoadForecaster

DAILY = ForecastParams(season_steps=24)


def diurnal(step: int, base: float = 100.0, amplitude: float = 0.5, phase: int = 0) -> float:
    return base * (1.0 + amplitude * math.sin(2 * math.pi * (step - phase) / 24))


def test_an_empty_series_forecasts_zero_and_the_first_sample_sets_the_level() -> None:
    series = LoadForecaster(DAILY)
    assert series.forecast(0, 1) == 0.0
    series.observe(5, 42.0)
    assert series.last_step == 5
    assert series.forecast(5, 1) == pytest.approx(42.0)


def test_a_constant_load_is_forecast_as_itself() -> None:
    series = LoadForecaster(DAILY)
    for step in range(100):
        series.observe(step, 10.0)
    assert series.forecast(99, 1) == pytest.approx(10.0, rel=1e-6)
    assert series.peak(99, 24) == pytest.approx(10.0, rel=1e-6)


def test_a_daily_cycle_is_learned_and_its_peak_hour_forecast() -> None:
    series = LoadForecaster(DAILY)
    for step in range(24 * 10):
        series.observe(step, diurnal(step))
    last = 24 * 10 - 1
    for ahead in (1, 6, 12, 18, 24):
        assert series.forecast(last, ahead) == pytest.approx(diurnal(last + ahead), rel=0.05)
    assert series.peak(last, 24) == pytest.approx(150.0, rel=0.05)


def test_a_growing_load_is_followed_by_its_trend_and_the_trend_is_damped() -> None:
    params = ForecastParams(alpha=0.5, beta=0.3, season_steps=0)
    series = LoadForecaster(params)
    for step in range(50):
        series.observe(step, 10.0 * step)
    one_ahead = series.forecast(49, 1)
    assert one_ahead == pytest.approx(500.0, rel=0.05)
    # Damped: far ahead, the forecast flattens instead of growing by 10 a step.
    assert series.forecast(49, 1000) < 490.0 + 10.0 * params.phi / (1 - params.phi) + 1.0


def test_missing_steps_advance_along_the_trend_and_steps_must_increase() -> None:
    series = LoadForecaster(ForecastParams(season_steps=0))
    series.observe(0, 1.0)
    series.observe(3, 2.0)
    with pytest.raises(ValueError, match="steps must increase"):
        series.observe(3, 2.0)


@pytest.mark.parametrize(
    "bad",
    [{"alpha": 0.0}, {"beta": 1.5}, {"gamma": -0.1}, {"phi": 0.0}, {"season_steps": -1}],
)
def test_bad_parameters_are_refused_naming_the_parameter(bad: dict[str, float]) -> None:
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        ForecastParams(**bad)  # type: ignore[arg-type]


def test_a_nodes_forecast_is_the_sum_of_its_groups_through_moves_and_drops() -> None:
    book = LoadBook(DAILY)
    book.set_replicas(1, (1, 2, 3))
    book.set_replicas(2, (2, 3, 4))
    for step in range(48):
        book.observe(step, {1: diurnal(step), 2: diurnal(step, 50.0, 0.8, phase=12), 3: 7.0})
    book.set_replicas(3, (1, 4, 5))  # observed before it was placed
    book.set_replicas(2, (3, 4, 5))  # a move from 2 to 5
    for step in range(48, 60):
        book.observe(step, {1: diurnal(step), 2: diurnal(step, 50.0, 0.8, phase=12), 3: 7.0})
    expected = {1: (1, 3), 2: (1,), 3: (1, 2), 4: (2, 3), 5: (2, 3)}
    for node_id, groups in expected.items():
        summed = [
            sum(x) for x in zip(*(book.group_profile(g, 59, 24) for g in groups), strict=True)
        ]
        assert book.node_profile(node_id, 59, 24) == pytest.approx(summed)
        assert book.node_peak(node_id, 59, 24) == pytest.approx(max(summed))
    # Opposite phases complement each other: the peak of the sum is below the sum of peaks.
    assert book.node_peak(3, 59, 24) < book.group_peak(1, 59, 24) + book.group_peak(2, 59, 24)
    book.drop_group(1)
    assert 1 not in set(book.groups())
    assert book.node_profile(1, 59, 24) == pytest.approx(book.group_profile(3, 59, 24))
    assert book.node_profile(2, 59, 24) == pytest.approx([0.0] * 24, abs=1e-9)
    assert book.replicas(1) == ()
