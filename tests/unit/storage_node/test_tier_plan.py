"""Upload planning and tier expiry (storage_node.tier_plan), and tier object names
(protocol.message_objects)."""

from __future__ import annotations

from protocol.message_objects import ObjectEntry, parse_tier_object_name, tier_object_name
from storage_node.partition.commands import ExpireTier, RecordUpload, TrimQueue
from storage_node.retention import TopicLimits
from storage_node.tier_plan import (
    Upload,
    UploadLag,
    UploadPolicy,
    plan_expiry,
    plan_uploads,
    upload_lag,
    upload_start,
)

from .partition.harness import Harness, record

POLICY = UploadPolicy(batch_messages_min=4, batch_wait_ms=1_000, object_messages_max=5)


def _sizes(log_index: int) -> int:
    return 100


def _record(h: Harness, first: int, end: int, size: int = 100) -> None:
    entry = ObjectEntry(f"o-{first}", first, end, h.now_ms - 1, h.now_ms, size, 0)
    h.apply(RecordUpload(h.now_ms, "orders", 0, entry))


def test_pending_messages_go_once_enough_or_once_old_enough() -> None:
    h = Harness()
    h.append(record("a"), record("b"), record("c"))
    assert plan_uploads(h.state, POLICY, h.now_ms, _sizes) == []  # 3 < 4, just stored
    assert plan_uploads(h.state, POLICY, h.now_ms + 1_000, _sizes) == [Upload(("orders", 0), 0, 3)]
    h.append(record("d"))
    assert plan_uploads(h.state, POLICY, h.now_ms, _sizes) == [Upload(("orders", 0), 0, 4)]


def test_an_upload_starts_at_the_recorded_point_and_is_bounded() -> None:
    h = Harness()
    for i in range(12):
        h.append(record(f"m{i}"))
    assert plan_uploads(h.state, POLICY, h.now_ms, _sizes) == [Upload(("orders", 0), 0, 5)]
    _record(h, 0, 5)
    assert upload_start(h.state, ("orders", 0)) == 5
    assert plan_uploads(h.state, POLICY, h.now_ms, _sizes) == [Upload(("orders", 0), 5, 10)]
    # Bounded in bytes too: 100-byte entries, 250 bytes at most: 2 (a third would pass it).
    small = UploadPolicy(batch_messages_min=1, object_bytes_max=250)
    assert plan_uploads(h.state, small, h.now_ms, _sizes) == [Upload(("orders", 0), 5, 7)]


def test_the_byte_bound_cuts_before_the_log_entry_that_passes_it() -> None:
    h = Harness()
    for batch in range(3):  # three log entries of three messages each
        h.append(*(record(f"m{batch}-{i}") for i in range(3)))
    queue = ("orders", 0)
    log_indexes = h.state.log_indexes(*queue, 0, 9)
    assert log_indexes == [entry.log_index for entry in h.state.read(*queue, 0, 9)]
    assert len(set(log_indexes)) == 3
    # 100 bytes per log entry, 250 at most: the third entry would pass it, so the object
    # ends at its first message; an entry alone past the bound still makes an object.
    small = UploadPolicy(batch_messages_min=1, object_bytes_max=250)
    assert plan_uploads(h.state, small, h.now_ms, _sizes) == [Upload(queue, 0, 6)]
    tiny = UploadPolicy(batch_messages_min=1, object_bytes_max=50)
    assert plan_uploads(h.state, tiny, h.now_ms, _sizes) == [Upload(queue, 0, 3)]


def test_nothing_is_planned_when_all_is_uploaded_or_the_next_offsets_are_gone() -> None:
    h = Harness()
    for i in range(4):
        h.append(record(f"m{i}"))
    _record(h, 0, 4)
    assert plan_uploads(h.state, POLICY, h.now_ms + 10_000, _sizes) == []
    h2 = Harness()
    for i in range(6):
        h2.append(record(f"m{i}"))
    entry = ObjectEntry("o", 0, 2, 0, 0, 1, 0)
    h2.apply(RecordUpload(h2.now_ms, "orders", 0, entry))
    h2.apply(TrimQueue(h2.now_ms, "orders", 0, 3))  # offset 2 never reached the tier
    assert plan_uploads(h2.state, POLICY, h2.now_ms + 10_000, _sizes) == []


def test_tier_objects_expire_by_age_and_by_bytes() -> None:
    h = Harness()
    for i in range(6):
        h.append(record(f"m{i}"))
    _record(h, 0, 2)
    h.advance(5_000)
    _record(h, 2, 4)
    _record(h, 4, 6)
    by_age = {"orders": TopicLimits(retention_ms=3_000)}
    assert plan_expiry(h.state, by_age, h.now_ms) == [ExpireTier(h.now_ms, "orders", 0, 2)]
    by_bytes = {"orders": TopicLimits(retention_ms=10**9, retention_bytes=250)}
    assert plan_expiry(h.state, by_bytes, h.now_ms) == [ExpireTier(h.now_ms, "orders", 0, 2)]
    assert plan_expiry(h.state, {"orders": TopicLimits(10**9)}, h.now_ms) == []
    assert plan_expiry(h.state, {}, h.now_ms) == []  # unlisted: goes with its drop


def test_local_limits_default_to_the_whole_limits() -> None:
    assert TopicLimits(10, 20).local() == TopicLimits(10, 20)
    assert TopicLimits(10, 20, 1, 2).local() == TopicLimits(1, 2)


def test_tier_object_names_carry_queue_offset_and_term() -> None:
    name = tier_object_name("orders", 3, 42, term=7)
    assert name == "objects/orders/3/00000000000000000042-t7.r5mo"
    assert parse_tier_object_name(name) == ("orders", 3, 42, 7)
    assert tier_object_name("orders", 3, 42, term=8) != name  # two leaders, two files
    for bad in ("objects/orders/3/42.r5mo", "manifest.json", "objects/o/x/1-t1.r5mo"):
        assert parse_tier_object_name(bad) is None


def test_the_upload_lag_counts_messages_entry_bytes_and_the_oldest_pending_age() -> None:
    h = Harness()
    h.append(record("a"), record("b"))  # one log entry
    h.advance(500)
    h.append(record("c"))
    queue = ("orders", 0)
    assert upload_lag(h.state, queue, h.now_ms + 100, _sizes) == UploadLag(0, 3, 200, 600)
    _record(h, 0, 2)
    assert upload_lag(h.state, queue, h.now_ms + 100, _sizes) == UploadLag(2, 1, 100, 100)
    _record(h, 2, 3)
    assert upload_lag(h.state, queue, h.now_ms + 100, _sizes) == UploadLag(3, 0, 0, 0)
    # Bounded: past scan_max messages, the bytes of the rest are not read.
    assert upload_lag(Harness().state, queue, 0, _sizes) == UploadLag(0, 0, 0, 0)
    h.append(*(record(f"m{i}") for i in range(3)))
    h.append(record("n"))
    assert upload_lag(h.state, queue, h.now_ms, _sizes, scan_max=2).log_bytes == 100
