"""The values the metadata state machine holds, and what its queries return.

Every record is a frozen dataclass, so a record handed to a watcher or a query
caller can never change under it; the state machine replaces records, it never
mutates them. Fields are ONLY ADDED AT THE END, with a default (they are
encoded positionally, see ``nameserver.codec``). Enum values are append-only.

PURE.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nameserver.codec import from_wire, to_wire
from nameserver.errors import DecodeFailed
from protocol.vocabulary import MessageType, Permission

RETENTION_MS_DEFAULT = 3 * 24 * 3600 * 1000
"""How long a topic keeps messages unless told otherwise (three days)."""

NO_NODE = 0
"""The storage node id meaning "nobody" (no leader known; a replica being added)."""


class ChangeKind(enum.IntEnum):
    """Which kind of record a :class:`Change` is about. Append-only."""

    CLUSTER = 1
    STORAGE_NODE = 2
    BROKER = 3
    TOPIC = 4
    CONSUMER_GROUP = 5
    RAFT_GROUP = 6
    LEASE = 7


@dataclass(frozen=True, slots=True)
class Cluster:
    """A set of storage nodes and the raft groups they host.

    The cluster's groups have the global ids ``first_group_id ..
    first_group_id + group_count - 1``; a queue's group is ``first_group_id +
    protocol.routing.group_index(topic, queue_id, group_count)``. Both numbers
    are fixed when the cluster is created.
    """

    name: str
    group_count: int
    first_group_id: int
    replication_factor: int = 3


@dataclass(frozen=True, slots=True)
class StorageLoad:
    """What a storage node reports about itself in each heartbeat."""

    groups: int = 0
    leaders: int = 0
    bytes: int = 0
    msgs_per_s: int = 0
    disk_free_bytes: int = 0


NO_LOAD = StorageLoad()
"""The load of a node that reported none."""


@dataclass(frozen=True, slots=True)
class StorageNode:
    """A registered storage node. ``node_id`` is its raft node id in every group (> 0)."""

    node_id: int
    cluster: str
    address: str
    alive: bool
    last_heartbeat_ms: int
    load: StorageLoad = NO_LOAD
    draining: bool = False  # its replicas are being moved off before it is removed


@dataclass(frozen=True, slots=True)
class Broker:
    """A registered broker and the producer groups whose clients hold a Telemetry
    stream on it (where transaction check-backs for those groups can be sent)."""

    broker_id: str
    cluster: str
    address: str
    alive: bool
    last_heartbeat_ms: int
    producer_groups: tuple[str, ...] = ()
    remoting_address: str = ""  # where 4.x (remoting) clients reach it; "" if nowhere


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic: ``queue_count`` queues (ids 0..queue_count-1) in one cluster.

    A dead-letter topic (``%DLQ%<group>``) has one queue per raft group of its
    cluster, numbered by group id (see ``protocol.routing``).
    """

    name: str
    cluster: str
    queue_count: int
    message_type: MessageType = MessageType.NORMAL
    retention_ms: int = RETENTION_MS_DEFAULT
    permission: Permission = Permission.READ_WRITE
    # Retention beyond time (0: no limit): ``retention_bytes`` bounds all of a queue's
    # data, the tier's too; ``local_retention_ms``/``local_retention_bytes`` bound what
    # stays on the storage nodes' disks once it is in the tier (0: as ``retention_*``).
    retention_bytes: int = 0
    local_retention_ms: int = 0
    local_retention_bytes: int = 0
    # Read replicas: brokers spread the topic's offset reads (pull consumers) over the
    # replicas of each queue's raft group, the leader included, instead of all to the
    # leader (broker.processor.replica_reads). Off by default.
    read_replicas: bool = False


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long a consumer group waits before redelivering a message.

    Exponential (``initial_backoff_ms`` times ``multiplier`` per attempt, capped
    at ``max_backoff_ms``) unless ``backoff_ms`` lists the wait before each
    retry (the last value repeats), as RocketMQ's customized backoff.
    """

    initial_backoff_ms: int = 1000
    max_backoff_ms: int = 60_000
    multiplier: float = 2.0
    backoff_ms: tuple[int, ...] = ()


# fmt: off
ROCKETMQ_BACKOFF_MS = (
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000,
    360_000, 420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000,
    3_600_000, 7_200_000,
)
# fmt: on
"""RocketMQ's default retry levels: 1 s, 5 s, 10 s, 30 s, 1 min ... 2 h."""

