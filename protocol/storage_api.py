"""The request and response types of the storage node's Angelia API (``storage.*``).

Brokers (and tests, benches) call a storage node with these; the service
declaration that names the methods lives in ``storage_node.service``.

Conventions:

- A queue is ``(topic, queue_id)``; the caller routes it to a raft group with
  ``protocol.routing`` and calls that group's leader. A replica that does not
  lead the group answers NOT_LEADER with the leader's address as the error's
  leader hint (empty when unknown); an unknown or unhosted group answers
  GROUP_NOT_HOSTED.
- Message records cross the wire as :class:`Message` (lists and dicts instead
  of the tuples of ``protocol.records.MessageRecord``); :func:`to_record` and
  :func:`from_record` convert.
- The store timestamp of appended messages is the leader's clock when it
  proposed the append; a caller cannot set it.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from protocol.errors import WireError
from protocol.message_objects import QueueManifest
from protocol.positional import positional
from protocol.records import MESSAGE_TYPES, MessageRecord
from protocol.value_types import value_type
from protocol.vocabulary import MessageType

_set_attribute = object.__setattr__
_NO_KEYS: list[str] = []
_NO_PROPERTIES: dict[str, str] = {}
_new_record = positional(MessageRecord)


@dataclass(frozen=True, init=False)
class Message:
    """One message record as it crosses the wire (see ``protocol.records.MessageRecord``).

    Immutable like every type here, but without ``__slots__`` and with its own
    ``__init__`` (same signature as the generated one; ``keys`` and
    ``properties`` default to a new list and dict): one is built per message
    on every hop, and setting the whole ``__dict__`` at once costs a third of
    a frozen dataclass's ``object.__setattr__`` per field.
    """

    topic: str
    queue_id: int
    message_id: str
    body: bytes
    tag: str = ""
    keys: list[str] = field(default_factory=list)
    message_group: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    born_timestamp_ms: int = 0
    delivery_timestamp_ms: int = 0
    message_type: int = int(MessageType.NORMAL)
    born_host: str = ""
    dead_letter_topic: str = ""
    dead_letter_message_id: str = ""

    def __init__(
        self,
        topic: str,
        queue_id: int,
        message_id: str,
        body: bytes,
        tag: str = "",
        keys: list[str] = _NO_KEYS,
        message_group: str = "",
        properties: dict[str, str] = _NO_PROPERTIES,
        born_timestamp_ms: int = 0,
        delivery_timestamp_ms: int = 0,
        message_type: int = int(MessageType.NORMAL),
        born_host: str = "",
        dead_letter_topic: str = "",
        dead_letter_message_id: str = "",
    ) -> None:
        """Every field as given (the defaults above; each message its own list and dict)."""
        _set_attribute(
            self,
            "__dict__",
            {
                "topic": topic,
                "queue_id": queue_id,
                "message_id": message_id,
                "body": body,
                "tag": tag,
                "keys": [] if keys is _NO_KEYS else keys,
                "message_group": message_group,
                "properties": {} if properties is _NO_PROPERTIES else properties,
                "born_timestamp_ms": born_timestamp_ms,
                "delivery_timestamp_ms": delivery_timestamp_ms,
                "message_type": message_type,
                "born_host": born_host,
                "dead_letter_topic": dead_letter_topic,
                "dead_letter_message_id": dead_letter_message_id,
            },
        )


def to_record(message: Message) -> MessageRecord:
    """The stored form of a wire message; raises ValueError for an unknown message type."""
    kind = message.message_type
    message_type = MESSAGE_TYPES.get(kind) if type(kind) is int else None
    if message_type is None:
        message_type = MessageType(kind)  # anything but an int: as MessageType decides
    properties = message.properties
    return _new_record(
        (
            message.topic,
            message.queue_id,
            message.message_id,
            message.body,
            message.tag,
            tuple(message.keys),
            message.message_group,
            ()
            if type(properties) is dict and not properties
            else tuple(sorted(properties.items())),
            message.born_timestamp_ms,
            message.delivery_timestamp_ms,
            message_type,
            message.born_host,
            message.dead_letter_topic,
            message.dead_letter_message_id,
        ),
    )


def from_record(record: MessageRecord) -> Message:
    """The wire form of a stored record (the two share their field order)."""
    return Message(
        *record[:5],
        list(record.keys),
        record.message_group,
        dict(record.properties),
        record.born_timestamp_ms,
        record.delivery_timestamp_ms,
        int(record.message_type),
        *record[11:],
    )


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message at ``queue_offset`` of its queue, stored at ``store_timestamp_ms``."""

    queue_offset: int
    store_timestamp_ms: int
    message: Message


