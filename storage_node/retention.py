"""Per-topic retention and topic deletion: which commands a group's leader proposes.

The nameserver holds each topic's limits (``retention_ms``, ``retention_bytes``;
``protocol.nameserver_api.TopicInfo``); the leader of every raft group looks at
its queues now and then (``storage_node.housekeeping.run_retention``) and
proposes what :func:`plan` returns:

- ``TrimQueue`` up to the first offset a limit keeps: the first offset stored
  at or after ``now_ms - retention_ms``, and the first offset from which the
  queue's log entries hold at most ``retention_bytes`` (0: no byte limit).
  The bytes of a queue are those of the log entries its messages are in
  (``entry_bytes``, from the WAL index: no entry is read); an entry shared by
  several queues counts for each, so a byte limit errs on the side of
  trimming. Trimming never passes ``keep_from`` (a queue's offset still
  needed: with a tier, the upload point, and the limits are the local ones).
- ``DropTopic`` for a topic the group holds that the nameserver no longer
  lists, only if the group held it before the list was read (``held_before``):
  a topic created after the listing cannot be taken for a deleted one. System
  topics (``%DLQ%``, ``%RETRY%``: names starting with ``%``) are never dropped
  this way: they exist through their consumer group, listed or not.

Applying these is the partition state machine's (``TrimQueue``, ``DropTopic``),
so every replica frees the same entries, and the truncate floor then lets raft
compact the log past them.

PURE.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from storage_node.partition.commands import DropTopic, TrimQueue
from storage_node.partition.queries import PartitionQueries
from storage_node.partition.queues import QueueId

SYSTEM_TOPIC_PREFIX = "%"
"""Topics named so (dead-letter and retry topics) are never dropped for being unlisted."""


@dataclass(frozen=True, slots=True)
class TopicLimits:
    """How much of a topic's queues is kept (0 bytes: no byte limit), and of that how much
    on the storage nodes' disks once the rest is in the tier (0: as the whole limits)."""

    retention_ms: int
    retention_bytes: int = 0
    local_retention_ms: int = 0
    local_retention_bytes: int = 0

    def local(self) -> TopicLimits:
        """The limits of what stays on local disk (with a tier)."""
        return TopicLimits(
            self.local_retention_ms or self.retention_ms,
            self.local_retention_bytes or self.retention_bytes,
        )


EntryBytes = Callable[[int], int]
"""The size in bytes of the group's log entry at a log index (0 if unknown)."""


def plan(
    state: PartitionQueries,
    topics: Mapping[str, TopicLimits],
    held_before: Collection[str],
    now_ms: int,
    entry_bytes: EntryBytes,
    keep_from: Mapping[QueueId, int] | None = None,
) -> list[TrimQueue | DropTopic]:
    """The retention commands for one group now (see the module docstring).

    ``topics``: every topic the nameserver lists, with its limits; ``held_before``:
    the topics this group held before that list was read.
    """
    commands: list[TrimQueue | DropTopic] = []
    dropped: set[str] = set()
    for topic, queue_id in state.queue_ids():
        limits = topics.get(topic)
        if limits is None:
            if (
                topic in held_before
                and topic not in dropped
                and not topic.startswith(SYSTEM_TOPIC_PREFIX)
            ):
                dropped.add(topic)
                commands.append(DropTopic(now_ms, topic))
            continue
        before = trim_point(state, (topic, queue_id), limits, now_ms, entry_bytes)
        if keep_from is not None:
            before = min(before, keep_from.get((topic, queue_id), before))
        if before > state.first_offset(topic, queue_id):
            commands.append(TrimQueue(now_ms, topic, queue_id, before))
    return commands


def trim_point(
    state: PartitionQueries,
    queue: QueueId,
    limits: TopicLimits,
    now_ms: int,
    entry_bytes: EntryBytes,
) -> int:
    """The first offset of ``queue`` its limits keep (its first offset: nothing to trim)."""
    topic, queue_id = queue
    first = state.first_offset(topic, queue_id)
    before = max(first, state.offset_for_timestamp(topic, queue_id, now_ms - limits.retention_ms))
    if limits.retention_bytes > 0:
        before = max(before, _bytes_cut(state, queue, first, limits.retention_bytes, entry_bytes))
    return before


def _bytes_cut(
    state: PartitionQueries, queue: QueueId, first: int, bytes_max: int, entry_bytes: EntryBytes
) -> int:
    """The least offset from which the queue's log entries hold at most ``bytes_max``.

    Walks back from the end, counting each log entry once.
    """
    topic, queue_id = queue
    offset = state.end_offset(topic, queue_id)
    total = 0
    counted: set[int] = set()
    while offset > first:
        log_index = state.entry(topic, queue_id, offset - 1).log_index
        if log_index not in counted:
            counted.add(log_index)
            total += entry_bytes(log_index)
            if total > bytes_max:
                return offset
        offset -= 1
    return first
