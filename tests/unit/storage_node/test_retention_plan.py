"""Retention planning (storage_node.retention): which trims and drops a group's leader
proposes, from its queues, the nameserver's topics and the clock."""

from __future__ import annotations

from storage_node.partition.commands import DropTopic, TrimQueue
from storage_node.retention import EntryBytes, TopicLimits, plan, trim_point

from .partition.harness import Harness, record


def _sizes(h: Harness) -> EntryBytes:
    return lambda log_index: len(h.log[log_index])


def test_time_retention_trims_what_was_stored_before_the_cutoff() -> None:
    h = Harness()
    h.append(record("a"), record("b"))  # stored at t0
    h.advance(5_000)
    h.append(record("c"))  # t0 + 5 s
    topics = {"orders": TopicLimits(retention_ms=10_000)}
    assert plan(h.state, topics, {"orders"}, h.now_ms, _sizes(h)) == []
    h.advance(6_000)  # the first two are 11 s old, the third 6 s
    assert plan(h.state, topics, {"orders"}, h.now_ms, _sizes(h)) == [
        TrimQueue(h.now_ms, "orders", 0, 2)
    ]
    h.advance(10_000)
    (trim,) = plan(h.state, topics, {"orders"}, h.now_ms, _sizes(h))
    assert trim == TrimQueue(h.now_ms, "orders", 0, 3)
    h.apply(trim)
    assert plan(h.state, topics, {"orders"}, h.now_ms, _sizes(h)) == []


def test_byte_retention_keeps_the_newest_entries_that_fit() -> None:
    h = Harness()
    for i in range(6):  # one log entry each, of equal size
        h.append(record(f"m{i}", body=b"x" * 100))
    entry_bytes = len(h.log[1])
    limits = TopicLimits(retention_ms=10**9, retention_bytes=2 * entry_bytes)
    assert trim_point(h.state, ("orders", 0), limits, h.now_ms, _sizes(h)) == 4
    limits = TopicLimits(retention_ms=10**9, retention_bytes=2 * entry_bytes - 1)
    assert trim_point(h.state, ("orders", 0), limits, h.now_ms, _sizes(h)) == 5
    # A batch in one entry is kept or trimmed whole.
    h.append(*(record(f"b{i}", body=b"y" * 100) for i in range(4)))  # offsets 6..9
    batch_bytes = len(h.log[7])
    limits = TopicLimits(retention_ms=10**9, retention_bytes=batch_bytes + entry_bytes)
    assert trim_point(h.state, ("orders", 0), limits, h.now_ms, _sizes(h)) == 5
    # No byte limit: nothing by size.
    assert trim_point(h.state, ("orders", 0), TopicLimits(10**9), h.now_ms, _sizes(h)) == 0


def test_trims_stop_at_what_must_be_kept() -> None:
    h = Harness()
    h.append(record("a"), record("b"), record("c"))
    h.advance(10_000)
    topics = {"orders": TopicLimits(retention_ms=1)}
    keep = {("orders", 0): 1}
    assert plan(h.state, topics, {"orders"}, h.now_ms, _sizes(h), keep) == [
        TrimQueue(h.now_ms, "orders", 0, 1)
    ]


def test_an_unlisted_topic_is_dropped_only_if_held_before_the_listing() -> None:
    h = Harness()
    h.append(record("a"), record("b", queue_id=1), record("c", topic="new"))
    h.append(record("d", topic="%DLQ%g"), record("e", topic="kept"))
    topics = {"kept": TopicLimits(retention_ms=10**9)}
    commands = plan(h.state, topics, {"orders", "%DLQ%g", "kept"}, h.now_ms, _sizes(h))
    # One drop per topic (both queues of "orders" go with it); "new" was created after
    # the listing was read; a system topic is never dropped for being unlisted.
    assert commands == [DropTopic(h.now_ms, "orders")]
    h.apply(commands[0])
    assert h.state.queue_ids() == [("%DLQ%g", 0), ("kept", 0), ("new", 0)]
