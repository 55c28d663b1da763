"""The tier's metadata in the partition state: recording uploads, the fence, expiry,
drops and snapshots (storage_node.partition.tier)."""

from __future__ import annotations

import pytest

from protocol.message_objects import ObjectEntry
from storage_node.partition.commands import (
    DropTopic,
    ExpireTier,
    RecordUpload,
    TrimQueue,
)
from storage_node.partition.results import (
    DropTopicResult,
    ExpireTierResult,
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
