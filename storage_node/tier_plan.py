"""What a group's leader uploads to the tier next, and what tier objects retention expires.

Uploads (:func:`plan_uploads`): for every queue of the group, the messages from
the upload point (``partition.tier``; a queue never uploaded starts at its
first offset) to its end offset AS APPLIED: a replica applies only committed
entries, so nothing above the commit index is ever uploaded, and no upload can
be rolled back by a new leader. A queue's pending messages go out as one object
once they are at least ``batch_messages_min`` or the oldest of them waits
``batch_wait_ms`` (bounded by size AND time); one object holds at most
``object_messages_max`` messages and about ``object_bytes_max`` bytes of log
entries, so an upload's memory is bounded.

Tier retention (:func:`plan_expiry`): a queue's objects whose newest message is
older than ``retention_ms``, or that lie beyond ``retention_bytes`` counted from
the newest object, are expired (``ExpireTier``). A leader's rounds plan them with
:class:`TierExpiry`, which looks only at the queues whose oldest object may have
expired or that changed, as ``retention.GroupRetention`` does for the local log.

PURE.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from protocol.message_objects import ObjectEntry
from storage_node.partition.commands import ExpireTier
from storage_node.partition.queries import PartitionQueries
from storage_node.partition.queues import QueueId
from storage_node.retention import REASON_CHANGED, DueQueues, EntryBytes, TopicLimits


@dataclass(frozen=True, slots=True)
class UploadPolicy:
    """When pending messages become an object, and how big one gets."""

    batch_messages_min: int = 1000
    batch_wait_ms: int = 2_000
    object_messages_max: int = 20_000
    object_bytes_max: int = 16 << 20


@dataclass(frozen=True, slots=True)
class Upload:
    """Upload the queue's offsets ``[first_offset, end_offset)`` as one object."""

    queue: QueueId
    first_offset: int
    end_offset: int


def upload_start(state: PartitionQueries, queue: QueueId) -> int:
    """Where the queue's next object starts: the upload point, or its first offset."""
    point = state.tier.end_offset(queue)
    return state.first_offset(*queue) if point is None else point


LAG_SCAN_MAX = 100_000
"""Pending messages :func:`upload_lag` looks at, at most (their bytes past it are not
counted)."""


@dataclass(frozen=True, slots=True)
class UploadLag:
    """How far a queue's uploads are behind its end: the upload point, the messages not
    uploaded, the bytes of the log entries holding them and the age of the oldest."""

    upload_point: int
    messages: int
    log_bytes: int
    age_ms: int


def upload_lag(
    state: PartitionQueries,
    queue: QueueId,
    now_ms: int,
    entry_bytes: EntryBytes,
    scan_max: int = LAG_SCAN_MAX,
) -> UploadLag:
    """The queue's :class:`UploadLag` at ``now_ms`` (bytes: of at most ``scan_max``
    pending messages' entries, each entry counted once)."""
    start = upload_start(state, queue)
    end = state.end_offset(*queue)
    begin = max(start, state.first_offset(*queue))
    if begin >= end:
        return UploadLag(start, max(0, end - start), 0, 0)
    entries = state.read(*queue, begin, min(end - begin, scan_max))
    log_indexes = {entry.log_index for entry in entries}
    total = sum(entry_bytes(log_index) for log_index in log_indexes)
    age_ms = max(0, now_ms - entries[0].store_timestamp_ms)
    return UploadLag(start, end - start, total, age_ms)


def plan_uploads(
    state: PartitionQueries, policy: UploadPolicy, now_ms: int, entry_bytes: EntryBytes
) -> list[Upload]:
    """The objects to upload now, at most one per queue (see the module docstring)."""
    uploads = []
    for queue in state.queue_ids():
        start = upload_start(state, queue)
        end = state.end_offset(*queue)
        if start >= end or start < state.first_offset(*queue):
            # Nothing pending, or the local log lost the next offsets (trimmed before
            # the tier knew the queue): they cannot be uploaded any more.
            continue
        oldest_ms = state.entry(*queue, start).store_timestamp_ms
        if end - start < policy.batch_messages_min and now_ms - oldest_ms < policy.batch_wait_ms:
            continue
        uploads.append(
            Upload(queue, start, _object_end(state, queue, start, end, policy, entry_bytes))
        )
    return uploads


