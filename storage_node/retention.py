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

A leader's rounds go through :class:`GroupRetention`, which proposes at each
round exactly what :func:`plan` (a walk over every queue) would, but looks only
at the queues that may have something to trim now:

- each queue is filed under the second its oldest message expires (its store
  timestamp + ``retention_ms`` + 1), and a round pops the seconds begun by
  now: a queue is looked at when its oldest message expires, not every round.
  The partition state names the queues whose oldest entry changed since the
  last round (an append to an empty queue, a trim: ``take_retention_changes``),
  and these are filed again. A queue looked at before its time (its second
  begun, its millisecond not) stays filed there; an entry whose queue's
  oldest message changed since is stale and dropped (the change filed the
  queue anew).
- a byte limit can only be passed by growing: the queues that grew since the
  last round are looked at if their topic has one.
- a queue whose trims wait for the tier's upload point is looked at again the
  next round (the upload point moves without changing the queue).
- a queue of an unlisted topic is set aside by topic, and looked at once the
  topic is listed.
- deleted topics: those listed by the previous round and not by this one, and
  the topics of the queues changed since (a queue of a topic created, or
  appended to after its deletion), each if still held (the state keeps each
  topic's queue count). A leader's first round, a state restored or a round
  that stopped early looks at every queue and every held topic, and so does
  a round after a topic's limits changed (the due times of its queues moved,
  and which queues they are costs a walk to find: limit changes are rare).

Why the due time is kept by the leader and not in the partition state: it
depends on the limits, which the nameserver holds; the state only records
what changed, and only once a leader asks (a follower keeps nothing). Filing
costs a list slot per non-empty queue (and a list per second of due time).

Applying these is the partition state machine's (``TrimQueue``, ``DropTopic``),
so every replica frees the same entries, and the truncate floor then lets raft
compact the log past them.

PURE.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain

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


KeepFrom = Callable[[QueueId], int]
"""A queue's offset that trims must not pass (with a tier: its upload point)."""

DUE_BUCKET_MS = 1_000
"""Queues are filed by the second their oldest message expires: one list per second,
so queues of one append share it (a slot each, not an object each)."""


class GroupRetention:
    """One group's retention planning across a leader's rounds (see the module
    docstring): :meth:`before_listing`, then the topic list is read, then
    :meth:`plan`; :meth:`forget` after a round that did not apply every command."""

    def __init__(self) -> None:
        self.queues_looked = 0
        """How many queues the last :meth:`plan` looked at."""
        self.forget()

    def forget(self) -> None:
        """Drop what is known: the next round looks at every queue and topic."""
        self._topics: Mapping[str, TopicLimits] | None = None  # the last round's listing
        self._queues = DueQueues()
        # What before_listing took, from which state (a restore replaces the state).
        self._changes: dict[QueueId, bool] | None = None
        self._held_before: set[str] | None = None
        self._state: PartitionQueries | None = None

    def before_listing(self, state: PartitionQueries) -> None:
        """Take the state's changes and the topics that may be deleted, before the
        topic list is read (a topic taken here and unlisted then was deleted, never
        created after the listing)."""
        changes = state.take_retention_changes()
        self._changes = changes
        self._state = state
        if changes is None or self._topics is None:
            self._held_before = set(state.held_topics())
        else:
            self._held_before = {topic for topic, _queue_id in changes}

    def plan(
        self,
        state: PartitionQueries,
        topics: Mapping[str, TopicLimits],
        now_ms: int,
        entry_bytes: EntryBytes,
        keep_from: KeepFrom | None = None,
    ) -> list[TrimQueue | DropTopic]:
        """The commands :func:`plan` would give now (``held_before``: the topics held
        at :meth:`before_listing`), drops first, looking only at the queues that
        may have something to trim (see the module docstring)."""
        held_before = self._held_before
        if held_before is None:
            raise RuntimeError("GroupRetention.plan needs before_listing first")
        if state is not self._state:
            # Restored while the list was read: what was taken is another state's.
            # Nothing this round; the next looks at every queue and topic.
            self.forget()
            return []
        changes, previous = self._changes, self._topics
        self._changes = self._held_before = self._state = None
        self._topics = topics
        full = changes is None or previous is None or self._queues.overfull(state.queue_count())
        gone: list[str] = []
        if previous is not None and topics is not previous:
            gone = [topic for topic in previous if topic not in topics]
            full = full or any(
                previous.get(topic, limits) != limits for topic, limits in topics.items()
            )
        commands: list[TrimQueue | DropTopic] = []
        dropped: set[str] = set()
        for topic in sorted({*held_before, *gone}):
            if (
                topic not in topics
                and not topic.startswith(SYSTEM_TOPIC_PREFIX)
                and state.holds_topic(topic)
            ):
                dropped.add(topic)
                commands.append(DropTopic(now_ms, topic))
        look = _Look(state, topics, now_ms, entry_bytes, keep_from, dropped)
        if full or changes is None:
            self._queues.clear()
            for queue in state.queue_ids():
                look.queue(queue, REASON_CHANGED)
        else:
            for queue, reason in self._queues.reasons(now_ms, topics, changes).items():
                look.queue(queue, reason)
        self._queues.file(look.filed, look.unlisted)
        self.queues_looked = look.looked
        commands += look.trims
        return commands


