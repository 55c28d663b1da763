"""The commands of the metadata state machine: what the nameserver's raft log holds.

Each command is a frozen dataclass with an op code; ``encode`` gives the bytes
of a log entry, ``decode`` reads them back. Commands carry everything apply
needs, decisions included: time (``now_ms``, stamped by the leader when it
proposes), timeouts, and placements (computed by the leader with a
``PlacementPolicy`` and proposed as ``SetReplicas``), so every replica applies
the same log to the same state whatever its clock, config or code of the
placement policy.

Evolution rules: op codes are ONLY ADDED AT THE END of ``OpCode`` and never
reused; a command's fields are only added at the end, with a default (see
``nameserver.codec``).

PURE.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from nameserver.codec import from_wire, pack, unpack_raw
from nameserver.errors import DecodeFailed
from nameserver.records import (
    MAX_DELIVERY_ATTEMPTS_DEFAULT,
    NO_LOAD,
    RETENTION_MS_DEFAULT,
    RETRY_DEFAULT,
    RetryPolicy,
    StorageLoad,
)
from protocol.acl import PolicyEntry, Resource, User, UserType
from protocol.vocabulary import MessageType, Permission


class OpCode(enum.IntEnum):
    """One byte naming a command in the log. ONLY ADD TO THE END; never reuse a number."""

    CREATE_CLUSTER = 1
    STORAGE_HEARTBEAT = 2
    BROKER_HEARTBEAT = 3
    CREATE_TOPIC = 4
    UPDATE_TOPIC = 5
    DELETE_TOPIC = 6
    CREATE_CONSUMER_GROUP = 7
    UPDATE_CONSUMER_GROUP = 8
    DELETE_CONSUMER_GROUP = 9
    SET_REPLICAS = 10
    REPORT_LEADERS = 11
    EXPIRE = 12
    ACQUIRE_LEASE = 13
    RENEW_LEASE = 14
    RELEASE_LEASE = 15
    REMOVE_BROKER = 16
    REMOVE_STORAGE_NODE = 17
    DRAIN_STORAGE_NODE = 18
    CREATE_USER = 19
    UPDATE_USER = 20
    DELETE_USER = 21
    PUT_ACL = 22
    DELETE_ACL = 23
    CREATE_TOPICS = 24


@dataclass(frozen=True, slots=True)
class CreateCluster:
    """Create a cluster with ``group_count`` raft groups (no replicas yet: the
    leader follows with ``SetReplicas`` from its placement policy)."""

    op: ClassVar[OpCode] = OpCode.CREATE_CLUSTER
    name: str
    group_count: int
    replication_factor: int = 3


@dataclass(frozen=True, slots=True)
class StorageHeartbeat:
    """A storage node is alive. The first one registers (joins) the node; one from
    a node marked down marks it up again. Also reports the node's load."""

    op: ClassVar[OpCode] = OpCode.STORAGE_HEARTBEAT
    node_id: int
    cluster: str
    address: str
    now_ms: int
    load: StorageLoad = NO_LOAD


@dataclass(frozen=True, slots=True)
class BrokerHeartbeat:
    """A broker is alive, and these producer groups have Telemetry streams on it."""

    op: ClassVar[OpCode] = OpCode.BROKER_HEARTBEAT
    broker_id: str
    cluster: str
    address: str
    now_ms: int
    producer_groups: tuple[str, ...] = ()
    remoting_address: str = ""  # where 4.x (remoting) clients reach it; "" if nowhere


@dataclass(frozen=True, slots=True)
class CreateTopic:
    """Create a topic in a cluster. A dead-letter topic (``%DLQ%<group>``) gets
    one queue per raft group of its cluster whatever ``queue_count`` says
    (protocol.routing)."""

    op: ClassVar[OpCode] = OpCode.CREATE_TOPIC
    name: str
    cluster: str
    queue_count: int
    message_type: MessageType = MessageType.NORMAL
    retention_ms: int = RETENTION_MS_DEFAULT
    permission: Permission = Permission.READ_WRITE
    retention_bytes: int = 0
    local_retention_ms: int = 0
    local_retention_bytes: int = 0
    read_replicas: bool = False