class ReceiptHandle(NamedTuple):
    """Which delivery of which message (the storage half of a client receipt handle).

    ``generation`` is the log index of the command that granted the lease (a
    receive, or a change of invisible duration); a later grant makes older
    handles stale. The consumer group is named by the request or command that
    presents the handle. The same handle travels in this API and in a storage
    group's log (``storage_node.partition.commands``). A named tuple: one per
    delivered and per acked message, built in one step and packed as it is
    (the array ``[topic, queue_id, queue_offset, generation]``).
    """

    topic: str
    queue_id: int
    queue_offset: int
    generation: int


# ---------------------------------------------------------------------- append
@value_type
class AppendRequest:
    """Store ``messages``, all of queue ``(topic, queue_id)``, as one log entry.

    ``records`` is the other way to carry them, and the cheaper one: the
    messages as ``protocol.records.MessageRecord`` arrays packed by
    ``protocol.records.pack_records``. The leader validates them and puts
    these very bytes in the log entry, where ``messages`` are converted and
    encoded again. A request carries one or the other, not both.

    Idempotent by message id: a message id already stored in the queue's topic
    (within the dedup window) is not stored again and reports its first
    outcome with ``duplicate`` set.
    """

    topic: str
    queue_id: int
    messages: list[Message] = field(default_factory=list)
    records: bytes = b""


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """What happened to one appended message.

    ``placement``: 0 queued (at ``queue_offset``), 1 delayed (held until its
    delivery time), 2 a transaction's half message; ``queue_offset`` is -1
    unless queued.
    """

    message_id: str
    placement: int
    queue_offset: int
    duplicate: bool


@value_type
class AppendResponse:
    """One outcome per message, in request order; ``store_timestamp_ms`` of the batch.

    Two forms; read them through :attr:`outcomes`, which is the same for both:

    - listed: one :class:`AppendOutcome` per message in ``listed``;
    - queued (the common case, and the cheap one to build, send and read):
      every message was queued for the first time, in request order, at
      consecutive offsets from ``queued_from``. ``listed`` is then empty and
      ``queued_ids`` holds the messages' ids.
    """

    listed: list[AppendOutcome]
    store_timestamp_ms: int
    queued_ids: list[str] = field(default_factory=list)
    queued_from: int = -1

    @property
    def outcomes(self) -> list[AppendOutcome]:
        """One outcome per message, in request order, whichever the form."""
        if not self.queued_ids:
            return self.listed
        first = self.queued_from
        return [
            AppendOutcome(message_id, 0, offset, False)
            for offset, message_id in enumerate(self.queued_ids, first)
        ]


@value_type
class AppendQueuesRequest:
    """Several appends in one call, to one storage node: each of its own queue (or the
    same queue twice), of any raft groups the node leads.

    Each append is handled as :class:`AppendRequest` alone would be (one log
    entry of its group, joined with the group's other appends of the round),
    and has its own outcome: one append's failure (NOT_LEADER of its group, a
    bad record) fails only it. The appends are under way at once, as concurrent
    calls would be: two of one queue in one request have no order between them
    (brokers put a queue in a request at most once).
    """

    appends: list[AppendRequest]


@value_type
class QueueAppended:
    """The outcome of one append of an :class:`AppendQueuesRequest`: ``response`` when
    it was stored, else ``failure``: the error the append alone would have raised, as
    Angelia carries it (NOT_LEADER's ``leader_hint`` names the replica leading its group,
    when known)."""

    response: AppendResponse | None
    failure: WireError | None = None