def _object_end(
    state: PartitionQueries,
    queue: QueueId,
    start: int,
    end: int,
    policy: UploadPolicy,
    entry_bytes: EntryBytes,
) -> int:
    """Where an object from ``start`` ends: within the message and byte bounds (at least
    one message)."""
    end = min(end, start + policy.object_messages_max)
    log_indexes = state.log_indexes(*queue, start, end - start)
    total = 0
    for log_index in dict.fromkeys(log_indexes):  # each log entry once, in offset order
        total += entry_bytes(log_index)
        if total > policy.object_bytes_max:
            cut = start + log_indexes.index(log_index)  # the entry's first message
            if cut > start:
                return cut
    return end


def plan_expiry(
    state: PartitionQueries, topics: Mapping[str, TopicLimits], now_ms: int
) -> list[ExpireTier]:
    """``ExpireTier`` for the objects of listed topics past their limits (see the module
    docstring), a walk over every queue with objects; an unlisted topic's objects go
    with its drop. A leader's rounds go through :class:`TierExpiry` instead."""
    commands = []
    for queue in state.tier.queues():
        limits = topics.get(queue[0])
        if limits is None:
            continue
        cut = expiry_cut(state.tier.objects(queue), limits, now_ms)
        if cut is not None:
            commands.append(ExpireTier(now_ms, queue[0], queue[1], cut))
    return commands


def expiry_cut(objects: Sequence[ObjectEntry], limits: TopicLimits, now_ms: int) -> int | None:
    """Where a queue's ``objects`` past ``limits`` end (None: none is past them)."""
    cut = 0
    for entry in objects:
        if entry.max_store_timestamp_ms < now_ms - limits.retention_ms:
            cut = entry.end_offset
    if limits.retention_bytes > 0:
        total = 0
        for entry in reversed(objects):
            total += entry.size_bytes
            if total > limits.retention_bytes:
                cut = max(cut, entry.end_offset)
                break
    return cut if objects and cut > objects[0].first_offset else None


class TierExpiry:
    """:func:`plan_expiry` across a leader's rounds, looking only at the queues whose
    oldest object's newest message expired, whose first object changed (an upload to
    a queue without objects, an expiry), or that recorded an upload while their
    topic has a byte limit: as ``retention.GroupRetention`` does for the local log
    (:meth:`before_listing`, the list read, :meth:`plan`; :meth:`forget` after a
    round that did not apply every command). A first round, or one after a topic's
    limits changed, walks every queue with objects."""

    def __init__(self) -> None:
        self.queues_looked = 0
        """How many queues the last :meth:`plan` looked at."""
        self.forget()

    def forget(self) -> None:
        """Drop what is known: the next round looks at every queue with objects."""
        self._topics: Mapping[str, TopicLimits] | None = None
        self._queues = DueQueues()
        self._changes: dict[QueueId, bool] | None = None
        self._state: PartitionQueries | None = None

    def before_listing(self, state: PartitionQueries) -> None:
        """Take the state's tier changes (before the topic list is read)."""
        self._changes = state.take_tier_changes()
        self._state = state

    def plan(
        self, state: PartitionQueries, topics: Mapping[str, TopicLimits], now_ms: int
    ) -> list[ExpireTier]:
        """The commands :func:`plan_expiry` would give now."""
        if state is not self._state:  # restored meanwhile (or no before_listing)
            self.forget()
            return []
        changes, previous = self._changes, self._topics
        self._changes = self._state = None
        self._topics = topics
        full = changes is None or previous is None or self._queues.overfull(state.queue_count())
        if not full and previous is not None and topics is not previous:
            full = any(previous.get(topic, limits) != limits for topic, limits in topics.items())
        reasons: Mapping[QueueId, int]
        if full or changes is None:
            self._queues.clear()
            reasons = dict.fromkeys(state.tier.queues(), REASON_CHANGED)
        else:
            reasons = self._queues.reasons(now_ms, topics, changes)
        commands: list[ExpireTier] = []
        filed: list[tuple[int, QueueId]] = []
        unlisted: list[QueueId] = []
        for queue, reason in reasons.items():
            objects = state.tier.objects(queue)
            if not objects:  # expired or dropped: an upload is a change
                continue
            limits = topics.get(queue[0])
            if limits is None:
                unlisted.append(queue)
                continue
            cut = expiry_cut(objects, limits, now_ms)
            if cut is not None:
                commands.append(ExpireTier(now_ms, queue[0], queue[1], cut))  # a change
                continue
            due_ms = objects[0].max_store_timestamp_ms + limits.retention_ms + 1
            key = DueQueues.refiled(reason, due_ms, now_ms)
            if key is not None:
                filed.append((key, queue))
        self._queues.file(filed, unlisted)
        self.queues_looked = len(reasons)
        return sorted(commands, key=lambda command: (command.topic, command.queue_id))
