"""The broker's protocol-agnostic data model.

Adapters convert wire messages to these types (``broker/grpc/convert.py``),
processors and ports speak only these. Times are epoch milliseconds
(``*_ms``), durations are milliseconds too.

Values built once or more per message (queue refs, messages, append
results, popped messages, deliveries, receipts) are named tuples: immutable
like the frozen dataclasses used for the rest, and built several times faster
(a frozen dataclass sets every field through ``object.__setattr__``). Change
one with ``_replace``.

PURE.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from protocol.positional import positional
from protocol.vocabulary import MessageType, Permission, Placement


class ClientKind(enum.IntEnum):
    """The kind of client (values match the v2 wire enum)."""

    UNSPECIFIED = 0
    PRODUCER = 1
    PUSH_CONSUMER = 2
    SIMPLE_CONSUMER = 3
    PULL_CONSUMER = 4
    LITE_PUSH_CONSUMER = 5
    LITE_SIMPLE_CONSUMER = 6

    @property
    def consumer(self) -> bool:
        """Whether this client receives messages."""
        return self not in (ClientKind.UNSPECIFIED, ClientKind.PRODUCER)


NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})
"""The user properties of a message that has none (shared, read-only)."""


class QueueRef(NamedTuple):
    """One queue of a topic."""

    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue as routing sees it."""

    queue_id: int
    permission: Permission = Permission.READ_WRITE


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic's metadata. Invariant: queue ids are 0..len(queues)-1."""

    name: str
    queues: tuple[QueueInfo, ...]
    message_types: frozenset[MessageType] = frozenset({MessageType.NORMAL})

    @property
    def queue_count(self) -> int:
        """Number of queues."""
        return len(self.queues)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a consumer group retries: attempts and the delay before each retry."""

    max_delivery_attempts: int = 17
    backoff_ms: tuple[int, ...] = (
        1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000,
        360_000, 420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000,
        3_600_000, 7_200_000,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group's metadata."""

    name: str
    fifo: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @property
    def dead_letter_topic(self) -> str:
        """Where messages go after ``retry.max_delivery_attempts`` failed deliveries."""
        return f"%DLQ%{self.name}"


class Message(NamedTuple):
    """A message as a producer sent it (and as storage keeps it)."""

    topic: str
    body: bytes
    message_id: str
    message_type: MessageType = MessageType.NORMAL
    tag: str | None = None
    keys: tuple[str, ...] = ()
    user_properties: Mapping[str, str] = NO_PROPERTIES
    message_group: str | None = None
    born_timestamp_ms: int = 0
    born_host: str = ""
    delivery_timestamp_ms: int | None = None
    queue_id: int | None = None  # the client's preferred queue, if it named one
    dead_letter_of: tuple[str, str] | None = None  # (original topic, message id) in a DLQ


new_message = positional(Message)  # one per sent and per delivered message


class SendResult(NamedTuple):
    """Where one sent (or committed) message landed in storage; ``offset`` is -1 unless
    it was queued. The broker's per-message answer (RocketMQ's ``SendResult``), not the
    result of a storage group's Append command."""

    queue: QueueRef
    offset: int
    store_timestamp_ms: int
    placement: Placement = Placement.QUEUED


@dataclass(frozen=True, slots=True)
class HalfMessage:
    """An unresolved transaction: its half message, where it waits and how often it was
    checked back (``check_count``; 0 before the first check)."""

    message: Message
    queue: QueueRef
    store_timestamp_ms: int
    check_count: int = 0

    @property
    def producer_group(self) -> str:
        """The producers that may resolve it: gRPC v2 producers are grouped by topic."""
        return self.queue.topic


class PoppedMessage(NamedTuple):
    """A message handed to a consumer group, invisible to it until ``invisible_until_ms``.

    ``generation`` changes on every pop and every invisibility change of this
    (group, queue, offset); only the newest generation may ack or renew.
    ``delivery_attempt`` is 1 on the first delivery.
    """

    message: Message
    queue: QueueRef
    offset: int
    store_timestamp_ms: int
    delivery_attempt: int
    generation: int
    invisible_until_ms: int


class Delivery(NamedTuple):
    """One message handed to a consumer, with the handle that finishes it."""

    popped: PoppedMessage
    receipt_handle: str


@dataclass(frozen=True, slots=True)
class PopResult:
    """What one pop of one queue saw.

    ``end_offset``: the queue's next append offset when the pop ran (for long
    polling). ``next_visible_ms``: when the earliest still-invisible message
    of this group becomes visible again, if any. ``leased``: how many messages
    of the queue the group holds leases on (-1: unknown); 0 means only the
    queue growing can bring the group messages of this queue.
    """

    messages: tuple[PoppedMessage, ...]
    end_offset: int
    next_visible_ms: int | None = None
    leased: int = -1


class Receipt(NamedTuple):
    """What a receipt handle proves: the bearer may ack or renew this delivery."""

    group: str
    queue: QueueRef
    offset: int
    generation: int
    delivery_attempt: int
    invisible_until_ms: int
    message_id: str


class PulledMessage(NamedTuple):
    """A message read by offset (a pull): no lease, no handle; any reader may read it."""

    message: Message
    queue: QueueRef
    offset: int
    store_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class QueueSlice:
    """What one offset read of one queue found.

    ``messages``: those matching the read's filter, in offset order.
    ``next_offset``: where the next read continues (past everything this read
    looked at, matched or skipped). ``first_offset`` / ``end_offset``: the
    queue's oldest offset and the offset of its next message, at the read.
    """

    messages: tuple[PulledMessage, ...]
    next_offset: int
    first_offset: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class QueueOffsets:
    """A queue's oldest offset, the offset its next message gets, and (when asked
    for a time) the first offset stored at or after that time (-1 when not asked)."""

    first_offset: int
    end_offset: int
    timestamp_offset: int = -1
