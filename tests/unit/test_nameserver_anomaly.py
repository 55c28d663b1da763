"""nameserver.anomaly: robust outliers against peers, and degraded marks with hysteresis."""

from __future__ import annotations

import pytest

from nameserver.anomaly import DegradationTracker, OutlierRule, median, outliers

RULE = OutlierRule()


def healthy(nodes: int = 10, base: float = 2.0) -> dict[int, float]:
    """Figures of healthy nodes, spread a little around ``base``."""
    return {n: base * (0.9 + 0.02 * n) for n in range(1, nodes + 1)}


def test_median_of_odd_and_even_lists() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5


def test_a_slow_node_is_an_outlier_and_its_peers_are_not() -> None:
    figures = healthy() | {7: 9.0}
    assert outliers(figures, RULE) == {7}


def test_one_slow_node_cannot_hide_behind_the_spread_it_causes() -> None:
    # Two slow nodes out of nine: a mean/stddev rule is dragged up, the median is not.
    figures = healthy(9) | {3: 12.0, 8: 14.0}
    assert outliers(figures, RULE) == {3, 8}


def test_a_tight_cluster_does_not_flag_a_node_slower_by_a_fraction_of_a_millisecond() -> None:
    figures = dict.fromkeys(range(1, 10), 1.0) | {5: 1.4}
    assert outliers(figures, RULE) == frozenset()
    figures[5] = 4.0  # clearly slower: 4x and 3 ms above the median
    assert outliers(figures, RULE) == {5}


def test_a_fast_node_and_too_few_peers_flag_nothing() -> None:
    assert outliers(healthy() | {4: 0.1}, RULE) == frozenset()
    assert outliers({1: 1.0, 2: 50.0}, RULE) == frozenset()


@pytest.mark.parametrize(
    ("option", "value"),
    [("z_threshold", 0.0), ("ratio_min", 0.5), ("absolute_min_ms", -1.0), ("peers_min", 2)],
)
def test_bad_rules_are_refused_naming_the_option(option: str, value: float) -> None:
    with pytest.raises(ValueError, match=option):
        OutlierRule(**{option: value})  # type: ignore[arg-type]


def test_marks_after_consecutive_outlier_windows_and_clears_after_normal_ones() -> None:
    tracker = DegradationTracker(RULE, mark_after=3, clear_after=2)
    slow = {"fsync_p99_ms": healthy() | {4: 20.0}}
    normal = {"fsync_p99_ms": healthy()}
    assert tracker.window(slow) == frozenset()
    assert tracker.window(slow) == frozenset()
    assert tracker.window(slow) == {4}
    assert tracker.window(normal) == {4}
    assert tracker.window(normal) == frozenset()


def test_a_one_window_spike_never_marks_and_a_broken_streak_starts_over() -> None:
    tracker = DegradationTracker(RULE, mark_after=3, clear_after=6)
    slow = {"fsync_p99_ms": healthy() | {4: 20.0}}
    normal = {"fsync_p99_ms": healthy()}
    for _ in range(5):
        assert tracker.window(slow) == frozenset()
        assert tracker.window(slow) == frozenset()
        assert tracker.window(normal) == frozenset()


def test_any_metric_counts_and_a_silent_node_keeps_its_mark() -> None:
    tracker = DegradationTracker(RULE, mark_after=2, clear_after=1)
    window = {"fsync_p99_ms": healthy(), "rpc_p99_ms": healthy() | {2: 30.0}}
    tracker.window(window)
    assert tracker.window(window) == {2}
    without_2 = {"fsync_p99_ms": {n: v for n, v in healthy().items() if n != 2}}
    assert tracker.window(without_2) == {2}
    tracker.forget(2)
    assert tracker.degraded == frozenset()


def test_bad_hysteresis_is_refused() -> None:
    with pytest.raises(ValueError, match="mark_after"):
        DegradationTracker(mark_after=0)