@value_type
class AppendQueuesResponse:
    """One outcome per append, in request order."""

    outcomes: list[QueueAppended]


# ------------------------------------------------------------------------ read
@dataclass(frozen=True, slots=True)
class ReadRequest:
    """Messages of a queue from ``queue_offset`` on: at most ``count_max``, and no more
    body bytes than ``bytes_max`` (at least one message is returned if any is there)."""

    topic: str
    queue_id: int
    queue_offset: int
    count_max: int = 32
    bytes_max: int = 4 << 20
    from_follower: bool = False
    """Read replica: any replica may answer from what it applied (at most its
    commit index, perhaps behind the leader) instead of NOT_LEADER."""
    filter_expression: str = "*"
    """Only messages matching this subscription filter (the same value a
    :class:`ReceiveRequest` carries) are returned; the others are skipped, and
    the read looks at no more than the partition's receive scan limit of
    offsets. An offset outside [first, end] fails with OFFSET_OUT_OF_RANGE."""
    packed: bool = False
    """Answer with the messages packed as records (``ReadResponse.records`` and
    ``.stored_at``) instead of ``ReadResponse.messages``, as a packed receive
    does; ``bytes_max`` then bounds the packed records' bytes."""
    filter_kind: int = 1
    """How ``filter_expression`` is written, as in :class:`ReceiveRequest`: a SQL92
    filter is evaluated on the records read, at most
    ``storage_node.partition.property_filter.EVALUATED_MAX`` of them per read."""


class StoredAt(NamedTuple):
    """Where and when a message of a packed read answer was stored: what a
    :class:`StoredMessage` says but the message, which is the record at the same
    position of the answer's ``records``."""

    queue_offset: int
    store_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class ReadResponse:
    """Messages in offset order, and the queue's offsets at the time of the read."""

    messages: list[StoredMessage]
    first_offset: int
    end_offset: int
    next_offset: int = -1
    """Where the next read of this queue continues: past every offset this read
    looked at (returned or skipped by the filter); -1 from an older node."""
    records: bytes = b""
    """A packed answer (the request's ``packed``): the messages' records, packed by
    ``protocol.records.pack_records``, one per item of ``stored_at``."""
    stored_at: list[StoredAt] = field(default_factory=list)


