"""The RIP-46 consumer figures of a partition, kept by what changed, not walked.

A storage node reports, per (consumer group, topic) of the groups it leads, the
messages not yet done (lag), the messages in flight (delivered, not acked, still
invisible) and the age of the oldest message not done (storage_node/metrics.py).
Each comes from the group queues ((consumer group, topic, queue id) with pop
state): a walk over every group queue gives them (``storage_node.progress``'s
``queue_progress``, summed), but at a million queues that walk costs a million
looks each time, though almost every queue is idle.

:class:`ConsumerTally` keeps, for one partition, what it last reported for each
group queue that was not idle (lag or in flight), and notes what apply changed
since; :meth:`ConsumerTally.changes` looks at those group queues only and gives
:class:`ConsumerChange` values, which :class:`ConsumerTotals` sums over the
partitions of a node into the figures. What moves a group queue's figures, and
how the tally hears of it:

- its queue's offsets (append, timer release, committed half, dead-letter
  copy, trim, tier expiry): apply notes the queue (:meth:`ConsumerTally.queue`),
  and the next read looks at each group with a group queue of that topic;
- the group queue itself (receive, ack, release, change of invisibility,
  dead-letter, offset commit or reset): apply notes the key
  (:meth:`ConsumerTally.key`); a new group queue (:meth:`ConsumerTally.made`)
  and one dropped with its topic (:meth:`ConsumerTally.dropped`) are counted by
  the next read;
- the state clock passing the end of a lease's invisibility (in flight counts
  the leases still invisible at the state clock): a group queue with messages
  in flight has the earliest such end in a heap, and a read looks again at
  the group queues whose end the clock reached.

The latency is ``now - oldest``: the tally reports the oldest store time, so the
clock moving costs nothing per queue.

Memory: nothing per idle group queue (no lag: consumed to its end), the group
queues with lag or in flight (a dict entry and a tuple each), one tuple of group
names per topic with group queues, and what changed since the last read. The
state keeps no tally until someone reads it (the first read is one pass over the
group queues) and drops it when retired (e.g. the node stopped leading).

PURE.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from storage_node.partition.counts import move_count

if TYPE_CHECKING:
    from storage_node.partition.group_queues import GroupQueueKey
    from storage_node.partition.queries import PartitionQueries
    from storage_node.partition.queues import QueueId

QueueFigures = tuple[int, int, int | None, int | None]
"""One busy group queue: (lag messages, in-flight messages, store time of the oldest
message not done or None, the earliest end of an in-flight lease or None)."""


class ConsumerChange(NamedTuple):
    """How one group queue changed the sums of its (consumer group, topic)."""

    group: str
    topic: str
    queues: int  # +1 a group queue counted anew, -1 one taken out, else 0
    lag: int  # the change of the lag messages
    in_flight: int  # the change of the in-flight messages
    oldest_before_ms: int | None  # the group queue's oldest waiting store time before
    oldest_after_ms: int | None  # and after (None: nothing waiting)


_IDLE: QueueFigures = (0, 0, None, None)


class ConsumerTally:
    """What one partition last reported of its busy group queues, and what changed
    since (see the module docstring). Apply calls :meth:`queue`, :meth:`key`,
    :meth:`made` and :meth:`dropped`; the reader calls :meth:`changes`."""

    __slots__ = ("_busy", "_dropped", "_ends", "_groups_of_topic", "_keys", "_made", "_queues")

    def __init__(self) -> None:
        self._busy: dict[GroupQueueKey, QueueFigures] = {}
        self._groups_of_topic: dict[str, tuple[str, ...]] = {}
        self._queues: set[QueueId] = set()  # queues whose offsets changed
        self._keys: set[GroupQueueKey] = set()  # group queues changed
        self._made: set[GroupQueueKey] = set()  # made since the last read
        self._dropped: list[GroupQueueKey] = []  # counted before, dropped since
        # (end of an in-flight lease, group, topic, queue id): the earliest end of each
        # busy group queue when last read; an item whose figures changed since is stale
        # and only makes the read look at that group queue once more.
        self._ends: list[tuple[int, str, str, int]] = []

    def queue(self, queue: QueueId) -> None:
        """The queue's offsets changed (or are about to): its group queues' lag may."""
        if queue[0] in self._groups_of_topic:
            self._queues.add(queue)

    def key(self, key: GroupQueueKey) -> None:
        """The group queue's pop state changed."""
        self._keys.add(key)

    def made(self, key: GroupQueueKey) -> None:
        """A group queue was made (a first receive or offset commit)."""
        self._made.add(key)
        group, topic, _queue_id = key
        groups = self._groups_of_topic.get(topic, ())
        if group not in groups:
            self._groups_of_topic[topic] = (*groups, group)

    def dropped(self, topic: str, keys: Iterable[GroupQueueKey]) -> None:
        """The topic was dropped with these group queues (all of the topic's)."""
        for key in keys:
            if key in self._made:
                self._made.discard(key)  # never counted
            else:
                self._dropped.append(key)
        self._groups_of_topic.pop(topic, None)

    def whole(self, state: PartitionQueries) -> list[ConsumerChange]:
        """Every group queue of ``state`` counted anew (the first read: one pass)."""
        for key in state._groups:
            self.made(key)
        return self.changes(state)

    def changes(self, state: PartitionQueries) -> list[ConsumerChange]:
        """What changed since the last read (or :meth:`whole`), with the figures now.

        Costs the group queues changed, those of the queues changed and those whose
        lease ends the state clock passed; not the group queues held."""
        clock_ms = state.clock_ms
        ends, keys = self._ends, self._keys
        while ends and ends[0][0] <= clock_ms:
            _end_ms, group, topic, queue_id = heapq.heappop(ends)
            keys.add((group, topic, queue_id))
        for topic, queue_id in self._queues:
            for group in self._groups_of_topic.get(topic, ()):
                keys.add((group, topic, queue_id))
        busy = self._busy
        out: list[ConsumerChange] = []
        for key in self._dropped:
            before = busy.pop(key, _IDLE)
            out.append(ConsumerChange(key[0], key[1], -1, -before[0], -before[1], before[2], None))
        for key in self._made:
            after = self._look(state, key)
            out.append(ConsumerChange(key[0], key[1], 1, after[0], after[1], None, after[2]))
        groups = state._groups
        for key in keys - self._made:
            if key not in groups:
                continue  # dropped, or no group queue of that group in that queue
            before = busy.get(key, _IDLE)
            after = self._look(state, key)
            if before[:3] != after[:3]:
                out.append(
                    ConsumerChange(
                        key[0],
                        key[1],
                        0,
                        after[0] - before[0],
                        after[1] - before[1],
                        before[2],
                        after[2],
                    )
                )
        self._queues = set()
        self._keys = set()
        self._made = set()
        self._dropped = []
        if len(ends) > 2 * len(busy) + 64:  # mostly stale: keep the current ends only
            self._ends = [
                (figures[3], *key) for key, figures in busy.items() if figures[3] is not None
            ]
            heapq.heapify(self._ends)
        return out

    def retire(self, state: PartitionQueries) -> list[ConsumerChange]:
        """What changed since the last read, then every group queue taken out: the
        changes that undo every change this tally ever gave (its reader stops)."""
        out = self.changes(state)
        busy = self._busy
        for key in state._groups:
            lag, in_flight, oldest_ms, _end = busy.get(key, _IDLE)
            out.append(ConsumerChange(key[0], key[1], -1, -lag, -in_flight, oldest_ms, None))
        return out

    def _look(self, state: PartitionQueries, key: GroupQueueKey) -> QueueFigures:
        """The group queue's figures now, kept if busy (and its lease end heaped)."""
        figures = group_queue_figures(state, key)
        before = self._busy.get(key)
        if figures[:2] == (0, 0):
            if before is not None:
                del self._busy[key]
            return _IDLE
        self._busy[key] = figures
        end_ms = figures[3]
        if end_ms is not None and (before is None or before[3] != end_ms):
            heapq.heappush(self._ends, (end_ms, *key))
        return figures

    def check(self, state: PartitionQueries) -> None:
        """Raise AssertionError unless every group queue is indexed by its topic (tests)."""
        for group, topic, _queue_id in state._groups:
            if group not in self._groups_of_topic.get(topic, ()):
                raise AssertionError(f"group {group!r} of topic {topic!r} not indexed")


