"""The ports: what the broker needs from the rest of the cluster.

Processors depend only on these Protocols. ``memory.py`` implements them in
process (tests, and a single-process dev broker); the Angelia-backed
implementations talk to the nameserver (metadata, routes) and the storage
nodes (queues, pop state) and live beside them.

Contracts every implementation keeps:

- Failures are :class:`broker.errors.BrokerError` (with a code from
  ``protocol/errors.py`` so ``retriable`` / ``refresh_route`` are meaningful);
  a missing topic or group is ``Reason.TOPIC_NOT_FOUND`` /
  ``Reason.CONSUMER_GROUP_NOT_FOUND``; a stale pop generation or an entry that
  is no longer in flight is ``Reason.INVALID_RECEIPT_HANDLE``.
- Time for invisibility is the store's: a pop or a change of invisibility
  decides ``invisible_until_ms`` from the store's clock (in the replicated
  store, from the time the leader proposes with the entry).
- ``append`` takes a whole batch for ONE queue and is one call (one proposal
  in the replicated store); the results are in the order of the batch.
- Pop state is per (consumer group, queue). A message popped and neither
  acked nor forwarded becomes visible again at ``invisible_until_ms`` and its
  next pop has ``delivery_attempt`` one higher. Each pop and each change of
  invisibility gives the delivery a new ``generation``; only the newest may
  ack or change it.
- Dead letters: ``pop`` returns deliveries with their attempt number and the
  consumer processor forwards those past ``group.retry.max_delivery_attempts``
  through ``forward_to_dead_letter``. An implementation may instead
  dead-letter such messages inside the pop itself (the partition state
  machine's ``Receive`` does, given ``max_delivery_attempts``); they then
  simply never come back from ``pop``.
- FIFO groups (``group.fifo`` on pop): a message is handed out only when every
  earlier message of its message group in that queue is acked (or was handed
  out in the same pop), so one message group is never consumed out of order.

Mapping to the storage partition commands (``storage_node/partition``):
``append`` -> one ``Append`` of the batch's records; ``pop`` -> ``Receive``
(``max_messages=batch_size``, ``invisible_duration_ms``,
``max_delivery_attempts``/``fifo`` from the GroupInfo,
``filter_expression`` and ``filter_kind`` of ``message_filter``); ``ack`` -> ``Ack``;
``change_invisible`` -> ``ChangeInvisibleDuration``;
``forward_to_dead_letter`` -> ``DeadLetter``; the (queue, offset, generation)
triple is the storage half of the receipt handle. Routing a queue to its
group's leader is the implementation's business: the broker itself serves
every queue of every topic.

Timed and transactional messages live in the store too, so no broker crash
loses one:

- ``append`` of a message with a future ``delivery_timestamp_ms`` holds it
  (``Placement.DELAYED``, offset -1) and queues it when due, never before; a
  TRANSACTION message is held as a half message (``Placement.HALF``) until
  ``end_transaction`` commits it (queued, or held if its delivery time is
  still ahead) or rolls it back (never visible). Storage mapping:
  ``end_transaction`` -> ``EndTransaction``.
- ``orphaned_transactions`` lists half messages stored before a time and not
  checked back since another (``scan_transactions`` of every raft group);
  ``note_transaction_checks`` counts one check-back for each and rolls back
  those checked more than ``check_max`` times (``NoteTransactionChecks``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from broker.domain import (
    GroupInfo,
    HalfMessage,
    Message,
    PopResult,
    PulledMessage,
    QueueOffsets,
    QueueRef,
    QueueSlice,
    SendResult,
    TopicInfo,
)
from broker.errors import BrokerError
from protocol.filters import MessageFilter
from protocol.vocabulary import MessageType

NAMESERVER_QUIET_AT_START_MS = 10_000
"""A broker's periodic nameserver calls (heartbeats, the check-back lease) log their
failures at INFO this long after it starts: roles start together, so a nameserver
not up yet is normal at first; one still away past this is warned of."""


class Clock(Protocol):
    """Wall-clock time in epoch milliseconds."""

    def now_ms(self) -> int:
        """The current time."""
        ...


class MetadataService(Protocol):
    """Topics and consumer groups (the nameserver's metadata)."""

    async def get_topic(self, name: str) -> TopicInfo:
        """The topic with its queues; raises TOPIC_NOT_FOUND."""
        ...

    async def get_topic_for_send(self, name: str, message_type: MessageType) -> TopicInfo:
        """Like :meth:`get_topic`, for a send of ``message_type``: an implementation
        that creates topics on first use creates a missing one for that type."""
        ...

    async def get_group(self, name: str, *, topics: Sequence[str] = ()) -> GroupInfo:
        """The consumer group; raises CONSUMER_GROUP_NOT_FOUND.

        ``topics``: what the asking client subscribes to. An implementation that
        creates groups on first use makes the group FIFO when one of them is a
        FIFO topic (the official clients do not say whether they want order).
        """
        ...


class MessageStore(Protocol):
    """Queues and their consumer state (the storage nodes)."""

    async def append(self, queue: QueueRef, messages: Sequence[Message]) -> list[SendResult]:
        """Append a batch to one queue, atomically and durably; one result per message."""
        ...

    async def pop(
        self,
        group: GroupInfo,
        queue: QueueRef,
        *,
        batch_size: int,
        invisible_ms: int,
        message_filter: MessageFilter,
    ) -> PopResult:
        """Hand up to ``batch_size`` visible messages of ``queue`` to ``group``.

        Messages the filter rejects are consumed silently (acked for the group).
        """
        ...

    async def ack(self, group: str, queue: QueueRef, offset: int, generation: int) -> None:
        """Finish a delivery; raises INVALID_RECEIPT_HANDLE for a stale generation."""
        ...

    async def ack_all(
        self, group: str, deliveries: Sequence[tuple[QueueRef, int, int]]
    ) -> list[BrokerError | None]:
        """Finish many deliveries, each (queue, offset, generation); one outcome each, in
        order: None when finished, the error (INVALID_RECEIPT_HANDLE...) otherwise."""
        ...

    async def change_invisible(
        self, group: str, queue: QueueRef, offset: int, generation: int, invisible_ms: int
    ) -> tuple[int, int]:
        """Hide a delivery for ``invisible_ms`` more from now; returns (generation, until_ms)."""
        ...

    async def forward_to_dead_letter(
        self, group: GroupInfo, queue: QueueRef, offset: int, generation: int
    ) -> SendResult:
        """Move a delivery to the group's dead-letter topic and finish it, as one step."""
        ...

    async def wait_for_append(
        self,
        topic: str,
        known_end_offsets: Mapping[int, int],
        timeout_ms: int,
        *,
        quiet: bool = False,
    ) -> bool:
        """Wait until a queue of ``topic`` grows past ``known_end_offsets``; False on timeout.

        ``quiet``: the caller's group holds no lease on these queues (every pop
        reported ``leased`` 0), so only growth can bring it messages; a store that
        otherwise looks again periodically (for leases ending) may wait the whole time.
        """
        ...

    async def get_consumer_offset(self, group: str, queue: QueueRef) -> int | None:
        """The group's committed offset: where its consumption goes on, past every
        message handed out, finished or still in flight, as RocketMQ's committed
        offset (None: the group never consumed the queue nor committed in it)."""
        ...

    async def end_transaction(
        self, queue: QueueRef, message_id: str, commit: bool
    ) -> SendResult | None:
        """Commit or roll back the half message ``message_id`` of ``queue``.

        After a commit: where the message went; after a rollback: None. Raises
        ``Reason.TRANSACTION_NOT_FOUND`` when no such half message is unresolved.
        """
        ...

    async def orphaned_transactions(
        self, stored_before_ms: int, checked_before_ms: int, limit: int
    ) -> list[HalfMessage]:
        """Up to ``limit`` unresolved half messages of the whole cluster stored before
        ``stored_before_ms`` and never checked back or last checked before
        ``checked_before_ms``, oldest first within each storage group."""
        ...

    async def note_transaction_checks(
        self, halves: Sequence[HalfMessage], check_max: int
    ) -> list[HalfMessage]:
        """Count one check-back of each half message; those then checked more than
        ``check_max`` times are rolled back and returned."""
        ...

    async def cancel_timer(self, queue: QueueRef, message_id: str) -> bool:
        """Drop the timed message ``message_id`` held in ``queue`` before it is due; False
        when none is held (it was queued at its time already, recalled, or never held)."""
        ...

    async def read(
        self, queue: QueueRef, offset: int, *, batch_size: int, message_filter: MessageFilter
    ) -> QueueSlice:
        """Up to ``batch_size`` messages of ``queue`` matching ``message_filter``, from
        ``offset`` on (a pull: no state changes). Raises OFFSET_OUT_OF_RANGE for an
        offset outside [first, end] of the queue."""
        ...

    async def queue_offsets(self, queue: QueueRef, timestamp_ms: int = -1) -> QueueOffsets:
        """The queue's first and end offsets and, for ``timestamp_ms`` >= 0, the first
        offset stored at or after it (the end offset if none)."""
        ...

    async def commit_consumer_offset(self, group: str, queue: QueueRef, offset: int) -> int:
        """A consumer's commit of ``group``'s position in ``queue`` (clamped to
        [first, end]; returned): pop consumption of the group resumes there; its
        messages in flight keep their receipt handles (RocketMQ's commitOffset)."""
        ...

    async def query_messages(
        self,
        topic: str,
        *,
        key: str = "",
        message_id: str = "",
        begin_ms: int = 0,
        end_ms: int,
        limit: int,
    ) -> list[PulledMessage]:
        """Up to ``limit`` messages of ``topic`` with key ``key`` or id ``message_id``
        (exactly one given) stored in ``[begin_ms, end_ms]``, oldest first (an
        operator's lookup: the storage's key index, ``storage.query_messages``)."""
        ...


class Coordination(Protocol):
    """Cluster-wide coordination through the nameserver: leases, and which brokers
    the producers of a group are connected to (from the brokers' heartbeats)."""

    async def try_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take or extend lease ``name`` for ``ttl_ms``; False while another owner holds it."""
        ...

    async def release_lease(self, name: str, owner: str) -> None:
        """Give the lease up if ``owner`` holds it (so a successor need not wait)."""
        ...

    async def brokers_with_producers(self, producer_group: str) -> list[str]:
        """Peer addresses of live brokers that report a producer of ``producer_group``."""
        ...


class BrokerPeers(Protocol):
    """Calls from one broker to another (Angelia)."""

    async def deliver_orphan_check(
        self, broker: str, half: HalfMessage, transaction_id: str
    ) -> bool:
        """Ask ``broker`` to send a check-back of ``half`` to one of its connected producers
        of the half message's group; whether one got it. Unreachable brokers answer False."""
        ...
