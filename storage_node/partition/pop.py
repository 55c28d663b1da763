"""Pop consumption of one queue by one consumer group: leases, invisibility, FIFO.

Each offset of the queue is, for the group, in exactly one of three states:

- fresh: never handed out;
- leased: handed out and not yet acked; the lease says until when the
  message is invisible, which delivery attempt it is (1 on first delivery;
  0 for a grant handed back undelivered by a Release, visible at once, so
  the next grant counts the same attempt again) and its generation (the log
  index of the command that granted it);
- done: acked, dead-lettered, skipped by the filter, or below a committed
  offset.

Representation: offsets below ``cursor`` are leased or done; offsets at or
above it are fresh unless leased or in ``done_ahead`` (FIFO receives may
hand out messages past a fresh message whose message group is blocked).
Invariants: ``done_ahead`` and the leased offsets are disjoint; every offset
in ``done_ahead`` is >= ``cursor``; ``cursor`` never names a leased or done
offset while the queue has entries past it (see :meth:`GroupQueue.settle`).

A lease is valid for ack / change / dead-letter only while the state clock is
before ``invisible_until_ms`` and only with its current generation. Once the
clock reaches ``invisible_until_ms`` the message is visible again and the
next receive hands it out with attempt + 1, or dead-letters it when that
would exceed the group's maximum.

PURE.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from protocol.filters import TagFilter
from storage_node.partition.commands import InitialPosition
from storage_node.partition.queues import QueueEntry, QueueIndex
from storage_node.partition.wire import as_int, as_list, as_str


class Lease(NamedTuple):
    """One delivery of one message to a group, invisible until ``invisible_until_ms``.

    Immutable; a named tuple, built in one step (one per delivered message).
    """

    generation: int
    invisible_until_ms: int
    attempt: int
    message_group: str = ""

    def is_invisible(self, clock_ms: int) -> bool:
        """Whether the message is still hidden from the group at ``clock_ms``."""
        return clock_ms < self.invisible_until_ms


_EXPIRY_SLACK = 64
"""Stale expiry items allowed beyond one per lease before the heap is rebuilt."""


class Grant(NamedTuple):
    """A message handed out by a receive: its offset and its new lease (a named tuple)."""

    queue_offset: int
    lease: Lease


@dataclass(frozen=True, slots=True)
class Expiry:
    """A message taken out of the group's queue for the dead-letter queue."""

    queue_offset: int
    attempts: int


@dataclass(frozen=True, slots=True)
class ReceivePlan:
    """What one receive did: messages granted and messages to dead-letter."""

    grants: tuple[Grant, ...]
    dead_letters: tuple[Expiry, ...]


class FilterVerdicts(NamedTuple):
    """A property filter's verdicts on a group's fresh offsets, decided before a receive.

    Fresh offsets below ``end`` were evaluated: those in ``unmatched`` do not
    match, the others do; offsets at or past ``end`` were not evaluated.
    """

    end: int
    unmatched: frozenset[int]


_NO_LEASES: dict[int, Lease] = {}
_NO_OFFSETS: set[int] = set()
_NO_EXPIRY: list[tuple[int, int, int]] = []
"""Shared empty containers: a group queue with no lease in flight and nothing done
ahead of its cursor (the usual state of a queue consumed to its end) holds these
instead of its own, which cost 336 bytes (an empty set alone is 216). They stay
empty: every write to a group queue's leases, done_ahead or expiry heap goes
through a method that first gives it its own container (``_leases_to_write``,
``_mark_done``, ``set_lease``), and one emptied goes back to the shared one."""