def group_queue_figures(state: PartitionQueries, key: GroupQueueKey) -> QueueFigures:
    """One group queue's figures as ``queue_progress`` reads them: its backlog (lag, in
    flight at the state clock), the store time of the first message not done
    (from the consumer offset, at least the local first offset) and the earliest
    end of an in-flight lease."""
    group, topic, queue_id = key
    group_queue = state._groups[key]
    lag, in_flight = state.backlog(group, topic, queue_id)
    if lag == 0 and in_flight == 0:
        return _IDLE
    first = state.first_offset(topic, queue_id)
    waiting = max(group_queue.consumer_offset(), first)
    oldest_ms = None
    if lag > 0 and waiting < state.end_offset(topic, queue_id):
        oldest_ms = state.entry(topic, queue_id, waiting).store_timestamp_ms
    clock_ms = state.clock_ms
    ends = [
        lease.invisible_until_ms
        for lease in group_queue.leases.values()
        if lease.invisible_until_ms > clock_ms
    ]
    return (lag, in_flight, oldest_ms, min(ends, default=None))


ConsumerSums = tuple[int, int, int]
"""(group queues, lag messages, in-flight messages) of one (consumer group, topic)."""


class ConsumerTotals:
    """The consumer figures of several partitions (a node's led groups), summed per
    (consumer group, topic) from their tallies' changes: each change costs O(1)
    (and the distinct oldest store times of its (group, topic), when that moves)."""

    def __init__(self) -> None:
        # The state of each raft group whose tally's changes are summed, by group id.
        self._read: dict[int, PartitionQueries] = {}
        self._sums: dict[tuple[str, str], ConsumerSums] = {}
        # Per (group, topic) with something waiting: how many group queues have each
        # oldest store time, and the least of them.
        self._oldest: dict[tuple[str, str], dict[int, int]] = {}
        self._least_ms: dict[tuple[str, str], int] = {}

    def read(self, group_id: int, state: PartitionQueries | None) -> None:
        """Bring the sums up to date with raft group ``group_id``'s ``state`` (None: it is
        not led here or has no replica here). A state read before that is not the one
        given (no longer led, or replaced by a restore) is retired first: its tally's
        changes undo all it gave, and it keeps no tally."""
        before = self._read.get(group_id)
        if before is not None and before is not state:
            self.apply(before.retire_consumer_changes())
            del self._read[group_id]
        if state is not None:
            self.apply(state.consumer_changes())
            self._read[group_id] = state

    def group_ids(self) -> list[int]:
        """The raft groups whose states are summed."""
        return list(self._read)

    def apply(self, changes: Iterable[ConsumerChange]) -> None:
        """Add the changes of one partition's tally."""
        sums, oldest = self._sums, self._oldest
        moved: set[tuple[str, str]] = set()
        for change in changes:
            pair = (change.group, change.topic)
            queues, lag, in_flight = sums.get(pair, (0, 0, 0))
            queues += change.queues
            if queues:
                sums[pair] = (queues, lag + change.lag, in_flight + change.in_flight)
            else:
                del sums[pair]
            before, after = change.oldest_before_ms, change.oldest_after_ms
            if before == after:
                continue
            moved.add(pair)
            move_count(oldest.setdefault(pair, {}), before, after)
        for pair in moved:
            counts = oldest[pair]
            if counts:
                self._least_ms[pair] = min(counts)
            else:
                del oldest[pair]
                self._least_ms.pop(pair, None)

    def figures(self, now_ms: int) -> dict[tuple[str, str], tuple[int, int, int]]:
        """(lag messages, lag latency ms at ``now_ms``, in-flight messages) per
        (consumer group, topic) with a group queue: the latency is 0 without lag."""
        least = self._least_ms
        return {
            pair: (
                lag,
                0 if (oldest_ms := least.get(pair)) is None else max(0, now_ms - oldest_ms),
                in_flight,
            )
            for pair, (_queues, lag, in_flight) in self._sums.items()
        }