@dataclass(frozen=True, slots=True)
class CreateTopics:
    """Create many topics in one log entry, all or nothing: one bad topic (a bad
    name or setting, a name given twice, an existing name unless
    ``skip_existing``) refuses the whole entry with an error naming it. At most
    ``nameserver.validation.CREATE_TOPICS_MAX`` topics an entry, which bounds
    the entry's bytes and the changes it adds to the watch history. With
    ``skip_existing`` a topic that exists already is left as it is (its
    settings are not compared)."""

    op: ClassVar[OpCode] = OpCode.CREATE_TOPICS
    topics: tuple[CreateTopic, ...]
    skip_existing: bool = False


@dataclass(frozen=True, slots=True)
class UpdateTopic:
    """Change a topic's settings; None leaves a setting as it is. The queue count
    may only grow (removing queues would strand their messages)."""

    op: ClassVar[OpCode] = OpCode.UPDATE_TOPIC
    name: str
    queue_count: int | None = None
    message_type: MessageType | None = None
    retention_ms: int | None = None
    permission: Permission | None = None
    retention_bytes: int | None = None
    local_retention_ms: int | None = None
    local_retention_bytes: int | None = None
    read_replicas: bool | None = None


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    """Delete a topic (the storage groups' leaders then drop its data: partition DropTopic)."""

    op: ClassVar[OpCode] = OpCode.DELETE_TOPIC
    name: str


@dataclass(frozen=True, slots=True)
class CreateConsumerGroup:
    """Create a consumer group in a cluster."""

    op: ClassVar[OpCode] = OpCode.CREATE_CONSUMER_GROUP
    name: str
    cluster: str
    fifo: bool = False
    max_delivery_attempts: int = MAX_DELIVERY_ATTEMPTS_DEFAULT
    retry: RetryPolicy = RETRY_DEFAULT


@dataclass(frozen=True, slots=True)
class UpdateConsumerGroup:
    """Change a consumer group's settings; None leaves a setting as it is."""

    op: ClassVar[OpCode] = OpCode.UPDATE_CONSUMER_GROUP
    name: str
    fifo: bool | None = None
    max_delivery_attempts: int | None = None
    retry: RetryPolicy | None = None


@dataclass(frozen=True, slots=True)
class DeleteConsumerGroup:
    """Delete a consumer group."""

    op: ClassVar[OpCode] = OpCode.DELETE_CONSUMER_GROUP
    name: str


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """The replicas a raft group should have (distinct registered storage nodes).

    ``joining`` and ``leaving`` (subsets of ``replicas``) record a move in
    progress: see :class:`nameserver.records.RaftGroup`."""

    group_id: int
    replicas: tuple[int, ...]
    joining: tuple[int, ...] = ()
    leaving: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SetReplicas:
    """Record the replicas of some groups: an initial placement, or one step of a
    move as the service carries it out. All or nothing."""

    op: ClassVar[OpCode] = OpCode.SET_REPLICAS
    assignments: tuple[ReplicaAssignment, ...]


@dataclass(frozen=True, slots=True)
class LeaderReport:
    """What a storage node knows of one of its groups: the leader (NO_NODE if
    none) at ``term``."""

    group_id: int
    leader: int
    term: int


@dataclass(frozen=True, slots=True)
class ReportLeaders:
    """Leader reports from one storage node. A report is taken only if it is not
    stale: its term is above the recorded one, or equal with no leader recorded."""

    op: ClassVar[OpCode] = OpCode.REPORT_LEADERS
    node_id: int
    reports: tuple[LeaderReport, ...]


@dataclass(frozen=True, slots=True)
class Expire:
    """The failure detector's sweep, proposed by the leader periodically.

    Storage nodes and brokers whose last heartbeat is at least the timeout
    older than ``now_ms`` are marked down (a storage node also loses the
    leaderships recorded for it); leases that expired by ``now_ms`` are removed.
    """

    op: ClassVar[OpCode] = OpCode.EXPIRE
    now_ms: int
    storage_node_timeout_ms: int
    broker_timeout_ms: int


@dataclass(frozen=True, slots=True)
class AcquireLease:
    """Take a lease if it is free, expired, or already ours (then it is extended
    and keeps its fencing token; otherwise a new tenure gets a new token)."""

    op: ClassVar[OpCode] = OpCode.ACQUIRE_LEASE
    name: str
    owner: str
    now_ms: int
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class RenewLease:
    """Extend a lease we hold and that has not expired by ``now_ms``."""

    op: ClassVar[OpCode] = OpCode.RENEW_LEASE
    name: str
    owner: str
    now_ms: int
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class ReleaseLease:
    """Give a lease up (only its owner may)."""

    op: ClassVar[OpCode] = OpCode.RELEASE_LEASE
    name: str
    owner: str