class GroupQueue:
    """A consumer group's consumption state of one queue (see the module docstring).

    Slotted, and holding the shared empty containers while it has no leases and
    nothing done ahead: a node keeps one per (consumer group, queue) ever received
    from, so its size is multiplied by the queues of the node."""

    __slots__ = ("_expiry", "cursor", "done_ahead", "last_attempt", "leases")

    def __init__(self, cursor: int = 0) -> None:
        self.cursor = cursor
        self.leases: dict[int, Lease] = _NO_LEASES
        self.done_ahead: set[int] = _NO_OFFSETS
        # A heap of (invisible until, offset, generation), one item per lease ever set
        # (set_lease): every current lease has its item, and an item whose lease was
        # replaced or finished is stale, dropped when it reaches the top, at a
        # rebuild, or all at once when the last lease finishes. A receive finds the
        # expired leases here instead of looking at every lease (with many messages
        # in flight, most of a receive's work). Derived, not snapshotted.
        self._expiry: list[tuple[int, int, int]] = _NO_EXPIRY
        # The latest receive that named an attempt id: (attempt id, generation, offsets).
        self.last_attempt: tuple[str, int, tuple[int, ...]] = ("", 0, ())

    @classmethod
    def starting(
        cls, position: InitialPosition, queue: QueueIndex, first_offset: int | None = None
    ) -> GroupQueue:
        """The state of a group that never consumed ``queue``: EARLIEST starts at
        ``first_offset`` (the queue's first readable offset, in the tier if it holds
        older messages; default: the local first offset)."""
        if position is InitialPosition.LATEST:
            return cls(queue.end_offset)
        return cls(queue.first_offset if first_offset is None else first_offset)

    def consumed(self) -> bool:
        """Whether nothing is in flight or done ahead of the cursor (such a group queue
        is kept as its cursor alone: ``partition.group_queues``)."""
        return not self.leases and not self.done_ahead

    def consumer_offset(self) -> int:
        """The offset below which every message is done for the group."""
        if not self.leases:
            return self.cursor
        return min(self.cursor, *self.leases)

    def settle(self, end_offset: int) -> None:
        """Move ``cursor`` past leased and done offsets, keeping the invariants."""
        while self.cursor < end_offset:
            if self.cursor in self.done_ahead:
                self.done_ahead.discard(self.cursor)
                if not self.done_ahead:
                    self.done_ahead = _NO_OFFSETS
            elif self.cursor not in self.leases:
                return
            self.cursor += 1

    def set_lease(self, queue_offset: int, lease: Lease) -> None:
        """Make ``lease`` the offset's lease (every lease is set through here)."""
        if self.leases is _NO_LEASES:
            self.leases = {}
        self.leases[queue_offset] = lease
        expiry = self._expiry
        if expiry is _NO_EXPIRY:
            expiry = self._expiry = []
        heapq.heappush(expiry, (lease.invisible_until_ms, queue_offset, lease.generation))
        if len(expiry) > 2 * len(self.leases) + _EXPIRY_SLACK:
            self._rebuild_expiry()

    def _rebuild_expiry(self) -> None:
        """The expiry heap of the current leases only."""
        if not self.leases:
            self._expiry = _NO_EXPIRY
            return
        self._expiry = [
            (lease.invisible_until_ms, offset, lease.generation)
            for offset, lease in self.leases.items()
        ]
        heapq.heapify(self._expiry)

    def _is_current(self, item: tuple[int, int, int]) -> bool:
        lease = self.leases.get(item[1])
        return (
            lease is not None
            and lease.generation == item[2]
            and lease.invisible_until_ms == item[0]
        )

    def _expired(self, clock_ms: int) -> list[int]:
        """The leased offsets visible again at ``clock_ms`` (their leases' ends have
        passed), ascending: what looking at every lease would find."""
        expiry = self._expiry
        found: set[tuple[int, int, int]] = set()
        while expiry and expiry[0][0] <= clock_ms:
            item = heapq.heappop(expiry)
            if self._is_current(item):
                found.add(item)
        for item in found:  # still leased: they stay until granted again or finished
            heapq.heappush(expiry, item)
        return sorted(item[1] for item in found)

    def _any_expired(self, clock_ms: int) -> bool:
        """Whether a lease ended by ``clock_ms`` (stale items at the top are dropped)."""
        expiry = self._expiry
        while expiry and not self._is_current(expiry[0]):
            heapq.heappop(expiry)
        return bool(expiry) and expiry[0][0] <= clock_ms

    def valid_lease(self, queue_offset: int, generation: int, clock_ms: int) -> Lease | None:
        """The lease a handle names, if it is current and unexpired at ``clock_ms``."""
        lease = self.leases.get(queue_offset)
        if lease is None or lease.generation != generation or not lease.is_invisible(clock_ms):
            return None
        return lease

    def finish(self, queue_offset: int, end_offset: int) -> None:
        """Mark an offset done (acked, dead-lettered, filtered out)."""
        self._finish_quietly(queue_offset)
        self.settle(end_offset)

    def trim(self, first_offset: int, end_offset: int) -> None:
        """The queue's offsets below ``first_offset`` are gone: drop what named them."""
        for offset in [o for o in self.leases if o < first_offset]:
            self._drop_lease(offset)
        if self.cursor < first_offset:
            self.done_ahead = _offsets(o for o in self.done_ahead if o >= first_offset)
            self.cursor = first_offset
        self.settle(end_offset)

    def reset(self, offset: int) -> None:
        """Every offset below ``offset`` is done, every other fresh; leases are dropped."""
        self.cursor = offset
        self.leases = _NO_LEASES
        self._expiry = _NO_EXPIRY
        self.done_ahead = _NO_OFFSETS
        self.last_attempt = ("", 0, ())

    def commit(self, offset: int, end_offset: int) -> None:
        """A consumer's commit: pop resumes at ``offset``; leases are kept.

        Offsets below ``offset`` become done unless leased; offsets from
        ``offset`` up to the old cursor become fresh unless leased; offsets
        at or past the old cursor keep their state. A leased offset stays
        leased wherever it lies, so its handle still acks and it comes back
        when its invisibility ends (RocketMQ keeps pop's checkpoints across a
        commit). The cursor then settles past leased and done offsets.
        """
        if offset >= self.cursor:
            self.done_ahead = _offsets(o for o in self.done_ahead if o >= offset)
        self.cursor = offset
        self.settle(end_offset)

    def committed_offset(self) -> int:
        """Where the group's consumption goes on: the lowest fresh offset (the cursor).

        RocketMQ's committed offset of a pop group: past every message popped,
        acked or still in flight (in-flight ones come back by their leases)."""
        return self.cursor

    def repeat_attempt(self, attempt_id: str, clock_ms: int) -> tuple[Grant, ...]:
        """The grants of the latest receive with ``attempt_id`` still in flight, if any."""
        last_id, generation, offsets = self.last_attempt
        if not attempt_id or attempt_id != last_id:
            return ()
        return tuple(
            Grant(offset, lease)
            for offset in offsets
            if (lease := self.valid_lease(offset, generation, clock_ms)) is not None
        )

    def check_invariants(self, first_offset: int, end_offset: int) -> None:
        """Raise AssertionError if the representation invariants do not hold."""
        if not first_offset <= self.cursor <= end_offset:
            raise AssertionError(f"cursor {self.cursor} outside [{first_offset}, {end_offset}]")
        if self.done_ahead & self.leases.keys():
            raise AssertionError(
                f"offsets both leased and done: {self.done_ahead & self.leases.keys()}"
            )
        if any(o < self.cursor or o >= end_offset for o in self.done_ahead):
            raise AssertionError(f"done_ahead {sorted(self.done_ahead)} outside [cursor, end)")
        if any(o < first_offset or o >= end_offset for o in self.leases):
            raise AssertionError(f"leases {sorted(self.leases)} outside the queue")
        if self.cursor < end_offset and (
            self.cursor in self.leases or self.cursor in self.done_ahead
        ):
            raise AssertionError(f"cursor {self.cursor} not settled")
        if any(lease.attempt < 0 for lease in self.leases.values()):
            raise AssertionError("a lease with attempt < 0")
        leased = self.leases.items()
        items = {(lease.invisible_until_ms, o, lease.generation) for o, lease in leased}
        if not items <= set(self._expiry):
            raise AssertionError("a lease missing from the expiry heap (set outside set_lease)")
        if _NO_LEASES or _NO_OFFSETS or _NO_EXPIRY:
            raise AssertionError("a shared empty container was written to")

    def _fresh(self, end_offset: int, scan_max: int) -> Iterator[int]:
        """Fresh offsets from the cursor, looking at no more than ``scan_max`` offsets."""
        offset = self.cursor
        stop = min(end_offset, self.cursor + scan_max)
        while offset < stop:
            if offset not in self.leases and offset not in self.done_ahead:
                yield offset
            offset += 1

    def has_candidates(self, end_offset: int, clock_ms: int, scan_max: int) -> bool:
        """Whether a receive at ``clock_ms`` would look at any message at all: an
        expired lease or a fresh offset within ``scan_max`` of the cursor."""
        if self._any_expired(clock_ms):
            return True
        return next(self._fresh(end_offset, scan_max), None) is not None

    def receive(
        self,
        queue: QueueIndex,
        *,
        clock_ms: int,
        generation: int,
        max_messages: int,
        invisible_duration_ms: int,
        max_delivery_attempts: int,
        tag_filter: TagFilter,
        fifo: bool,
        scan_max: int,
        verdicts: FilterVerdicts | None = None,
        tier_entries: Mapping[int, QueueEntry] | None = None,
    ) -> ReceivePlan:
        """Hand out up to ``max_messages``, in offset order, and update the leases.

        Candidates are the expired leases and the fresh offsets (at most
        ``scan_max`` offsets looked at past the cursor), merged in offset
        order. An expired lease at its last attempt is dead-lettered; a
        message not matching the filter becomes done; with ``fifo``, a message
        whose message group has a message in flight (or handed out earlier in
        this receive) is skipped and stays as it is. With ``verdicts`` (a
        property filter evaluated before the receive), a fresh offset at or past
        ``verdicts.end`` stays fresh and one in ``verdicts.unmatched`` is done.

        Offsets below the queue's local first offset (only the tier holds them) take
        their entries from ``tier_entries``; one not there stays as it is. Such a
        message is never dead-lettered here (a dead-letter copy names a local log
        entry): past its last attempt it is handed out again, attempts counting on.
        """
        local_first = queue.first_offset
        tier = tier_entries or {}
        end_offset = queue.end_offset
        expired = self._expired(clock_ms)
        blocked: set[str] = set()
        if fifo:
            blocked = {
                lease.message_group
                for lease in self.leases.values()
                if lease.message_group and lease.is_invisible(clock_ms)
            }
        grants: list[Grant] = []
        dead_letters: list[Expiry] = []
        until_ms = clock_ms + invisible_duration_ms
        match_all = tag_filter.matches_all
        if verdicts is not None:
            end_offset_fresh = min(end_offset, max(verdicts.end, self.cursor))
            fresh = self._fresh(end_offset_fresh, scan_max)
            unmatched = verdicts.unmatched
        else:
            fresh = self._fresh(end_offset, scan_max)
            unmatched = frozenset()
        # Usually nothing has expired: the fresh offsets alone, without a merge per offset.
        candidates = heapq.merge(expired, fresh) if expired else fresh
        for offset in candidates:
            if len(grants) >= max_messages:
                break
            in_tier = offset < local_first
            tier_entry = tier.get(offset) if in_tier else None
            if in_tier and tier_entry is None:
                continue
            previous = self.leases.get(offset)
            attempt = 1 if previous is None else previous.attempt + 1
            if previous is not None and attempt > max_delivery_attempts and not in_tier:
                dead_letters.append(Expiry(offset, previous.attempt))
                self._finish_quietly(offset)
                continue
            if previous is None and offset in unmatched:
                self._finish_quietly(offset)
                continue
            entry = queue.at(offset) if tier_entry is None else tier_entry
            if not match_all and not tag_filter.matches(entry.tag):
                self._finish_quietly(offset)
                continue
            group = entry.message_group
            if fifo and group and group in blocked:
                continue
            lease = Lease(generation, until_ms, attempt, group)
            self.set_lease(offset, lease)
            grants.append(Grant(offset, lease))
            if fifo and group:
                blocked.add(group)
        self.settle(end_offset)
        return ReceivePlan(tuple(grants), tuple(dead_letters))

    def finish_current(self, queue_offset: int, generation: int, clock_ms: int) -> bool:
        """Finish the offset if ``generation`` names its current, unexpired lease (an
        ack), without settling: the caller calls :meth:`settle` once it is done.
        False (and nothing changed) if the lease is gone, superseded or expired."""
        lease = self.leases.get(queue_offset)
        if lease is None or lease.generation != generation or not lease.is_invisible(clock_ms):
            return False
        self._finish_quietly(queue_offset)
        return True

    def _finish_quietly(self, queue_offset: int) -> None:
        """:meth:`finish` without settling (the caller settles once at the end)."""
        self._drop_lease(queue_offset)
        if queue_offset >= self.cursor:
            if self.done_ahead is _NO_OFFSETS:
                self.done_ahead = set()
            self.done_ahead.add(queue_offset)

    def _drop_lease(self, queue_offset: int) -> None:
        """Forget the offset's lease, if any; the last one gone gives back the
        group queue's own lease table and expiry heap (every item is stale then)."""
        leases = self.leases
        if leases.pop(queue_offset, None) is not None and not leases:
            self.leases = _NO_LEASES
            self._expiry = _NO_EXPIRY

    def to_wire(self) -> list[object]:
        """Snapshot form: cursor, sorted leases, sorted done_ahead."""
        return [
            self.cursor,
            [
                [o, lease.generation, lease.invisible_until_ms, lease.attempt, lease.message_group]
                for o, lease in sorted(self.leases.items())
            ],
            sorted(self.done_ahead),
            [self.last_attempt[0], self.last_attempt[1], list(self.last_attempt[2])],
        ]

    @classmethod
    def from_wire(cls, data: object) -> GroupQueue:
        """Inverse of :meth:`to_wire`."""
        cursor, leases, done_ahead, last = as_list(data, "group queue", 4)
        state = cls(as_int(cursor, "cursor"))
        table: dict[int, Lease] = {}
        for item in as_list(leases, "leases"):
            offset, generation, until, attempt, group = as_list(item, "lease", 5)
            table[as_int(offset, "lease offset")] = Lease(
                as_int(generation, "generation"),
                as_int(until, "invisible until"),
                as_int(attempt, "attempt"),
                as_str(group, "message group"),
            )
        state.leases = table or _NO_LEASES
        state._rebuild_expiry()
        state.done_ahead = _offsets(as_int(o, "done offset") for o in as_list(done_ahead, "done"))
        attempt_id, generation, offsets = as_list(last, "last attempt", 3)
        state.last_attempt = (
            as_str(attempt_id, "attempt id"),
            as_int(generation, "attempt generation"),
            tuple(as_int(o, "attempt offset") for o in as_list(offsets, "attempt offsets")),
        )
        return state

    def fresh_offsets(self, end_offset: int, scan_max: int) -> Iterator[int]:
        """The fresh offsets a receive would look at, in order: from the cursor, no
        more than ``scan_max`` offsets looked at (expired leases aside)."""
        return self._fresh(end_offset, scan_max)


def _offsets(offsets: Iterable[int]) -> set[int]:
    """A group queue's own set of ``offsets``, or the shared empty one if there are none."""
    return set(offsets) or _NO_OFFSETS
