"""What a partition holds, and the read-only queries on it.

:class:`PartitionQueries` keeps the queues, consumer groups, half messages and
timers of one raft group, and answers the host's reads (offsets, entries,
backlogs, leases, what the log must keep, timers and transactions due).
:class:`storage_node.partition.state.PartitionState` adds apply, the only way
the state changes. A query changes nothing applied: some keep derived records
(the truncate floor's index; the changes the retention planner takes).

PURE.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Collection, Iterator, Sequence
from typing import NamedTuple

from storage_node.errors import OffsetOutOfRange
from storage_node.partition.commands import InitialPosition
from storage_node.partition.config import PartitionConfig
from storage_node.partition.consumer_tally import ConsumerChange, ConsumerTally
from storage_node.partition.counts import move_count
from storage_node.partition.dedup import DedupWindow
from storage_node.partition.group_queues import GroupQueueKey, GroupQueues
from storage_node.partition.pop import GroupQueue, Lease
from storage_node.partition.queues import QueueEntry, QueueId, QueueIndex, queue_key
from storage_node.partition.tier import TierObjects
from storage_node.partition.timers import HeldMessage, TimerIndex
from storage_node.partition.transactions import HalfMessage, HalfMessages

_EMPTY = QueueIndex()


def group_queue_key(group: str, topic: str, queue_id: int) -> GroupQueueKey:
    """The key a new group queue is kept under, its names interned (as
    :func:`storage_node.partition.queues.queue_key`)."""
    return (sys.intern(group), sys.intern(topic), queue_id)


class TierWindow(NamedTuple):
    """The offsets only the tier holds that a receive by a group may hand out: its
    ``leased`` ones a receive could hand out again (expired, or of its latest
    attempt), and the fresh ones in ``[first, end)`` from its cursor (empty if the
    cursor is at or past the local first offset)."""

    leased: tuple[int, ...]
    first: int
    end: int

    def __bool__(self) -> bool:
        return bool(self.leased) or self.end > self.first


class PartitionQueries:
    """The state of one raft group's queues and the queries that read it."""

    def __init__(self, config: PartitionConfig | None = None) -> None:
        """An empty partition; ``config``: the constants its replicas share (defaults if None)."""
        self.config = config or PartitionConfig()
        self.applied_index = 0
        self.clock_ms = 0
        self.grown_queues: set[QueueId] = set()
        self._queues: dict[QueueId, QueueIndex] = {}
        # The truncate floor's index over the queues, kept so that a floor query costs
        # the queues changed since the last one, not the queues held. Unless
        # ``_floor_rebuild``: ``_floor_counts`` maps each least log index to how many
        # queues have it as their minimum, as of the last query (a queue changed since
        # is in ``_floor_dirty`` with its minimum then, None: empty or new);
        # ``_floor_heap`` holds every key of the counts, and stale values (count gone to
        # 0) dropped when they reach the top. Per distinct minimum, not per queue: the
        # queues of one APPEND entry share theirs. Apply notes a queue before changing
        # its entries (append, trim, topic drop); a restored state rebuilds.
        self._floor_counts: dict[int, int] = {}
        self._floor_heap: list[int] = []
        self._floor_dirty: dict[QueueId, int | None] = {}
        self._floor_rebuild = True
        # For the retention planner (``storage_node.retention.GroupRetention``), kept
        # only once it asks (a replica that never leads keeps nothing): the queues
        # that grew (False) or whose oldest entry changed (True) since it last took
        # them, None: not kept since (look at every queue); and each held topic's
        # queue count, None: not asked yet (a restore asks afresh).
        self._retention_changes: dict[QueueId, bool] | None = None
        self._tier_changes: dict[QueueId, bool] | None = None  # the same, of tier objects
        self._topic_queues: dict[str, int] | None = None
        # The messages in the queues (sum of end - first offsets), kept by apply so the
        # gauges need no walk; a restore recounts (:meth:`recount_messages`).
        self._messages_held = 0
        self._groups = GroupQueues()  # those consumed to their end kept as cursors
        # The consumer figures kept by what changed (``consumer_tally``), from the
        # first :meth:`consumer_changes` until :meth:`retire_consumer_changes`; None:
        # nobody reads them (a follower), apply notes nothing.
        self._consumer_tally: ConsumerTally | None = None
        self._dedup = DedupWindow(self.config.dedup_window_ms, self.config.dedup_entries_max)
        self._halves = HalfMessages()
        self._timers = TimerIndex()
        self.tier = TierObjects()
        """The tier objects recorded for the queues (``partition.tier``)."""

    def idle_receive_end(self, group: str, topic: str, queue_id: int, now_ms: int) -> int | None:
        """The queue's end offset if a receive by ``group`` proposed at ``now_ms`` would
        hand out nothing and change nothing; None if it might (it must go through the log).

        Conservative: a group that never received (its cursor starts with its first
        receive), a due timer, an expired lease or any fresh offset all answer None.
        So a leader may answer such a receive empty without proposing it: idle
        consumers polling an empty queue then cost no log entry on any replica.
        """
        index = self._queues.get((topic, queue_id))
        clock_ms = max(self.clock_ms, now_ms)
        due_ms = self._timers.next_due_ms()
        if due_ms is not None and due_ms <= clock_ms:
            return None
        if index is None:
            return 0
        group_queue = self._groups.get((group, topic, queue_id))
        if group_queue is None or group_queue.has_candidates(
            index.end_offset, clock_ms, self.config.receive_scan_max
        ):
            return None
        return index.end_offset

    def leased_count(self, group: str, topic: str, queue_id: int) -> int:
        """How many messages of the queue ``group`` holds leases on (delivered and not
        finished, invisible or expired): the only way the group can get messages of
        the queue again without the queue growing is through these (a lease ending, a
        FIFO message group they block being released, a change of invisibility)."""
        group_queue = self._groups.get((group, topic, queue_id))
        return 0 if group_queue is None else len(group_queue.leases)

    def queue_count(self) -> int:
        """How many queues hold or held a message (and were not dropped)."""
        return len(self._queues)

    def message_count(self) -> int:
        """How many messages the queues hold (trimmed ones not counted): kept, O(1)."""
        return self._messages_held

    def recount_messages(self) -> None:
        """Count the queues' messages afresh (a restore, which fills the queues directly)."""
        self._messages_held = sum(i.end_offset - i.first_offset for i in self._queues.values())

    def take_retention_changes(self) -> dict[QueueId, bool] | None:
        """The queues that grew (False) or whose oldest entry changed (True: an append to
        an empty queue, a trim) since the last call, and from now on keep noting them;
        None: not noted since (the first call, a restored state, or too many changed):
        the caller looks at every queue. Changes only this derived record."""
        changes = self._retention_changes
        self._retention_changes = {}
        return changes

    def take_tier_changes(self) -> dict[QueueId, bool] | None:
        """As :meth:`take_retention_changes`, of the queues' tier objects: an upload
        recorded (True if the queue had no object), objects expired (True)."""
        changes = self._tier_changes
        self._tier_changes = {}
        return changes

    def held_topics(self) -> Collection[str]:
        """Every topic with a queue here (kept per topic once asked: costs topics, not
        queues; the first call after a restore counts them, one pass)."""
        return self._topic_counts().keys()

    def holds_topic(self, topic: str) -> bool:
        """Whether a queue of ``topic`` is here (see :meth:`held_topics`)."""
        return topic in self._topic_counts()

    def _topic_counts(self) -> dict[str, int]:
        counts = self._topic_queues
        if counts is None:
            counts = self._topic_queues = {}
            for topic, _queue_id in self._queues:
                counts[topic] = counts.get(topic, 0) + 1
        return counts

    def oldest_timestamp_ms(self, topic: str, queue_id: int) -> int | None:
        """When the queue's oldest entry was stored (None: the queue is empty)."""
        index = self._queues.get((topic, queue_id))
        return None if index is None else index.first_timestamp_ms()

    def queue_ids(self) -> list[QueueId]:
        """Every queue with at least one message, sorted."""
        return sorted(self._queues)

    def end_offset(self, topic: str, queue_id: int) -> int:
        """The offset the next message of the queue will get (0 for an unknown queue)."""
        index = self._queues.get((topic, queue_id))
        return 0 if index is None else index.end_offset

    def queue_key_of(self, topic: str, queue_id: int) -> QueueId:
        """The queue table's key of the queue (its tuple, shared by the group queues of
        the queue), or a new interned one if the queue does not exist."""
        index = self._queues.get((topic, queue_id))
        if index is not None and index.key is not None:
            return index.key
        return queue_key(topic, queue_id)

    def first_offset(self, topic: str, queue_id: int) -> int:
        """The oldest offset still in the queue (older ones were trimmed)."""
        index = self._queues.get((topic, queue_id))
        return 0 if index is None else index.first_offset

    def readable_first_offset(self, topic: str, queue_id: int) -> int:
        """The oldest offset of the queue a consumer can still read: the tier's first
        if its recorded objects hold messages older than the local log, else the
        local first offset. Local trims never pass the upload point, so the tier's
        objects and the local log together hold every offset from here on."""
        local = self.first_offset(topic, queue_id)
        tiered = self.tier.first_offset((topic, queue_id))
        return local if tiered is None else min(local, tiered)

    def tier_window(
        self,
        group: str,
        topic: str,
        queue_id: int,
        position: InitialPosition,
        clock_ms: int,
        count_max: int,
    ) -> TierWindow:
        """What a receive by ``group`` at ``clock_ms`` may hand out of the offsets only the
        tier holds (see :class:`TierWindow`), at most ``count_max`` fresh ones: the
        leader reads these from the tier and proposes them as a ``TierReceive``."""
        index = self._queues.get((topic, queue_id))
        if index is None:
            return TierWindow((), 0, 0)
        local_first = index.first_offset
        group_queue = self._groups.get((group, topic, queue_id))
        if group_queue is None:
            group_queue = GroupQueue.starting(
                position, index, self.readable_first_offset(topic, queue_id)
            )
        first = group_queue.cursor
        if group_queue.consumer_offset() >= local_first:  # the usual case: nothing there
            return TierWindow((), first, first)
        attempt = set(group_queue.last_attempt[2])
        leased = tuple(
            sorted(
                offset
                for offset, lease in group_queue.leases.items()
                if offset < local_first
                and (not lease.is_invisible(max(self.clock_ms, clock_ms)) or offset in attempt)
            )
        )
        end = min(local_first, first + max(0, count_max)) if first < local_first else first
        return TierWindow(leased[:count_max], first, end)

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset of the queue stored at or after ``timestamp_ms`` (end if none)."""
        index = self._queues.get((topic, queue_id), _EMPTY)
        return index.offset_for_timestamp(timestamp_ms)

    def entry(self, topic: str, queue_id: int, queue_offset: int) -> QueueEntry:
        """Where the message at ``queue_offset`` lives; raises ``OffsetOutOfRange``."""
        index = self._queues.get((topic, queue_id), _EMPTY)
        if not index.holds(queue_offset):
            raise OffsetOutOfRange(
                f"offset {queue_offset} outside [{index.first_offset}, {index.end_offset}) "
                f"of {topic}:{queue_id}"
            )
        return index.at(queue_offset)

    def read(
        self, topic: str, queue_id: int, queue_offset: int, count_max: int
    ) -> Sequence[QueueEntry]:
        """Up to ``count_max`` entries from ``queue_offset`` (the end offset gives none)."""
        return self._index_at(topic, queue_id, queue_offset).read(queue_offset, count_max)

    def log_indexes(
        self, topic: str, queue_id: int, queue_offset: int, count_max: int
    ) -> list[int]:
        """The log indexes of the entries :meth:`read` gives (the same range check)."""
        index = self._index_at(topic, queue_id, queue_offset)
        return index.log_indexes(queue_offset, count_max)

    def _index_at(self, topic: str, queue_id: int, queue_offset: int) -> QueueIndex:
        """The queue's index; OffsetOutOfRange unless ``queue_offset`` is within
        ``[first_offset, end_offset]``."""
        index = self._queues.get((topic, queue_id), _EMPTY)
        if not index.first_offset <= queue_offset <= index.end_offset:
            raise OffsetOutOfRange(
                f"offset {queue_offset} outside [{index.first_offset}, {index.end_offset}] "
                f"of {topic}:{queue_id}"
            )
        return index

    def min_log_index_referenced(self) -> int | None:
        """The oldest log index a queue entry, half message or held message still needs.

        Log entries below it hold no message anyone can read: with a snapshot
        at or after it, the log may be truncated there. None: nothing is
        referenced. Costs a pass over the held and half messages and, for the
        queues, amortized O(log n) per queue changed since the last call (a kept
        lazy min-heap; idle queues cost nothing); call it when planning
        truncation, not per request.
        """
        indexes = [half.log_index for half in self._halves]
        indexes += [held.log_index for held in self._timers.unordered()]
        least = self._queues_min_log_index()
        if least is not None:
            indexes.append(least)
        return min(indexes, default=None)

    def _queues_min_log_index(self) -> int | None:
        """The least log index any queue entry names (None: no entries): the counts
        brought up to date for the queues changed since the last call, then the
        heap's least value still counted. Amortized O(log n) per queue changed; a
        rebuild (after a restore, or once stale values outnumber the counted ones
        and 64) is one pass."""
        if self._floor_rebuild:
            self._rebuild_floor()
        counts, heap, queues = self._floor_counts, self._floor_heap, self._queues
        for queue, old in self._floor_dirty.items():
            index = queues.get(queue)
            new = None if index is None else index.min_log_index()
            if old != new and move_count(counts, old, new) and new is not None:
                heapq.heappush(heap, new)
        self._floor_dirty.clear()
        if len(heap) > 2 * len(counts) + 64:
            heap[:] = counts
            heapq.heapify(heap)
        while heap and heap[0] not in counts:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _floor_changed(self, queue: QueueId, index: QueueIndex) -> None:
        """Note, BEFORE its entries change (apply calls it on every append, trim and
        drop), that ``queue`` may get another minimum: the next floor query looks at it
        again. Nothing is kept before the first query (it rebuilds), so a state nobody
        asks keeps no changed queues."""
        if not self._floor_rebuild and queue not in self._floor_dirty:
            self._floor_dirty[queue] = index.min_log_index()

    def _rebuild_floor(self) -> None:
        """The floor counts and heap afresh from every queue (one pass; nothing stale)."""
        counts: dict[int, int] = {}
        for index in self._queues.values():
            least = index.min_log_index()
            if least is not None:
                counts[least] = counts.get(least, 0) + 1
        self._floor_counts = counts
        self._floor_heap = list(counts)
        heapq.heapify(self._floor_heap)
        self._floor_dirty.clear()
        self._floor_rebuild = False

    def referenced_log_indexes(self) -> set[int]:
        """Every log index a queue entry, half message or held message names.

        These APPEND entries must stay readable (in the log, or carried by a
        group image); every other entry may go once a snapshot covers it.
        The queues keep theirs per chunk of entries (with their snapshot
        encoding): a call looks at the entries queued since the last one.
        """
        referenced: set[int] = set()
        for index in self._queues.values():
            referenced.update(*index.log_index_sets())
        referenced.update(half.log_index for half in self._halves)
        referenced.update(held.log_index for held in self._timers.unordered())
        return referenced

    def consumer_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The offset below which every message is done for ``group`` (None: never consumed)."""
        group_queue = self._groups.get((group, topic, queue_id))
        return None if group_queue is None else group_queue.consumer_offset()

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """Where ``group``'s consumption of the queue goes on, past messages in flight
        (RocketMQ's committed offset; None: never consumed nor committed)."""
        group_queue = self._groups.get((group, topic, queue_id))
        return None if group_queue is None else group_queue.committed_offset()

    def backlog(self, group: str, topic: str, queue_id: int) -> tuple[int, int]:
        """(messages not yet done for ``group``, of which in flight now) in a queue.

        A group that never consumed the queue counts every message still in it.
        """
        group_queue = self._groups.get((group, topic, queue_id))
        end = self.end_offset(topic, queue_id)
        if group_queue is None:
            return end - self.readable_first_offset(topic, queue_id), 0
        clock_ms = self.clock_ms
        in_flight = sum(1 for lease in group_queue.leases.values() if lease.is_invisible(clock_ms))
        cursor = group_queue.cursor
        behind = sum(1 for offset in group_queue.leases if offset < cursor)
        return end - cursor - len(group_queue.done_ahead) + behind, in_flight

    def lease(self, group: str, topic: str, queue_id: int, queue_offset: int) -> Lease | None:
        """The group's current lease on a message, expired or not (None if none)."""
        group_queue = self._groups.get((group, topic, queue_id))
        return None if group_queue is None else group_queue.leases.get(queue_offset)

    def consumer_changes(self) -> list[ConsumerChange]:
        """How the consumer figures of the group queues changed since the last call
        (``partition.consumer_tally``): the first call counts every group queue (one
        pass), later ones cost the group queues changed since, not those held."""
        if self._consumer_tally is None:
            self._consumer_tally = ConsumerTally()
            return self._consumer_tally.whole(self)
        return self._consumer_tally.changes(self)

    def retire_consumer_changes(self) -> list[ConsumerChange]:
        """The changes that undo every change :meth:`consumer_changes` gave (its reader
        stops reading this state: it no longer leads it, or the state was replaced); the
        tally is dropped, so apply notes nothing until the next read. Empty if none."""
        tally = self._consumer_tally
        if tally is None:
            return []
        self._consumer_tally = None
        return tally.retire(self)

    def group_queues(self) -> list[GroupQueueKey]:
        """Every (group, topic, queue id) with consumption state, sorted."""
        return sorted(self._groups)

    def next_timer_due_ms(self) -> int | None:
        """When the earliest held message is due (the leader proposes a Tick then)."""
        return self._timers.next_due_ms()

    def held_messages(self) -> Iterator[HeldMessage]:
        """Held delayed messages in release order."""
        return iter(self._timers)

    def half_message(self, transaction_id: str) -> HalfMessage | None:
        """The unresolved half message of a transaction, if any."""
        return self._halves.get(transaction_id)

    def half_messages_due(
        self, stored_before_ms: int, checked_before_ms: int, limit: int = 1000
    ) -> list[HalfMessage]:
        """Unresolved half messages to check back: stored before ``stored_before_ms``
        and never checked or last checked before ``checked_before_ms``, oldest first."""
        return self._halves.due(stored_before_ms, checked_before_ms, limit)

    def check_invariants(self) -> None:
        """Raise AssertionError if the state's invariants do not hold (tests, simulation)."""
        self._groups.check_invariants()
        for (_group, topic, queue_id), group_queue in self._groups.items():
            group_queue.check_invariants(
                self.readable_first_offset(topic, queue_id), self.end_offset(topic, queue_id)
            )
        for queue, index in self._queues.items():
            if not 0 <= index.first_offset <= index.end_offset:
                raise AssertionError(
                    f"{queue} has offsets [{index.first_offset}, {index.end_offset})"
                )
            if any(entry.log_index > self.applied_index for entry in index):
                raise AssertionError(f"{queue} indexes an entry after the applied index")
        if not self._floor_rebuild:
            expected: dict[int, int] = {}
            for queue, index in self._queues.items():
                least = (
                    self._floor_dirty[queue]
                    if queue in self._floor_dirty
                    else index.min_log_index()
                )
                if least is not None:
                    expected[least] = expected.get(least, 0) + 1
            for queue, least in self._floor_dirty.items():
                if queue not in self._queues and least is not None:
                    expected[least] = expected.get(least, 0) + 1
            if expected != self._floor_counts or not expected.keys() <= set(self._floor_heap):
                raise AssertionError("the floor counts differ from the queues' minimums")
        if self._topic_queues is not None:
            topic_queues: dict[str, int] = {}
            for topic, _queue_id in self._queues:
                topic_queues[topic] = topic_queues.get(topic, 0) + 1
            if topic_queues != self._topic_queues:
                raise AssertionError("the topics' queue counts differ from the queues")
        counted = sum(index.end_offset - index.first_offset for index in self._queues.values())
        if counted != self._messages_held:
            raise AssertionError(f"{self._messages_held} messages kept, {counted} held")
        for held in self._timers:
            if held.due_ms <= self.clock_ms:
                raise AssertionError(f"timer {held.message_id} due at {held.due_ms} not released")
        self._dedup.check_invariants()
        self.tier.check_invariants()
        if self._consumer_tally is not None:
            self._consumer_tally.check(self)

    def dedup_size(self) -> int:
        """How many message ids the dedup window remembers."""
        return len(self._dedup)

    def fresh_entries(
        self, group: str, topic: str, queue_id: int, position: InitialPosition
    ) -> Iterator[tuple[int, QueueEntry]]:
        """The fresh offsets of a queue that a receive by ``group`` would look at, with
        their entries, in offset order (a group that never received starts at
        ``position``). Read them before the state changes again. Offsets only the tier
        holds are not among them (a ``TierReceive`` carries those)."""
        index = self._queues.get((topic, queue_id))
        if index is None:
            return
        group_queue = self._groups.get((group, topic, queue_id))
        if group_queue is None:
            group_queue = GroupQueue.starting(
                position, index, self.readable_first_offset(topic, queue_id)
            )
        for offset in group_queue.fresh_offsets(index.end_offset, self.config.receive_scan_max):
            if offset >= index.first_offset:
                yield offset, index.at(offset)