# --------------------------------------------------------------------- receive
@dataclass(frozen=True, slots=True)
class ReceiveRequest:
    """Pop: hand up to ``max_messages`` of a queue to consumer ``group``.

    Handed-out messages stay invisible to the group for
    ``invisible_duration_ms`` unless acknowledged. ``filter_expression`` is a
    tag expression (``*``, ``a || b``) or, when ``filter_kind`` is
    ``protocol.filters.FilterKind.SQL``, a SQL92 expression that the node
    evaluates against each message's properties before it hands the message
    out (a bad one is refused as ILLEGAL_FILTER_EXPRESSION). ``poll_ms`` > 0: when nothing is
    available, wait up to that long for messages to arrive (long polling).
    """

    group: str
    topic: str
    queue_id: int
    max_messages: int
    invisible_duration_ms: int
    max_delivery_attempts: int = 16
    filter_expression: str = "*"
    fifo: bool = False
    start_at_latest: bool = False
    attempt_id: str = ""
    poll_ms: int = 0
    packed: bool = False
    """Answer with the messages packed as records (``ReceiveResponse.records`` and
    ``.deliveries``) instead of ``ReceiveResponse.messages``: no conversion per message
    on either side."""
    filter_kind: int = 1
    """How ``filter_expression`` is written: a ``protocol.filters.FilterKind`` (TAG)."""


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A delivery: the message, its handle, its attempt (1 first) and its deadline."""

    handle: ReceiptHandle
    delivery_attempt: int
    invisible_until_ms: int
    message: StoredMessage


@dataclass(frozen=True, slots=True)
class ReceiveResponse:
    """The deliveries, how many messages were moved to the dead-letter queue, and the
    queue's end offset as the (last) receive saw it (-1: not reported): a message
    appended after the receive makes the queue grow past it."""

    messages: list[ReceivedMessage]
    dead_lettered: int = 0
    end_offset: int = -1
    records: bytes = b""
    """A packed answer (the request's ``packed``): the messages' records, packed by
    ``protocol.records.pack_records``, one per item of ``deliveries``."""
    deliveries: list[PackedDelivery] = field(default_factory=list)
    leased: int = -1
    """How many messages of the queue the group holds leases on after this receive
    (-1: not reported). 0: only an append (or a released timer or committed
    transaction, which grow the queue) can bring the group new messages here."""


class PackedDelivery(NamedTuple):
    """A delivery of a packed receive answer: what a :class:`ReceivedMessage` says but
    the message, which is the record at the same position of the answer's ``records``."""

    topic: str
    queue_id: int
    queue_offset: int
    generation: int
    delivery_attempt: int
    invisible_until_ms: int
    store_timestamp_ms: int


# ------------------------------------------------------------------------- ack
@dataclass(frozen=True, slots=True)
class AckRequest:
    """Acknowledge deliveries to ``group``; each handle succeeds or fails on its own."""

    group: str
    topic: str
    queue_id: int
    handles: list[ReceiptHandle]


class AckOutcome(NamedTuple):
    """``error_code`` is 0 on success, else a ``protocol.errors`` number. A named
    tuple, as :class:`ReceiptHandle` (one per acked message)."""

    queue_offset: int
    error_code: int = 0
    error: str = ""


@dataclass(frozen=True, slots=True)
class AckResponse:
    """One outcome per handle, in request order."""

    outcomes: list[AckOutcome]


@dataclass(frozen=True, slots=True)
class ChangeInvisibleRequest:
    """Make a delivered message invisible to ``group`` for ``invisible_duration_ms`` from now
    (0: visible at once). The handle goes stale; the response has the new one."""

    group: str
    handle: ReceiptHandle
    invisible_duration_ms: int


@dataclass(frozen=True, slots=True)
class ChangeInvisibleResponse:
    """The new handle and deadline."""

    handle: ReceiptHandle
    invisible_until_ms: int
    delivery_attempt: int


# --------------------------------------------------------------------- offsets
@dataclass(frozen=True, slots=True)
class CommitOffsetRequest:
    """Set ``group``'s position in a queue (clamped to the queue's offsets).

    ``keep_leases`` False: an operator's reset, the group's in-flight handles on
    the queue turn invalid; True: a consumer's commit (UpdateOffset), they stay
    valid and pop resumes at the offset.
    """

    group: str
    topic: str
    queue_id: int
    offset: int
    keep_leases: bool = False


@dataclass(frozen=True, slots=True)
class GetOffsetRequest:
    """Ask for ``group``'s position in a queue."""

    group: str
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class OffsetResponse:
    """The group's position (None: the group never consumed the queue)."""

    offset: int | None


@dataclass(frozen=True, slots=True)
class QueueInfoRequest:
    """Ask for a queue's offsets, and (``timestamp_ms`` >= 0) the offset of a store time."""

    topic: str
    queue_id: int
    timestamp_ms: int = -1
    from_follower: bool = False
    """Read replica, as in :class:`ReadRequest`."""
    end_above: int = -1
    wait_ms: int = 0
    """With ``end_above`` >= 0 and ``wait_ms`` > 0, a long poll on growth: the answer
    comes once the end offset is above ``end_above``, or after ``wait_ms`` (capped
    by the node) with the offsets as they are then."""


@dataclass(frozen=True, slots=True)
class QueueInfoResponse:
    """The oldest offset still held and the offset the next message gets; the raft
    group serving the queue."""

    first_offset: int
    end_offset: int
    group_id: int
    timestamp_offset: int = -1
    """The first offset stored at or after the request's ``timestamp_ms`` (the end
    offset if none; -1 if no timestamp was asked)."""
    local_first_offset: int = -1
    """The first offset on the answering replica's disk (with a tier, ``first_offset``
    may be below it: older messages are read from the tier); -1 from older nodes."""
    tier_upload_point: int = -1
    """With a tier, where the queue's next tier object starts (-1: no tier, or an older
    node); the three fields below are the lag behind it, as the group's leader sees it."""
    tier_lag_bytes: int = -1
    """Bytes of the log entries holding the messages not uploaded yet (counted up to a
    bound: a lower bound past it)."""
    tier_lag_ms: int = -1
    """How long ago the oldest message not uploaded yet was stored (0: none pending)."""
    tier_last_error: str = ""
    """The leader's uploader's last failure for the group ("" since its last success)."""


# ---------------------------------------------------------------------- status
@dataclass(frozen=True, slots=True)
class NodeStatusRequest:
    """Ask a node for its view of the groups it hosts."""

    verbose: bool = False


@dataclass(frozen=True, slots=True)
class NodeStatusResponse:
    """``leaders[i]`` is the leader node id this node knows for group ``first_group_id + i``
    (0: none); ``led`` the groups this node leads and serves; ``reads`` the offset reads
    (``storage.read``) it served since it started, as leader or follower."""

    node_id: int
    first_group_id: int
    leaders: list[int]
    led: list[int]
    reads: int = 0


# ---------------------------------------------------------- transactions, timers
@dataclass(frozen=True, slots=True)
class EndTransactionRequest:
    """Commit or roll back the half message ``transaction_id`` (its message id) that was
    appended to queue ``(topic, queue_id)``."""

    topic: str
    queue_id: int
    transaction_id: str
    commit: bool


@dataclass(frozen=True, slots=True)
class EndTransactionResponse:
    """After a commit: where the message went (``placement`` 0 queued at
    ``queue_offset``, 1 delayed); after a rollback ``committed`` is False."""

    committed: bool
    placement: int = -1
    queue_offset: int = -1


@dataclass(frozen=True, slots=True)
class CancelTimerRequest:
    """Cancel the held delayed message ``message_id`` of queue ``(topic, queue_id)``."""

    topic: str
    queue_id: int
    message_id: str


@dataclass(frozen=True, slots=True)
class CancelTimerResponse:
    """Whether a held message was found and cancelled."""

    cancelled: bool


# ------------------------------------------------------- transaction check-back
@dataclass(frozen=True, slots=True)
class ScanTransactionsRequest:
    """The unresolved half messages of raft group ``group_id`` that are due for a
    check-back: stored before ``stored_before_ms`` and never checked or last checked
    before ``checked_before_ms``; at most ``limit``, oldest first. Served by the
    group's leader (NOT_LEADER otherwise), from applied state after a read barrier."""

    group_id: int
    stored_before_ms: int
    checked_before_ms: int
    limit: int = 256


@dataclass(frozen=True, slots=True)
class HalfMessageInfo:
    """One unresolved half message: the message (its id is the transaction id in
    storage), when it was stored and how many check-backs were noted for it."""

    message: Message
    store_timestamp_ms: int
    check_count: int


@dataclass(frozen=True, slots=True)
class ScanTransactionsResponse:
    """The half messages due, oldest first."""

    halves: list[HalfMessageInfo]


@dataclass(frozen=True, slots=True)
class NoteTransactionChecksRequest:
    """Count one check-back of each named half message of group ``group_id``; those
    then counted more than ``check_max`` times are rolled back."""

    group_id: int
    transaction_ids: list[str]
    check_max: int


@dataclass(frozen=True, slots=True)
class NoteTransactionChecksResponse:
    """Which ids were counted, rolled back (out of checks), or unknown (resolved already)."""

    noted: list[str]
    rolled_back: list[str]
    unknown: list[str]


# ---------------------------------------------------------------- message query
TIME_MAX_MS = 2**62
"""The end of time for a query's time range (no end given)."""


@dataclass(frozen=True, slots=True)
class QueryMessagesRequest:
    """Messages of raft group ``group_id`` by id or key, stored in ``[begin_ms, end_ms]``.

    Exactly one of ``message_id`` and ``key`` is set. ``topic`` "" searches
    every queue of the group (a query by id that does not know the topic asks
    every group); otherwise only that topic's queues. At most ``limit``
    messages, oldest first per queue. Served by the group's leader (NOT_LEADER
    otherwise) from its applied state, through the node's key index
    (``storage_node/key_index.py``).
    """

    group_id: int
    topic: str = ""
    message_id: str = ""
    key: str = ""
    begin_ms: int = 0
    end_ms: int = TIME_MAX_MS
    limit: int = 32


@dataclass(frozen=True, slots=True)
class QueryMessagesResponse:
    """The messages found (each with its queue, offset and store time, in
    ``message.message``'s topic and queue id), and how the search went: ``scanned``
    messages read from the log to index them or to search the open ends of queues;
    ``complete`` False when the search stopped at its budget (narrow the time range)."""

    messages: list[StoredMessage]
    scanned: int
    complete: bool


# ------------------------------------------------------------ consumer progress
@dataclass(frozen=True, slots=True)
class GroupProgressRequest:
    """Consumer group ``consumer_group``'s progress in the queues of raft group
    ``group_id``: every queue the group has consumption state in, and with
    ``topic`` set, only that topic's queues (each of them, consumed or not)."""

    group_id: int
    consumer_group: str
    topic: str = ""


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """One queue's progress for a consumer group.

    ``consumer_offset``: every message below it is done for the group (acked,
    dead-lettered, or below a committed offset); -1 if the group never consumed
    the queue. ``lag``: messages not yet done; ``in_flight``: of those, delivered
    and still invisible. ``last_consumed_ms``: the store time of the message
    just below ``consumer_offset`` (-1 if none is held), RocketMQ's "last time".
    """

    topic: str
    queue_id: int
    first_offset: int
    end_offset: int
    consumer_offset: int
    in_flight: int
    lag: int
    last_consumed_ms: int


@dataclass(frozen=True, slots=True)
class GroupProgressResponse:
    """The queues' progress, sorted by topic and queue id."""

    queues: list[QueueProgress]


# ------------------------------------------------------------------ snapshots
@dataclass(frozen=True, slots=True)
class ExportSnapshotRequest:
    """Write the messages of raft group ``group_id``'s queues of ``topics`` (every queue
    when empty) as message objects (``protocol.message_objects``) under ``url`` (a
    folder or fsspec URL, opened with ``storage_options``): each queue from its first
    offset up to its end when the export starts, the same applied index for every
    queue of the group. Objects are cut at about ``object_bytes_max`` and blocks at
    about ``block_bytes_max``. Served by the group's leader (NOT_LEADER otherwise).
    The caller writes the manifest from the answers, after every group answered."""

    group_id: int
    url: str
    topics: list[str] = field(default_factory=list)
    object_bytes_max: int = 64 << 20
    block_bytes_max: int = 1 << 20
    storage_options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ExportSnapshotResponse:
    """The group's applied index the export read at, and each exported queue's objects."""

    group_id: int
    applied_index: int
    queues: list[QueueManifest]


# ----------------------------------------------------------------- membership
@dataclass(frozen=True, slots=True)
class GroupMembershipRequest:
    """Raft group ``group_id``'s membership as its leader applied it (committed).

    Served by the group's leader after a read barrier (NOT_LEADER with a hint
    otherwise). A replica that its assignment no longer lists but whose own
    membership still names it (it never learned that its removal was
    committed) asks this before it deletes itself."""

    group_id: int


@dataclass(frozen=True, slots=True)
class GroupMembershipResponse:
    """The answering leader (``leader``, in ``term``) and the membership it applied, as
    of its applied index ``applied_index``."""

    group_id: int
    leader: int
    term: int
    voters: list[int]
    learners: list[int]
    voters_outgoing: list[int] = field(default_factory=list)
    learners_next: list[int] = field(default_factory=list)
    applied_index: int = 0


@dataclass(frozen=True, slots=True)
class ReadmitRequest:
    """Node ``node_id`` lost its replica of raft group ``group_id`` (its WAL was damaged
    and set aside): the group's leader removes it from the membership, then adds it
    back as a learner and promotes it once caught up (a replica move onto the same
    node). Served by the leader (NOT_LEADER with a hint otherwise); it answers its
    membership, in which the node is absent once the removal was applied."""

    group_id: int
    node_id: int
