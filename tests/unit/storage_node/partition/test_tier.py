"""The tier's metadata in the partition state: recording uploads, the fence, expiry,
drops and snapshots (storage_node.partition.tier)."""

from __future__ import annotations

import pytest

from protocol.message_objects import ObjectEntry
from storage_node.partition.commands import (
    CommitOffset,
    DropTopic,
    ExpireTier,
    InitialPosition,
    RecordUpload,
    TierReceive,
    TierRow,
    TrimQueue,
)
from storage_node.partition.queries import TierWindow
from storage_node.partition.results import (
    DropTopicResult,
    ExpireTierResult,
    ReceiveResult,
    RecordUploadResult,
)
from storage_node.partition.tier import upload_refusal

from .harness import Harness, record


def _upload(h: Harness, first: int, end: int, name: str = "", queue_id: int = 0) -> RecordUpload:
    entry = ObjectEntry(name or f"o-{first}", first, end, 1, 2, 100, 7)
    return RecordUpload(h.now_ms, "orders", queue_id, entry)


@pytest.mark.parametrize(
    ("recorded_end", "first", "end", "refused"),
    [
        (None, 0, 4, ""),
        (None, 2, 4, ""),  # a first object may start above the queue's first offset
        (None, 0, 0, "at least one message"),
        (None, 0, 9, "past the queue's end"),
        (4, 4, 5, ""),
        (4, 3, 5, "not where the tier ends (4)"),  # overlaps: a second uploader
        (4, 5, 5, "at least one message"),
        (4, 5, 6, "not where the tier ends (4)"),  # a gap
    ],
)
def test_the_fence_takes_only_the_next_contiguous_object(
    recorded_end: int | None, first: int, end: int, refused: str
) -> None:
    refusal = upload_refusal(recorded_end, 0, 8, first, end)
    assert (refusal == "") if not refused else (refused in refusal)


def test_a_first_object_may_not_start_below_the_queue() -> None:
    assert "below the queue's first 3" in upload_refusal(None, 3, 5, 2, 4)


def test_uploads_are_recorded_in_order_and_a_duplicate_is_refused() -> None:
    h = Harness()
    h.append(*(record(f"m{i}") for i in range(6)))
    assert h.apply(_upload(h, 0, 4, "term1")) == RecordUploadResult(True, 4)
    # A deposed leader's object of the same offsets, recorded late: refused everywhere.
    late = h.apply(_upload(h, 0, 4, "term0"))
    assert isinstance(late, RecordUploadResult)
    assert (late.recorded, late.upload_point) == (False, 4)
    assert "not where the tier ends" in late.refusal
    assert h.apply(_upload(h, 4, 6)) == RecordUploadResult(True, 6)
    assert [o.name for o in h.state.tier.objects(("orders", 0))] == ["term1", "o-4"]
    h.restart_from_snapshot()
    assert h.state.tier.end_offset(("orders", 0)) == 6
    assert [o.name for o in h.state.tier.objects(("orders", 0))] == ["term1", "o-4"]
    h.state.check_invariants()


def test_expiry_forgets_old_objects_and_keeps_the_upload_point() -> None:
    h = Harness()
    h.append(*(record(f"m{i}") for i in range(6)))
    h.apply(_upload(h, 0, 2))
    h.apply(_upload(h, 2, 4))
    assert h.apply(ExpireTier(h.now_ms, "orders", 0, 3)) == ExpireTierResult(("o-0",))
    assert h.apply(ExpireTier(h.now_ms, "orders", 0, 4)) == ExpireTierResult(("o-2",))
    assert h.state.tier.objects(("orders", 0)) == []
    assert h.state.tier.end_offset(("orders", 0)) == 4
    h.apply(TrimQueue(h.now_ms, "orders", 0, 4))
    assert h.apply(_upload(h, 4, 6)).recorded  # type: ignore[union-attr]
    h.restart_from_snapshot()
    assert h.state.tier.first_offset(("orders", 0)) == 4
    h.state.check_invariants()


def test_a_dropped_topic_names_its_tier_objects_for_deletion() -> None:
    h = Harness()
    h.append(*(record(f"m{i}") for i in range(3)))
    h.apply(_upload(h, 0, 3))
    dropped = h.apply(DropTopic(h.now_ms, "orders"))
    assert isinstance(dropped, DropTopicResult)
    assert dropped.tier_objects == ("o-0",)
    assert h.state.tier.end_offset(("orders", 0)) is None
    assert not h.state.tier  # and the snapshot is the pre-tier layout again


# ---------------------------------------------------------------- receive of tier-only data


