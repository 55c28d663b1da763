"""This node's replica of one raft group: the partition state machine the driver applies into.

SHELL (asyncio events wake long polls when a queue grows).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Literal

from raft.types import Entry, Snapshot
from storage_node.errors import OutOfOrderApply, StorageError
from storage_node.partition.commands import Command, Op
from storage_node.partition.config import PartitionConfig
from storage_node.partition.image import IMAGE_MAGIC, decode_image, encode_image
from storage_node.partition.queues import QueueId
from storage_node.partition.snapshot import restore
from storage_node.partition.state import PartitionState
from storage_node.store.base import BodyStore
from storage_node.store.memory import MemoryBodyStore

_log = logging.getLogger(__name__)

WAITERS_SWEEP_MIN = 1_024
"""Growth events a replica keeps before it first drops those nobody waits on."""


class Growth(asyncio.Event):
    """An :class:`asyncio.Event` that counts the tasks waiting on it (a replica drops
    the ones nobody waits on)."""

    waiting = 0

    async def wait(self) -> Literal[True]:
        """Wait until set (as :meth:`asyncio.Event.wait`), counted while waiting."""
        self.waiting += 1
        try:
            return await super().wait()
        finally:
            self.waiting -= 1


FLOOR_CHECK_ENTRIES = 4_096
"""A replica recomputes its truncate floor at least every this many applied entries
(besides at each snapshot and restore): the pass costs one look at every referenced entry."""

FLOOR_REFRESH_MS = 1_000
"""And this long after it applied anything (:func:`storage_node.housekeeping.run_floor_keeper`;
longer on a node whose pass over its queues is slow: ``FLOOR_SHARE`` there), so a quiet
group's floor follows its acks and does not pin the WAL's oldest segments."""


class GroupReplica:
    """This node's replica of one group: the raft state machine the driver applies into.

    ``applied_term`` is the term of the last command applied (the read barrier
    compares it with the current term). ``bodies`` is where the replica reads
    message bodies (APPEND entries) back: this node's WAL, plus the bodies a
    group image brought.

    Snapshots are group images (``partition.image``): the partition snapshot
    plus the referenced bodies that the holder's log cannot have. The log is
    compacted no further than the truncate floor this replica reports
    (:meth:`report_floor_to`), so every other referenced body stays in the WAL.

    The floor may lag the state (it is recomputed at each snapshot, each
    restore, every ``FLOOR_CHECK_ENTRIES`` applied entries and within
    ``FLOOR_REFRESH_MS`` of any apply, longer on a node whose pass over its
    queues takes long: ``housekeeping.FLOOR_SHARE``), which is safe:
    the oldest referenced index never decreases while entries are applied
    (a message leaves a queue, half or timer only to be dropped or to be
    named by another one), so a floor reported earlier is never above the
    current one.
    """

    def __init__(self, group_id: int, bodies: BodyStore | None = None) -> None:
        """An empty partition for ``group_id``; bodies in memory unless a store is given."""
        self.group_id = group_id
        self.state = PartitionState(PartitionConfig(group_id=group_id))
        self.bodies: BodyStore = bodies if bodies is not None else MemoryBodyStore()
        self.applied_term = 0
        self.applied_index = 0
        self.joining = False
        """Set when this replica started empty to join an existing group (a replica move):
        everything it holds then came from its peers, counted below."""
        self.joined_snapshot_bytes = 0
        """Bytes of the group images this joining replica restored from its leader."""
        self.joined_entry_bytes = 0
        """Bytes of the log entries this joining replica applied from its join until it
        was caught up (:meth:`caught_up`)."""
        self._catching_up = False
        self.joined_tier_bytes = 0
        """Bytes of the group's history in the tier when it restored the leader's image
        (the recorded objects): read from there, never copied from a peer."""
        self._waiters: dict[QueueId, Growth] = {}
        self._waiters_swept = 0  # how many were left by the last sweep (see grown)
        self._set_floor: Callable[[int, int | None], None] | None = None
        self._floor_checked_index = 0
        # Commands this node proposed, by the id of their entry bytes (held, so the id
        # is not reused): applying that very bytes object applies the command instead
        # of decoding it. Only commands equal to their own decoding are registered.
        self._proposed: dict[int, tuple[bytes, Command]] = {}

    def expect(self, data: bytes, command: Command) -> None:
        """``data`` (about to be proposed) is ``command`` encoded, and decodes back to it
        field for field: its apply here may skip the decoding. Undo with :meth:`forget`."""
        self._proposed[id(data)] = (data, command)

    def forget(self, data: bytes) -> None:
        """Drop what :meth:`expect` registered for ``data`` (its proposal has ended)."""
        found = self._proposed.get(id(data))
        if found is not None and found[0] is data:
            del self._proposed[id(data)]

    def apply(self, entry: Entry) -> object:
        """Apply one committed command; a rejected command's error is the result."""
        self.applied_term = entry.term
        self.applied_index = entry.index
        if self._catching_up:
            self.joined_entry_bytes += len(entry.data)
        proposed = self._proposed.pop(id(entry.data), None) if self._proposed else None
        try:
            if proposed is not None and proposed[0] is entry.data:
                result: object = self.state.apply(proposed[1], entry.index)
            else:
                result = self.state.apply_entry(entry.data, entry.index)
        except OutOfOrderApply:
            raise
        except StorageError as exc:
            result = exc
        else:
            if entry.data and entry.data[0] == Op.APPEND:
                self.bodies.keep_applied(self.group_id, entry.index, entry.data)
        if entry.index - self._floor_checked_index >= FLOOR_CHECK_ENTRIES:
            self._report_floor(self.state.min_log_index_referenced())
        for queue in self.state.grown_queues:
            waiter = self._waiters.pop(queue, None)
            if waiter is not None:
                waiter.set()
        return result

    def restore(self, snapshot: Snapshot) -> None:
        """Take a snapshot's state (a group image, or a bare partition snapshot)."""
        if snapshot.data[:4] == IMAGE_MAGIC:
            self.state, bodies = decode_image(snapshot.data)
            self.bodies.adopt(self.group_id, bodies)
            if self.joining:
                self._note_joined_image(snapshot, bodies)
        else:
            self.state = restore(snapshot.data)
        self.applied_term = snapshot.metadata.term
        self.applied_index = snapshot.metadata.index
        self._report_floor(self.state.min_log_index_referenced())
        for waiter in self._waiters.values():
            waiter.set()
        self._waiters.clear()

    def join(self) -> None:
        """This replica starts empty to join an existing group: count what it copies."""
        self.joining = self._catching_up = True

    def caught_up(self) -> None:
        """This joining replica is caught up (made a voter): entries applied from now on
        are the group's new traffic, no longer counted as its copy."""
        self._catching_up = False

    def _note_joined_image(self, snapshot: Snapshot, bodies: dict[int, bytes]) -> None:
        """Count and log what the leader's image brought a joining replica, against what
        the tier holds of the group's history."""
        tier = self.state.tier
        objects = [entry for queue in tier.queues() for entry in tier.objects(queue)]
        self.joined_snapshot_bytes += len(snapshot.data)
        self.joined_tier_bytes = sum(entry.size_bytes for entry in objects)
        _log.info(
            "joined from the leader's snapshot: copied %d bytes from a peer (%d log entries "
            "of the local window), %d bytes of history are read from the tier (%d objects)",
            len(snapshot.data),
            len(bodies),
            self.joined_tier_bytes,
            len(objects),
            extra={"group": self.group_id, "snapshot_index": snapshot.metadata.index},
        )

    def snapshot_data(self) -> bytes:
        """The group image as of the last applied entry, restorable on this node."""
        referenced = self.state.referenced_log_indexes()
        image = encode_image(self.state, self.bodies.bodies_to_carry(self.group_id, referenced))
        # The driver compacts right after taking a snapshot: report the floor as of it.
        self._report_floor(min(referenced, default=None))
        return image

    def report_floor_to(self, set_floor: Callable[[int, int | None], None]) -> None:
        """Keep the group's truncate floor through ``set_floor`` (``Driver.set_truncate_floor``).

        Reports the floor at once: until then the driver may compact freely.
        """
        self._set_floor = set_floor
        self._report_floor(self.state.min_log_index_referenced())

    def maybe_refresh_floor(self) -> None:
        """Report the truncate floor again if entries were applied since it was computed."""
        if self._set_floor is not None and self.applied_index != self._floor_checked_index:
            self._report_floor(self.state.min_log_index_referenced())

    def _floor_for(self, oldest_referenced: int | None) -> int:
        """Entries up to this index may go: just below the oldest one still referenced."""
        return self.state.applied_index if oldest_referenced is None else oldest_referenced - 1

    def _report_floor(self, oldest_referenced: int | None) -> None:
        self._floor_checked_index = self.applied_index
        if self._set_floor is not None:
            self._set_floor(self.group_id, self._floor_for(oldest_referenced))

    def snapshot_for_peer(self, snapshot: Snapshot) -> bytes:
        """``snapshot`` with every body its state references (the receiver has none)."""
        try:
            state, carried = decode_image(snapshot.data)
            missing = state.referenced_log_indexes() - carried.keys()
            carried.update(self.bodies.bodies_for_peer(self.group_id, missing))
        except StorageError as exc:
            _log.error("group %d: snapshot sent without its bodies: %s", self.group_id, exc)
            return snapshot.data
        return encode_image(state, carried)

    def grown(self, queue: QueueId) -> Growth:
        """An event set the next time ``queue`` gets new messages.

        Every receive asks for one before it looks at the queue, and most never
        wait on it (they found messages): so that a queue read once does not keep
        an event for good, once the table doubled since the last sweep the events
        nobody waits on are set (a receive that had not reached its wait yet then
        only looks at its queue once more) and dropped. Amortized O(1) a call.
        """
        waiter = self._waiters.get(queue)
        if waiter is None:
            if len(self._waiters) >= max(WAITERS_SWEEP_MIN, 2 * self._waiters_swept):
                self._sweep_waiters()
            waiter = self._waiters[queue] = Growth()
        return waiter

    def _sweep_waiters(self) -> None:
        for queue, waiter in list(self._waiters.items()):
            if not waiter.waiting:
                waiter.set()
                del self._waiters[queue]
        self._waiters_swept = len(self._waiters)