class DueQueues:
    """Queues filed by the second they are due (a min-heap of seconds, a list of queues
    each), and queues of unlisted topics set aside by topic; both may hold stale
    entries, which the looks drop (see the module docstring)."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget every entry (a walk over every queue files them again)."""
        self._due: dict[int, list[QueueId]] = {}
        self._due_keys: list[int] = []
        self._unlisted: dict[str, list[QueueId]] = {}
        self._filed = 0  # filed and set-aside entries

    def overfull(self, queue_count: int) -> bool:
        """Whether stale entries pile up: more than twice the queues (and 64)."""
        return self._filed > 2 * queue_count + 64

    def reasons(
        self, now_ms: int, topics: Mapping[str, TopicLimits], changes: Mapping[QueueId, bool]
    ) -> dict[QueueId, int]:
        """The queues to look at now, each once, with the strongest of its reasons: the
        due seconds begun by ``now_ms`` and the set-aside queues of listed topics (taken
        off), the queues whose oldest entry changed and those grown with a byte limit."""
        due: list[list[QueueId]] = []
        while self._due_keys and self._due_keys[0] * DUE_BUCKET_MS <= now_ms:
            due.append(self._due.pop(heapq.heappop(self._due_keys)))
            self._filed -= len(due[-1])
        reasons = dict.fromkeys(chain.from_iterable(due), REASON_POPPED)
        for topic in [topic for topic in self._unlisted if topic in topics]:
            queues = self._unlisted.pop(topic)
            self._filed -= len(queues)
            reasons.update(dict.fromkeys(queues, REASON_CHANGED))
        for queue, first_changed in changes.items():
            if first_changed:
                reasons[queue] = REASON_CHANGED
            elif _has_byte_limit(topics.get(queue[0])):
                reasons.setdefault(queue, REASON_GREW)
        return reasons

    def file(self, filed: Iterable[tuple[int, QueueId]], unlisted: Iterable[QueueId]) -> None:
        """File queues under their due seconds, and set queues of unlisted topics aside."""
        for queue in unlisted:
            self._unlisted.setdefault(queue[0], []).append(queue)
            self._filed += 1
        for key, queue in filed:
            bucket = self._due.get(key)
            if bucket is None:
                bucket = self._due[key] = []
                heapq.heappush(self._due_keys, key)
            bucket.append(queue)
            self._filed += 1

    @staticmethod
    def refiled(reason: int, due_ms: int, now_ms: int) -> int | None:
        """The second to file a queue not trimmed under, due at ``due_ms``: for a change
        (or set aside), its due second; popped before its millisecond, that second
        again; else None (a stale entry: the change of its oldest entry filed it)."""
        key = due_ms // DUE_BUCKET_MS
        if reason == REASON_CHANGED or (reason == REASON_POPPED and key * DUE_BUCKET_MS <= now_ms):
            return key
        return None


REASON_GREW, REASON_POPPED, REASON_CHANGED = 0, 1, 2
"""Why a round looks at a queue: it grew (and has a byte limit), its due second began,
its oldest entry changed (or its topic is listed again)."""


def _has_byte_limit(limits: TopicLimits | None) -> bool:
    return limits is not None and limits.retention_bytes > 0


class _Look:
    """One round's looks at single queues: the trims due, and where each queue is
    filed next."""

    def __init__(
        self,
        state: PartitionQueries,
        topics: Mapping[str, TopicLimits],
        now_ms: int,
        entry_bytes: EntryBytes,
        keep_from: KeepFrom | None,
        dropped: Collection[str],
    ) -> None:
        self.state = state
        self.topics = topics
        self.now_ms = now_ms
        self.entry_bytes = entry_bytes
        self.keep_from = keep_from
        self.dropped = dropped
        self.looked = 0
        self.trims: list[TrimQueue | DropTopic] = []
        self.filed: list[tuple[int, QueueId]] = []
        self.unlisted: list[QueueId] = []

    def queue(self, queue: QueueId, reason: int) -> None:
        """Look at ``queue`` (once a round, the caller sees to it): a trim if one is due,
        else file it under its due second if it is looked at for a change (``REASON_CHANGED``:
        its oldest entry changed, or it was set aside), or if popped (``REASON_POPPED``)
        from a second begun but before its due millisecond. Any other popped entry is
        stale and goes: the change of its queue's oldest entry filed the queue anew."""
        self.looked += 1
        state, now_ms = self.state, self.now_ms
        topic, queue_id = queue
        oldest_ms = state.oldest_timestamp_ms(topic, queue_id)
        if oldest_ms is None:  # empty or dropped: an append to it is a change
            return
        limits = self.topics.get(topic)
        if limits is None:
            if topic not in self.dropped:
                self.unlisted.append(queue)
            return
        if oldest_ms < now_ms - limits.retention_ms or limits.retention_bytes > 0:
            first = state.first_offset(topic, queue_id)
            before = trim_point(state, queue, limits, now_ms, self.entry_bytes)
            kept = before if self.keep_from is None else min(before, self.keep_from(queue))
            if kept > first:
                self.trims.append(TrimQueue(now_ms, topic, queue_id, kept))  # a change
                return
            if before > first:  # due, held by the upload point: popped next round
                self.filed.append((now_ms // DUE_BUCKET_MS, queue))
                return
        key = DueQueues.refiled(reason, oldest_ms + limits.retention_ms + 1, now_ms)
        if key is not None:
            self.filed.append((key, queue))
