"""What a storage node reports about its groups' leaders, and when (storage_node.reporting)."""

from __future__ import annotations

import pytest

from storage_node.reporting import (
    LeaderReporter,
    LeaderView,
    group_rates_per_s,
    percentile_us,
    rate_per_s,
)


def _groups(batch: object) -> dict[int, tuple[int, int]]:
    assert batch is not None
    return {v.group_id: (v.leader, v.term) for v in batch.views}  # type: ignore[attr-defined]


def test_the_first_batch_is_a_full_report_of_known_leaders_only() -> None:
    reporter = LeaderReporter(coalesce_ms=200, full_interval_ms=2000)
    batch = reporter.due(0, {1: (2, 5), 2: (0, 7), 3: (3, 1)})
    assert batch is not None
    assert batch.full
    assert batch.views == (LeaderView(1, 2, 5), LeaderView(3, 3, 1))


def test_nothing_is_due_without_a_known_leader() -> None:
    assert LeaderReporter().due(0, {1: (0, 3)}) is None


def test_changes_are_sent_once_and_coalesced() -> None:
    reporter = LeaderReporter(coalesce_ms=200, full_interval_ms=10_000)
    first = reporter.due(0, {1: (1, 1), 2: (1, 1)})
    assert first is not None
    reporter.sent(first, 0)
    assert reporter.due(50, {1: (1, 1), 2: (1, 1)}) is None  # unchanged
    assert reporter.due(50, {1: (2, 2), 2: (1, 1)}) is None  # changed, but too soon
    changed = reporter.due(200, {1: (2, 2), 2: (3, 2)})
    assert changed is not None
    assert not changed.full
    assert _groups(changed) == {1: (2, 2), 2: (3, 2)}
    reporter.sent(changed, 200)
    assert reporter.due(450, {1: (2, 2), 2: (3, 2)}) is None


def test_a_batch_not_confirmed_goes_out_again() -> None:
    reporter = LeaderReporter(coalesce_ms=200, full_interval_ms=10_000)
    first = reporter.due(0, {1: (1, 1)})
    assert first is not None
    reporter.sent(first, 0)
    lost = reporter.due(300, {1: (2, 2)})
    assert lost is not None  # the call failed: not confirmed
    again = reporter.due(400, {1: (2, 2)})
    assert again is not None
    assert _groups(again) == {1: (2, 2)}


def test_everything_is_reported_again_every_full_interval() -> None:
    reporter = LeaderReporter(coalesce_ms=200, full_interval_ms=1000)
    views = {1: (1, 1), 2: (2, 1)}
    first = reporter.due(0, views)
    assert first is not None
    reporter.sent(first, 0)
    assert reporter.due(999, views) is None
    full = reporter.due(1000, views)
    assert full is not None
    assert full.full
    assert _groups(full) == views


def test_bad_intervals_are_refused() -> None:
    with pytest.raises(ValueError, match="full_interval_ms"):
        LeaderReporter(coalesce_ms=10, full_interval_ms=0)


@pytest.mark.parametrize(
    ("before", "now", "expected"),
    [((0, 0), (500, 1000), 500), ((100, 0), (100, 1000), 0), ((0, 5), (10, 5), 0)],
)
def test_rate_per_s(before: tuple[int, int], now: tuple[int, int], expected: int) -> None:
    assert rate_per_s(before[0], before[1], now[0], now[1]) == expected


def test_group_rates_leave_out_idle_groups_and_count_new_ones_from_zero() -> None:
    rates = group_rates_per_s({1: 100, 2: 50}, 0, {1: 300, 2: 50, 3: 20}, 2000)
    assert rates == {1: 100, 3: 10}


def test_percentile_us_is_the_nearest_rank_in_microseconds() -> None:
    durations_ns = [1_000_000 * n for n in range(1, 101)]  # 1..100 ms
    assert percentile_us(durations_ns) == 99_000
    assert percentile_us(durations_ns, 0.5) == 50_000
    assert percentile_us([7_500]) == 7
    assert percentile_us([]) == 0
    with pytest.raises(ValueError, match="fraction"):
        percentile_us([1], 0.0)