@dataclass(frozen=True, slots=True)
class RemoveBroker:
    """Forget a broker (it shut down cleanly)."""

    op: ClassVar[OpCode] = OpCode.REMOVE_BROKER
    broker_id: str


@dataclass(frozen=True, slots=True)
class RemoveStorageNode:
    """Forget a storage node (and any leadership recorded for it). Refused while
    it is a replica of any group: move its replicas away first."""

    op: ClassVar[OpCode] = OpCode.REMOVE_STORAGE_NODE
    node_id: int


@dataclass(frozen=True, slots=True)
class DrainStorageNode:
    """Mark a storage node draining (or not any more): while marked, the leader
    moves every replica off it and gives it no replica and no leadership."""

    op: ClassVar[OpCode] = OpCode.DRAIN_STORAGE_NODE
    node_id: int
    draining: bool = True


@dataclass(frozen=True, slots=True)
class CreateUser:
    """Add an ACL user (refused if the name is taken)."""

    op: ClassVar[OpCode] = OpCode.CREATE_USER
    user: User


@dataclass(frozen=True, slots=True)
class UpdateUser:
    """Change a user's secret and/or type (None: keep)."""

    op: ClassVar[OpCode] = OpCode.UPDATE_USER
    name: str
    secret: str | None = None
    user_type: UserType | None = None


@dataclass(frozen=True, slots=True)
class DeleteUser:
    """Remove a user and its policy."""

    op: ClassVar[OpCode] = OpCode.DELETE_USER
    name: str


@dataclass(frozen=True, slots=True)
class PutAcl:
    """Give user ``subject`` the policy ``entries``: with ``create`` the user must have
    none yet; otherwise the entries replace those for the same resources (the others
    stay)."""

    op: ClassVar[OpCode] = OpCode.PUT_ACL
    subject: str
    entries: tuple[PolicyEntry, ...]
    create: bool = False


@dataclass(frozen=True, slots=True)
class DeleteAcl:
    """Remove the entries of ``subject``'s policy for ``resources`` (empty: the whole
    policy)."""

    op: ClassVar[OpCode] = OpCode.DELETE_ACL
    subject: str
    resources: tuple[Resource, ...] = ()


Command = (
    CreateCluster
    | StorageHeartbeat
    | BrokerHeartbeat
    | CreateTopic
    | UpdateTopic
    | DeleteTopic
    | CreateConsumerGroup
    | UpdateConsumerGroup
    | DeleteConsumerGroup
    | SetReplicas
    | ReportLeaders
    | Expire
    | AcquireLease
    | RenewLease
    | ReleaseLease
    | RemoveBroker
    | RemoveStorageNode
    | DrainStorageNode
    | CreateUser
    | UpdateUser
    | DeleteUser
    | PutAcl
    | DeleteAcl
    | CreateTopics
)

COMMAND_OF_OP: dict[OpCode, type[Command]] = {
    command.op: command
    for command in (
        CreateCluster,
        StorageHeartbeat,
        BrokerHeartbeat,
        CreateTopic,
        UpdateTopic,
        DeleteTopic,
        CreateConsumerGroup,
        UpdateConsumerGroup,
        DeleteConsumerGroup,
        SetReplicas,
        ReportLeaders,
        Expire,
        AcquireLease,
        RenewLease,
        ReleaseLease,
        RemoveBroker,
        RemoveStorageNode,
        DrainStorageNode,
        CreateUser,
        UpdateUser,
        DeleteUser,
        PutAcl,
        DeleteAcl,
        CreateTopics,
    )
}


def encode(command: Command) -> bytes:
    """The log entry bytes of ``command``: a msgpack array [op, field, ...]."""
    return pack([int(command.op), command])


def decode(data: bytes) -> Command:
    """The command in a log entry; :class:`DecodeFailed` names what is wrong."""
    raw = unpack_raw(data)
    if not isinstance(raw, list) or len(raw) != 2 or not isinstance(raw[0], int):
        raise DecodeFailed("a command is an array [op code, fields]")
    try:
        kind = COMMAND_OF_OP[OpCode(raw[0])]
    except ValueError:
        raise DecodeFailed(f"unknown op code {raw[0]} (written by a newer version?)") from None
    command: Command = from_wire(kind, raw[1])
    return command
