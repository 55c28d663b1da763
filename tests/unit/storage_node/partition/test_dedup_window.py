"""The dedup window remembers, evicts the oldest first and keeps its keys' order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from storage_node.partition.queues import DedupWindow, Placement, RecordOutcome


@given(
    batches=st.lists(st.lists(st.integers(0, 30), max_size=8), max_size=12),
    entries_max=st.integers(1, 20),
)
def test_the_newest_entries_max_stay_in_store_order(
    batches: list[list[int]], entries_max: int
) -> None:
    window = DedupWindow(window_ms=1_000, entries_max=entries_max)
    expected: dict[str, int] = {}  # id -> offset, in store order
    offset = 0
    for clock_ms, batch in enumerate(batches):
        fresh = [f"m{n}" for n in dict.fromkeys(batch) if f"m{n}" not in expected]
        window.remember_queued("t", 0, fresh, offset, clock_ms)
        for message_id in fresh:
            expected[message_id] = offset
            offset += 1
        while len(expected) > entries_max:
            del expected[next(iter(expected))]
        window.check_invariants()
        assert [key[1] for key in window.remembered()] == list(expected)  # type: ignore[attr-defined]
    for message_id, queue_offset in expected.items():
        assert window.lookup("t", message_id) == RecordOutcome(
            "t", 0, message_id, Placement.QUEUED, queue_offset
        )


def test_an_id_remembered_again_keeps_its_place_and_the_order_holds() -> None:
    # Callers never do this (an append checks first), but the window stays whole.
    window = DedupWindow(window_ms=1_000, entries_max=3)
    window.remember_queued("t", 0, ["a", "b"], 0, 1)
    window.remember_queued("t", 0, ["b", "c"], 2, 2)
    window.check_invariants()
    assert [key[1] for key in window.remembered()] == ["a", "b", "c"]  # type: ignore[attr-defined]
    window.remember_queued("t", 0, ["d"], 4, 3)  # evicts the oldest
    window.check_invariants()
    assert [key[1] for key in window.remembered()] == ["b", "c", "d"]  # type: ignore[attr-defined]


def test_entries_older_than_the_window_leave_from_the_front() -> None:
    window = DedupWindow(window_ms=100, entries_max=1_000)
    window.remember_queued("t", 0, ["a", "b"], 0, 1_000)
    window.remember(RecordOutcome("t", 1, "c", Placement.DELAYED), 1_050)
    assert window.maybe_evict(1_120) == 2
    window.check_invariants()
    assert [key[1] for key in window.remembered()] == ["c"]  # type: ignore[attr-defined]
    assert window.lookup("t", "a") is None
