"""The group queues of a partition: each (consumer group, topic, queue id)'s pop state.

A node keeps one per (consumer group, queue) ever received from or committed
in, so at a million queues read by a simple consumer their size is multiplied
by the queues. Almost all of them are consumed to their end: no message in
flight, nothing done ahead of the cursor. Such a group queue is kept as just its
cursor (an int: nothing for one below 257, 28 bytes above) instead of a
:class:`GroupQueue` object (72 bytes), and made an object again when apply
changes it.

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

from collections.abc import Iterator

from storage_node.partition.pop import GroupQueue

GroupQueueKey = tuple[str, str, int]
"""(consumer group, topic, queue id)."""


class GroupQueues:
    """Group queues by key, those consumed to their end kept as their cursors."""

    __slots__ = ("_table", "_written")

    def __init__(self) -> None:
        self._table: dict[GroupQueueKey, GroupQueue | int] = {}
        self._written: set[GroupQueueKey] = set()  # made objects since the last compact

    def get(self, key: GroupQueueKey) -> GroupQueue | None:
        """The group queue to read (None if none); not kept if it is a cursor."""
        found = self._table.get(key)
        if isinstance(found, int):
            return GroupQueue(found)
        return found

    def __getitem__(self, key: GroupQueueKey) -> GroupQueue:
        """As :meth:`get`; KeyError if none."""
        found = self._table[key]
        return GroupQueue(found) if isinstance(found, int) else found

    def writable(self, key: GroupQueueKey) -> GroupQueue | None:
        """The group queue to change (None if none): an object, kept until the next
        :meth:`compact`."""
        found = self._table.get(key)
        if found is None:
            return None
        if isinstance(found, int):
            found = self._table[key] = GroupQueue(found)
        self._written.add(key)
        return found

    def __setitem__(self, key: GroupQueueKey, group_queue: GroupQueue) -> None:
        """Keep a new group queue (apply: compacted with the others written)."""
        self._table[key] = group_queue
        self._written.add(key)

    def restore(self, key: GroupQueueKey, group_queue: GroupQueue) -> None:
        """Keep a group queue read from a snapshot, as its cursor if consumed to its end."""
        self._table[key] = group_queue.cursor if group_queue.consumed() else group_queue

    def __delitem__(self, key: GroupQueueKey) -> None:
        del self._table[key]
        self._written.discard(key)

    def __contains__(self, key: object) -> bool:
        return key in self._table

    def __iter__(self) -> Iterator[GroupQueueKey]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def items(self) -> Iterator[tuple[GroupQueueKey, GroupQueue]]:
        """Every (key, group queue), to read (see :meth:`get`)."""
        for key, found in self._table.items():
            yield key, GroupQueue(found) if isinstance(found, int) else found

    def compact(self) -> None:
        """The group queues written since the last call that are consumed to their end
        become their cursors (apply calls it after each command)."""
        table = self._table
        for key in self._written:
            found = table.get(key)
            if isinstance(found, GroupQueue) and found.consumed():
                table[key] = found.cursor
        self._written.clear()

    def check_invariants(self) -> None:
        """Raise AssertionError if a group queue consumed to its end is kept as an object
        though not written since the last :meth:`compact` (between applies: none)."""
        for key, found in self._table.items():
            if isinstance(found, GroupQueue) and found.consumed() and key not in self._written:
                raise AssertionError(f"group queue {key} consumed to its end kept as an object")

    def objects(self) -> int:
        """How many group queues are kept as objects (tests)."""
        return sum(1 for found in self._table.values() if isinstance(found, GroupQueue))