def _tier_receive(h: Harness, group: str = "g", **fields: object) -> ReceiveResult:
    """What the leader's shell proposes (storage_node.tier_receive): the rows of the group's
    tier window, here made from the log the harness kept."""
    window = h.state.tier_window(group, "orders", 0, InitialPosition.EARLIEST, h.now_ms, 32)
    offsets = sorted({*window.leased, *range(window.first, window.end)})
    rows = tuple(TierRow(offset, h.now_ms, f"t{offset % 2}") for offset in offsets)
    result = h.apply(
        TierReceive(
            h.now_ms,
            group,
            "orders",
            0,
            32,
            30_000,
            2,
            evaluated_end=window.end,
            tier_rows=rows,
            **fields,  # type: ignore[arg-type]
        )
    )
    assert isinstance(result, ReceiveResult)
    return result


def _tiered(h: Harness, count: int, uploaded: int, trimmed: int) -> None:
    h.append(*(record(f"m{i}", tag=f"t{i % 2}") for i in range(count)))
    h.apply(_upload(h, 0, uploaded))
    h.apply(TrimQueue(h.now_ms, "orders", 0, trimmed))


def test_a_group_behind_a_local_trim_keeps_its_place_in_the_tier() -> None:
    h = Harness()
    h.append(*(record(f"m{i}") for i in range(6)))
    assert [d.handle.queue_offset for d in h.receive(max_messages=2).deliveries] == [0, 1]
    h.apply(_upload(h, 0, 5))
    h.apply(TrimQueue(h.now_ms, "orders", 0, 4))
    # The leases on 0 and 1 and the cursor at 2 stay: the tier still holds them.
    assert h.state.committed_offset("g", "orders", 0) == 2
    assert h.state.lease("g", "orders", 0, 0) is not None
    assert h.state.readable_first_offset("orders", 0) == 0
    assert h.state.tier_window("g", "orders", 0, InitialPosition.EARLIEST, h.now_ms, 32) == (
        TierWindow((), 2, 4)
    )
    h.state.check_invariants()
    # Once the tier lets its objects go, the group's state of those offsets goes too.
    h.apply(ExpireTier(h.now_ms, "orders", 0, 5))
    assert h.state.committed_offset("g", "orders", 0) == 4
    assert h.state.lease("g", "orders", 0, 0) is None
    h.state.check_invariants()


def test_a_fresh_group_reads_from_the_tier_then_the_log() -> None:
    h = Harness()
    _tiered(h, count=8, uploaded=6, trimmed=5)
    # A plain receive cannot hand out tier-only offsets: it passes over them (they stay
    # fresh, the cursor with them) to the local ones.
    plain = h.receive("plain", max_messages=2)
    assert [d.handle.queue_offset for d in plain.deliveries] == [5, 6]
    assert h.state.committed_offset("plain", "orders", 0) == 0
    result = _tier_receive(h)
    assert [d.handle.queue_offset for d in result.deliveries] == [0, 1, 2, 3, 4]
    assert all(d.entry.tier_only for d in result.deliveries)
    assert [d.entry.tag for d in result.deliveries] == ["t0", "t1", "t0", "t1", "t0"]
    assert h.ack(*(d.handle for d in result.deliveries)).outcomes
    assert h.state.committed_offset("g", "orders", 0) == 5
    local = h.receive()
    assert [d.handle.queue_offset for d in local.deliveries] == [5, 6, 7]
    assert not any(d.entry.tier_only for d in local.deliveries)
    assert h.bodies(local) == [b"m5", b"m6", b"m7"]
    h.restart_from_snapshot()
    h.state.check_invariants()


def test_tier_rows_obey_the_tag_filter_and_a_sql_filters_verdicts() -> None:
    h = Harness()
    _tiered(h, count=6, uploaded=6, trimmed=6)
    result = _tier_receive(h, filter_expression="t1", unmatched=(3,))
    assert [d.handle.queue_offset for d in result.deliveries] == [1, 5]
    assert h.state.committed_offset("g", "orders", 0) == 6


def test_an_expired_tier_lease_is_handed_out_again_and_never_dead_lettered() -> None:
    h = Harness()
    _tiered(h, count=3, uploaded=3, trimmed=3)
    first = _tier_receive(h)
    assert [d.delivery_attempt for d in first.deliveries] == [1, 1, 1]
    for attempt in (2, 3):  # max attempts is 2: past it, a tier message is delivered again
        h.advance(30_001)
        window = h.state.tier_window("g", "orders", 0, InitialPosition.EARLIEST, h.now_ms, 32)
        assert window.leased == (0, 1, 2)
        again = _tier_receive(h)
        assert [d.delivery_attempt for d in again.deliveries] == [attempt] * 3
        assert again.dead_lettered == ()
    h.state.check_invariants()


def test_a_fresh_group_starts_at_the_tiers_first_offset() -> None:
    h = Harness()
    _tiered(h, count=4, uploaded=4, trimmed=4)
    h.apply(CommitOffset(h.now_ms, "late", "orders", 0, 0))
    assert h.state.committed_offset("late", "orders", 0) == 0  # not clamped to the local 4
    assert h.state.backlog("new", "orders", 0) == (4, 0)
