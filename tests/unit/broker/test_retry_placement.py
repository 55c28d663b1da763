"""Retry placements: remembered within the window and the bound, forgotten after."""

from __future__ import annotations

from broker.processor.retry_placement import RetryPlacements


def test_a_placement_is_found_within_the_window_only() -> None:
    placements = RetryPlacements(window_ms=1_000, entries_max=10)
    placements.remember("t", "id-1", 3, now_ms=5_000)
    assert placements.queue_of("t", "id-1", now_ms=6_000) == 3
    assert placements.queue_of("t", "id-1", now_ms=6_001) is None
    assert placements.queue_of("other-topic", "id-1", now_ms=5_000) is None


def test_old_and_excess_placements_are_forgotten() -> None:
    placements = RetryPlacements(window_ms=1_000, entries_max=2)
    for i in range(3):
        placements.remember("t", f"id-{i}", i, now_ms=100 + i)
    assert len(placements) == 2
    assert placements.queue_of("t", "id-0", now_ms=103) is None  # over the bound: oldest out
    placements.remember("t", "id-9", 9, now_ms=1_102)  # id-1 (at 101) is out of the window
    assert placements.queue_of("t", "id-1", now_ms=1_102) is None
    assert placements.queue_of("t", "id-2", now_ms=1_102) == 2


def test_remembering_again_moves_a_placement_to_the_newest() -> None:
    placements = RetryPlacements(window_ms=1_000, entries_max=2)
    placements.remember("t", "a", 1, now_ms=0)
    placements.remember("t", "b", 2, now_ms=1)
    placements.remember("t", "a", 1, now_ms=2)
    placements.remember("t", "c", 3, now_ms=3)  # the bound drops b, not a
    assert placements.queue_of("t", "a", now_ms=3) == 1
    assert placements.queue_of("t", "b", now_ms=3) is None
