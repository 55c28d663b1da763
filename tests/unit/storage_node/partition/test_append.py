"""Appends: dense offsets, the commit log as the only copy, idempotent retries."""

from __future__ import annotations

import pytest

from protocol.records import MessageRecord
from protocol.vocabulary import Placement
from storage_node.errors import BadCommand, CommandCorrupted, OffsetOutOfRange, OutOfOrderApply
from storage_node.partition.commands import Append, Tick
from storage_node.partition.config import PartitionConfig
from storage_node.partition.reads import record_at
from storage_node.partition.state import PartitionState

from .harness import Harness, record


def test_offsets_are_dense_per_queue_and_index_the_log() -> None:
    h = Harness()
    result = h.append(record("a"), record("b", queue_id=1), record("c"))
    assert [(o.queue_id, o.queue_offset) for o in result.outcomes] == [(0, 0), (1, 0), (0, 1)]
    assert all(o.placement is Placement.QUEUED and not o.duplicate for o in result.outcomes)
    h.advance(5)
    h.append(record("d"))
    assert h.queue_bodies() == [b"a", b"c", b"d"]
    assert h.queue_bodies(queue_id=1) == [b"b"]
    entries = h.state.read("orders", 0, 0, 10)
    assert [(e.log_index, e.position) for e in entries] == [(1, 0), (1, 2), (2, 0)]
    assert [e.store_timestamp_ms for e in entries] == [1_000_000, 1_000_000, 1_000_005]
    assert h.state.end_offset("orders", 0) == 3
    assert h.state.queue_ids() == [("orders", 0), ("orders", 1)]


def test_a_retried_send_returns_the_original_offset() -> None:
    h = Harness()
    first = h.append(record("m1"), record("m2"))
    h.advance(1000)
    again = h.append(record("m2"), record("m3"))
    assert again.outcomes[0].queue_offset == first.outcomes[1].queue_offset == 1
    assert again.outcomes[0].duplicate
    assert again.outcomes[1].queue_offset == 2
    assert not again.outcomes[1].duplicate
    assert h.queue_bodies() == [b"m1", b"m2", b"m3"]


def test_a_duplicate_inside_one_batch_is_stored_once() -> None:
    h = Harness()
    result = h.append(record("m1"), record("m1"))
    assert [o.queue_offset for o in result.outcomes] == [0, 0]
    assert [o.duplicate for o in result.outcomes] == [False, True]
    assert h.state.end_offset("orders", 0) == 1


def test_the_same_message_id_in_another_topic_is_another_message() -> None:
    h = Harness()
    h.append(record("m1"), record("m1", topic="audit"))
    assert h.state.end_offset("orders", 0) == h.state.end_offset("audit", 0) == 1


def test_dedup_forgets_after_its_window() -> None:
    h = Harness(PartitionConfig(dedup_window_ms=10_000))
    h.append(record("m1"))
    h.advance(10_000)
    assert h.append(record("m1")).outcomes[0].duplicate  # exactly at the window edge
    h.advance(1)
    outcome = h.append(record("m1")).outcomes[0]
    assert not outcome.duplicate
    assert outcome.queue_offset == 1


def test_dedup_keeps_at_most_its_entry_limit() -> None:
    h = Harness(PartitionConfig(dedup_entries_max=2))
    h.append(record("m1"), record("m2"), record("m3"))
    assert h.state.dedup_size() == 2
    assert not h.append(record("m1")).outcomes[0].duplicate
    assert h.append(record("m3")).outcomes[0].duplicate


def test_a_bad_record_rejects_the_whole_batch() -> None:
    h = Harness()
    with pytest.raises(BadCommand, match="no message id"):
        h.append(record("ok"), MessageRecord("orders", 0, "", b"x"))
    with pytest.raises(BadCommand, match="no topic"):
        h.append(MessageRecord("", 0, "m", b"x"))
    with pytest.raises(BadCommand, match="queue id"):
        h.append(record("m", queue_id=-1))
    assert h.state.queue_ids() == []
    assert h.state.applied_index == 3  # rejected entries are still applied (as no-ops)
    assert h.append(record("ok")).outcomes[0].queue_offset == 0


def test_entries_are_applied_once_in_log_order() -> None:
    state = PartitionState()
    state.apply(Tick(0), 5)
    with pytest.raises(OutOfOrderApply):
        state.apply(Tick(0), 5)
    with pytest.raises(OutOfOrderApply):
        state.apply(Tick(0), 4)
    assert state.applied_index == 5


def test_a_leader_no_op_entry_only_advances_the_applied_index() -> None:
    state = PartitionState()
    assert state.apply_entry(b"", 1) is None
    assert state.applied_index == 1


def test_a_corrupt_entry_is_reported_and_skipped_alike_everywhere() -> None:
    state = PartitionState()
    with pytest.raises(CommandCorrupted):
        state.apply_entry(b"\x01garbage", 1)
    with pytest.raises(CommandCorrupted, match="unknown op"):
        state.apply_entry(b"\xfe", 2)
    assert state.applied_index == 2
    state.apply(Append(0, (record("a"),)), 3)
    assert state.end_offset("orders", 0) == 1


def test_the_clock_never_goes_back() -> None:
    h = Harness()
    h.append(record("a"))
    h.now_ms -= 500_000  # a new leader whose clock lags
    h.append(record("b"))
    assert h.state.clock_ms == 1_000_000
    assert [e.store_timestamp_ms for e in h.state.read("orders", 0, 0, 5)] == [1_000_000] * 2


def test_a_queue_entry_resolves_only_against_its_append_entry() -> None:
    h = Harness()
    h.append(record("a"), record("b"))
    h.apply(Tick(h.now_ms))
    entry = h.state.entry("orders", 0, 1)
    assert record_at(h.log[1], entry, ("orders", 0)).body == b"b"
    with pytest.raises(CommandCorrupted, match="not an APPEND"):
        record_at(h.log[2], entry, ("orders", 0))
    with pytest.raises(CommandCorrupted, match="position 5"):
        record_at(h.log[1], entry._replace(position=5), ("orders", 0))
    with pytest.raises(CommandCorrupted, match="CRC"):
        record_at(h.log[1][:-1] + b"\x00", entry, ("orders", 0))


def test_reads_outside_the_queue_are_refused() -> None:
    h = Harness()
    h.append(record("a"))
    assert h.state.read("orders", 0, 1, 10) == ()
    with pytest.raises(OffsetOutOfRange):
        h.state.read("orders", 0, 2, 10)
    with pytest.raises(OffsetOutOfRange):
        h.state.entry("orders", 0, 1)
    with pytest.raises(OffsetOutOfRange):
        h.state.entry("nowhere", 0, 0)
    assert h.state.entry("orders", 0, 0).log_index == 1