RETRY_DEFAULT = RetryPolicy(backoff_ms=ROCKETMQ_BACKOFF_MS)
"""The retry policy of a consumer group created without one: RocketMQ's levels."""

MAX_DELIVERY_ATTEMPTS_DEFAULT = 17
"""RocketMQ's default: the first delivery and 16 retries."""


@dataclass(frozen=True, slots=True)
class ConsumerGroup:
    """A consumer group (subscription group in RocketMQ's words)."""

    name: str
    cluster: str
    fifo: bool = False
    max_delivery_attempts: int = MAX_DELIVERY_ATTEMPTS_DEFAULT
    retry: RetryPolicy = RETRY_DEFAULT


@dataclass(frozen=True, slots=True)
class RaftGroup:
    """One raft group of a cluster: its replicas, and its leader and term as
    reported by storage nodes. ``leader`` is NO_NODE while none is known (not
    yet reported, or its node was marked down).

    A replica move in progress (see :mod:`nameserver.moves`): ``joining``
    are replicas being added (they start empty, as raft learners, and are
    promoted once caught up), ``leaving`` replicas to remove once every
    joining one is a voter. Both are listed in ``replicas`` too."""

    group_id: int
    cluster: str
    replicas: tuple[int, ...] = ()
    leader: int = NO_NODE
    term: int = 0
    joining: tuple[int, ...] = ()
    leaving: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Lease:
    """An exclusive right to some background work, held by ``owner`` until
    ``expires_ms`` (judged by the ``now_ms`` of later commands).

    ``token`` is a fencing token: the revision at which this owner's tenure
    began. Each new tenure (a new owner, or the same owner after expiry) gets
    a larger token; renewals keep it. Work done under a lease can carry the
    token so that its target refuses work of an older tenure.
    """

    name: str
    owner: str
    expires_ms: int
    token: int = 0


Record = Cluster | StorageNode | Broker | Topic | ConsumerGroup | RaftGroup | Lease

RECORD_OF_KIND: dict[ChangeKind, type] = {
    ChangeKind.CLUSTER: Cluster,
    ChangeKind.STORAGE_NODE: StorageNode,
    ChangeKind.BROKER: Broker,
    ChangeKind.TOPIC: Topic,
    ChangeKind.CONSUMER_GROUP: ConsumerGroup,
    ChangeKind.RAFT_GROUP: RaftGroup,
    ChangeKind.LEASE: Lease,
}


@dataclass(frozen=True, slots=True)
class Change:
    """One change event, what watchers receive.

    ``key`` is the record's name or id as text; ``value`` is the record after
    the change, or None when it was deleted. All changes made by one command
    share its revision.
    """

    revision: int
    kind: ChangeKind
    key: str
    value: Record | None


@dataclass(frozen=True, slots=True)
class WatchBatch:
    """The answer to "every change after revision R".

    ``resync_required``: R is older than the retained history, so ``changes``
    is empty and the watcher must re-read the state it follows (routes, nodes)
    and continue from ``revision``.
    """

    revision: int
    changes: tuple[Change, ...]
    resync_required: bool = False


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A storage node as a route names it."""

    node_id: int
    address: str
    alive: bool


@dataclass(frozen=True, slots=True)
class QueueRoute:
    """Where one queue is served: its group, the group's leader (None while
    unknown or down) and the other replicas."""

    queue_id: int
    group_id: int
    term: int
    leader: Endpoint | None
    followers: tuple[Endpoint, ...]


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """The route of a topic: every queue, in queue id order."""

    topic: Topic
    queues: tuple[QueueRoute, ...]
    revision: int


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """Everything known about one cluster, for operators and placement."""

    cluster: Cluster
    storage_nodes: tuple[StorageNode, ...]
    brokers: tuple[Broker, ...]
    groups: tuple[RaftGroup, ...]
    topic_count: int
    consumer_group_count: int
    revision: int


def change_to_wire(change: Change) -> list[object]:
    """The wire form of a change (its value's type follows from its kind)."""
    return [change.revision, int(change.kind), change.key, to_wire(change.value)]


def change_from_wire(data: object) -> Change:
    """Rebuild a change from :func:`change_to_wire`'s form."""
    if not isinstance(data, list) or len(data) != 4:
        raise DecodeFailed(f"a change is a 4-item array, got {data!r}")
    revision, kind_number, key, value = data
    kind = from_wire(ChangeKind, kind_number)
    record = None if value is None else from_wire(RECORD_OF_KIND[kind], value)
    return Change(from_wire(int, revision), kind, from_wire(str, key), record)
