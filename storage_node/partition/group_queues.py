"""The group queues of a partition: each (consumer group, topic, queue id)'s pop state.

A node keeps one per (consumer group, queue) ever received from or committed
in, so at a million queues read by a simple consumer their size is multiplied
by the queues. Almost all of them are consumed to their end: no message in
flight, nothing done ahead of the cursor. Such a group queue is kept as just its
cursor (an int: nothing for one below 257, 28 bytes above) instead of a
:class:`GroupQueue` object (72 bytes), and made an object again when apply
changes it. And none has a key of its own: they are kept by group, then under
their queue's key tuple, the one the queue table keeps (``QueueIndex.key``);
a (group, topic, queue id) tuple each was 64 bytes.

Reading and writing differ:

- :meth:`GroupQueues.get`, ``[]`` and :meth:`GroupQueues.items` are for reading:
  a group queue kept as its cursor is given as a new object that is not kept,
  so a change to it would be lost;
- :meth:`GroupQueues.writable` (apply only) makes it an object that is kept and
  notes it; :meth:`GroupQueues.compact`, at the end of each apply, turns the
  noted ones that are consumed to their end back into their cursors.

So between applies every group queue consumed to its end is a cursor, on every
replica alike, and a restore keeps that too (:meth:`GroupQueues.restore`). What a
cursor drops is not state: its leases, done offsets and expiry heap are empty,
and its latest attempt id names no lease (a repeated receive with it finds no
valid lease either way), so a snapshot writes it with no attempt.

PURE.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from storage_node.partition.pop import GroupQueue
from storage_node.partition.queues import QueueId

GroupQueueKey = tuple[str, str, int]
"""(consumer group, topic, queue id)."""


class GroupQueues:
    """Group queues by key, those consumed to their end kept as their cursors.

    Kept by group, then by the queue's key: the queue table's own (topic, queue id)
    tuple (``QueueIndex.key``) where the queue exists, so a group queue adds no key
    of its own (a (group, topic, queue id) tuple was 64 bytes)."""

    __slots__ = ("_table", "_written")

    def __init__(self) -> None:
        self._table: dict[str, dict[QueueId, GroupQueue | int]] = {}
        self._written: set[GroupQueueKey] = set()  # made objects since the last compact

    def _found(self, key: GroupQueueKey) -> GroupQueue | int | None:
        queues = self._table.get(key[0])
        return None if queues is None else queues.get((key[1], key[2]))

    def get(self, key: GroupQueueKey) -> GroupQueue | None:
        """The group queue to read (None if none); not kept if it is a cursor."""
        found = self._found(key)
        if isinstance(found, int):
            return GroupQueue(found)
        return found

    def __getitem__(self, key: GroupQueueKey) -> GroupQueue:
        """As :meth:`get`; KeyError if none."""
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def writable(self, key: GroupQueueKey) -> GroupQueue | None:
        """The group queue to change (None if none): an object, kept until the next
        :meth:`compact`."""
        queues = self._table.get(key[0])
        if queues is None:
            return None
        queue = (key[1], key[2])
        found = queues.get(queue)
        if found is None:
            return None
        if isinstance(found, int):
            found = queues[queue] = GroupQueue(found)  # the kept key stays
        self._written.add(key)
        return found

    def add(self, group: str, queue: QueueId, group_queue: GroupQueue) -> None:
        """Keep a new group queue of ``group`` in ``queue`` (the queue table's key, if the
        queue exists); apply: compacted with the others written."""
        self._queues_of(group)[queue] = group_queue
        self._written.add((group, *queue))

    def restore(self, group: str, queue: QueueId, group_queue: GroupQueue) -> None:
        """Keep a group queue read from a snapshot, as its cursor if consumed to its end."""
        self._queues_of(group)[queue] = (
            group_queue.cursor if group_queue.consumed() else group_queue
        )

    def _queues_of(self, group: str) -> dict[QueueId, GroupQueue | int]:
        queues = self._table.get(group)
        if queues is None:
            queues = self._table[sys.intern(group)] = {}
        return queues

    def __delitem__(self, key: GroupQueueKey) -> None:
        queues = self._table[key[0]]
        del queues[(key[1], key[2])]
        if not queues:
            del self._table[key[0]]
        self._written.discard(key)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 3:
            return False
        queues = self._table.get(key[0])
        return queues is not None and (key[1], key[2]) in queues

    def __iter__(self) -> Iterator[GroupQueueKey]:
        for group, queues in self._table.items():
            for topic, queue_id in queues:
                yield (group, topic, queue_id)

    def __len__(self) -> int:
        return sum(len(queues) for queues in self._table.values())

    def groups_of(self, queue: QueueId) -> list[str]:
        """The groups with a group queue of ``queue`` (a look per group, not per key)."""
        return [group for group, queues in self._table.items() if queue in queues]

    def items(self) -> Iterator[tuple[GroupQueueKey, GroupQueue]]:
        """Every (key, group queue), to read (see :meth:`get`)."""
        for group, queues in self._table.items():
            for (topic, queue_id), found in queues.items():
                group_queue = GroupQueue(found) if isinstance(found, int) else found
                yield (group, topic, queue_id), group_queue

    def compact(self) -> None:
        """The group queues written since the last call that are consumed to their end
        become their cursors (apply calls it after each command)."""
        for key in self._written:
            queues = self._table.get(key[0])
            if queues is None:
                continue
            queue = (key[1], key[2])
            found = queues.get(queue)
            if isinstance(found, GroupQueue) and found.consumed():
                queues[queue] = found.cursor
        self._written.clear()

    def check_invariants(self) -> None:
        """Raise AssertionError if a group queue consumed to its end is kept as an object
        though not written since the last :meth:`compact` (between applies: none)."""
        for key, found in self.items():
            if found.consumed() and key not in self._written and self._found(key) is found:
                raise AssertionError(f"group queue {key} consumed to its end kept as an object")

    def objects(self) -> int:
        """How many group queues are kept as objects (tests)."""
        return sum(
            isinstance(found, GroupQueue)
            for queues in self._table.values()
            for found in queues.values()
        )
