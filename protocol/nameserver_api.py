"""The nameserver's internal API: request and response types its Angelia service
carries (``angelia_rpc.cluster_services.NameserverService``, wire names ``nameserver.*``).

Brokers, storage nodes and the admin CLI speak these types; they import only
this module, never ``nameserver``. The types mirror the nameserver's records
with wire-friendly shapes (lists, optional fields, enums as their numbers:
``message_type`` is a ``protocol.vocabulary.MessageType``, ``permission`` a
``protocol.vocabulary.Permission`` (RocketMQ's ``PermName`` bits), ``kind``
the nameserver's ``ChangeKind``).

Evolution: fields are only added at the end, with a default.

Every write answers with the metadata ``revision`` it produced; every read is
linearizable (served by the leader after confirming its leadership). A
follower answers NOT_LEADER with the leader's address as the leader hint.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.errors import WireError
from protocol.vocabulary import MessageType, Permission

MESSAGE_TYPE_NORMAL = int(MessageType.NORMAL)
PERMISSION_READ_WRITE = int(Permission.READ_WRITE)

# ChangeKind numbers (append-only, as in nameserver.records.ChangeKind).
KIND_CLUSTER = 1
KIND_STORAGE_NODE = 2
KIND_BROKER = 3
KIND_TOPIC = 4
KIND_CONSUMER_GROUP = 5
KIND_RAFT_GROUP = 6
KIND_LEASE = 7


# -- records ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """A cluster and its raft group ids ``first_group_id .. + group_count - 1``."""

    name: str
    group_count: int
    first_group_id: int
    replication_factor: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic. ``read_replicas``: brokers spread its offset reads (pull consumers)
    over the replicas of each queue's raft group instead of all to the leader."""

    name: str
    cluster: str
    queue_count: int
    message_type: int
    retention_ms: int
    permission: int
    retention_bytes: int = 0
    local_retention_ms: int = 0
    local_retention_bytes: int = 0
    read_replicas: bool = False


@dataclass(frozen=True, slots=True)
class RetryInfo:
    """A consumer group's redelivery backoff (see nameserver.records.RetryPolicy)."""

    initial_backoff_ms: int
    max_backoff_ms: int
    multiplier: float
    backoff_ms: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ConsumerGroupInfo:
    """A consumer group."""

    name: str
    cluster: str
    fifo: bool
    max_delivery_attempts: int
    retry: RetryInfo


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    """A storage node as a route names it."""

    node_id: int
    address: str
    alive: bool


@dataclass(frozen=True, slots=True)
class QueueRouteInfo:
    """Where one queue is served; ``leader`` is None while unknown or down."""

    queue_id: int
    group_id: int
    term: int
    leader: EndpointInfo | None
    followers: list[EndpointInfo]


@dataclass(frozen=True, slots=True)
class StorageNodeInfo:
    """A registered storage node and its last reported load."""

    node_id: int
    cluster: str
    address: str
    alive: bool
    last_heartbeat_ms: int
    groups: int = 0
    leaders: int = 0
    bytes: int = 0
    msgs_per_s: int = 0
    disk_free_bytes: int = 0
    degraded: bool = False  # its latency is an outlier among its peers: it leads no group
    fsync_p99_us: int = 0  # as it last reported
    draining: bool = False  # its replicas are being moved off before it is removed
    append_p99_us: int = 0  # as it last reported


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A registered broker."""

    broker_id: str
    cluster: str
    address: str
    alive: bool
    last_heartbeat_ms: int
    producer_groups: list[str] = field(default_factory=list)
    remoting_address: str = ""


@dataclass(frozen=True, slots=True)
class RaftGroupInfo:
    """A raft group: replicas, and the leader (0: none known) at ``term``.

    During a replica move, ``joining`` replicas (listed in ``replicas``) start
    empty as raft learners, and ``leaving`` ones are removed after them."""

    group_id: int
    cluster: str
    replicas: list[int]
    leader: int
    term: int
    joining: list[int] = field(default_factory=list)
    leaving: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """A lease: held by ``owner`` until ``expires_ms``; ``token`` fences its tenure."""

    name: str
    owner: str
    expires_ms: int
    token: int


@dataclass(frozen=True, slots=True)
class ChangeInfo:
    """One change: the record of ``kind`` named ``key`` after the change (in the
    field of its kind), or ``deleted``. All changes of one command share a revision."""

    revision: int
    kind: int
    key: str
    deleted: bool
    cluster: ClusterInfo | None = None
    storage_node: StorageNodeInfo | None = None
    broker: BrokerInfo | None = None
    topic: TopicInfo | None = None
    consumer_group: ConsumerGroupInfo | None = None
    raft_group: RaftGroupInfo | None = None
    lease: LeaseInfo | None = None


# -- requests and responses ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SignedBy:
    """Who sends a request, as the ``authorization`` header says it: the access key,
    the ``x-mq-date-time`` it signed and the signature (all "": unsigned)."""

    access_key: str = ""
    date_time: str = ""
    signature: str = ""


@dataclass(frozen=True, slots=True)
class NameRequest:
    """Names one topic, consumer group or cluster."""

    name: str
    signed: SignedBy = field(default_factory=SignedBy)  # an admin's writes (ACL on)


@dataclass(frozen=True, slots=True)
class StorageNodeRequest:
    """Names one storage node; ``draining`` says whether to start (True) or stop
    (False) draining it, where that applies."""

    node_id: int
    draining: bool = True


@dataclass(frozen=True, slots=True)
class RevisionResponse:
    """A write that returns no record: the revision after it."""

    revision: int


@dataclass(frozen=True, slots=True)
class CreateClusterRequest:
    """Create a cluster of ``group_count`` raft groups."""

    name: str
    group_count: int
    replication_factor: int = 3


@dataclass(frozen=True, slots=True)
class ClusterResponse:
    """A cluster and the revision after the write."""

    cluster: ClusterInfo
    revision: int


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    """Create a topic. ``retention_ms`` 0 means the default (three days); the other
    retention limits 0 mean none; ``read_replicas`` off by default (see ``TopicInfo``)."""

    name: str
    cluster: str
    queue_count: int
    message_type: int = MESSAGE_TYPE_NORMAL
    retention_ms: int = 0
    permission: int = PERMISSION_READ_WRITE
    retention_bytes: int = 0
    local_retention_ms: int = 0
    local_retention_bytes: int = 0
    signed: SignedBy = field(default_factory=SignedBy)  # an admin's writes (ACL on)
    read_replicas: bool = False


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    """Create many topics in one metadata log entry, all or nothing (at most 1,000;
    the error names the first bad topic). Each topic's own ``signed`` is ignored:
    ``signed`` here signs the whole request. ``skip_existing`` leaves topics that
    exist already as they are instead of refusing the request."""

    topics: list[CreateTopicRequest]
    skip_existing: bool = False
    signed: SignedBy = field(default_factory=SignedBy)  # an admin's writes (ACL on)


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    """How many topics a ``CreateTopicsRequest`` created (without those skipped) and
    the revision after it."""

    created: int
    revision: int


@dataclass(frozen=True, slots=True)
class UpdateTopicRequest:
    """Change a topic; None leaves a setting as it is (queues may only grow)."""

    name: str
    queue_count: int | None = None
    message_type: int | None = None
    retention_ms: int | None = None
    permission: int | None = None
    retention_bytes: int | None = None
    local_retention_ms: int | None = None
    local_retention_bytes: int | None = None
    signed: SignedBy = field(default_factory=SignedBy)  # an admin's writes (ACL on)
    read_replicas: bool | None = None


@dataclass(frozen=True, slots=True)
class TopicResponse:
    """One topic and the revision it was read or written at."""

    topic: TopicInfo
    revision: int


@dataclass(frozen=True, slots=True)
class ListRequest:
    """List topics or consumer groups; ``cluster`` "" means every cluster.

    ``unchanged_since`` (topics only): the revision of a topic list the caller
    holds; when no topic changed after it, the answer is ``unchanged`` and lists
    nothing (0: always list)."""

    cluster: str = ""
    unchanged_since: int = 0


@dataclass(frozen=True, slots=True)
class TopicListResponse:
    """Topics by name, as of ``revision``. ``unchanged``: no topic changed after the
    request's ``unchanged_since``, so the caller's list stands as of ``revision`` and
    ``topics`` is empty."""

    topics: list[TopicInfo]
    revision: int
    unchanged: bool = False


@dataclass(frozen=True, slots=True)
class CreateConsumerGroupRequest:
    """Create a consumer group; ``retry`` None means RocketMQ's default levels."""

    name: str
    cluster: str
    fifo: bool = False
    max_delivery_attempts: int = 17
    retry: RetryInfo | None = None
    signed: SignedBy = field(default_factory=SignedBy)  # an admin's writes (ACL on)


@dataclass(frozen=True, slots=True)
class UpdateConsumerGroupRequest:
    """Change a consumer group; None leaves a setting as it is."""

    name: str
    fifo: bool | None = None
    max_delivery_attempts: int | None = None
    retry: RetryInfo | None = None
    signed: SignedBy = field(default_factory=SignedBy)  # an admin's writes (ACL on)


@dataclass(frozen=True, slots=True)
class ConsumerGroupResponse:
    """One consumer group and the revision it was read or written at."""

    group: ConsumerGroupInfo
    revision: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupListResponse:
    """Consumer groups by name."""

    groups: list[ConsumerGroupInfo]
    revision: int


@dataclass(frozen=True, slots=True)
class RouteResponse:
    """The route of a topic: every queue, in queue id order."""

    topic: TopicInfo
    queues: list[QueueRouteInfo]
    revision: int


@dataclass(frozen=True, slots=True)
class NamesRequest:
    """Names several topics (``routes``: a route each)."""

    names: list[str]


@dataclass(frozen=True, slots=True)
class TopicRouted:
    """The outcome of one name of a ``routes`` call: ``route`` when the topic exists,
    else ``failure``: the error a ``route`` call of that name alone would have raised."""

    route: RouteResponse | None
    failure: WireError | None = None


@dataclass(frozen=True, slots=True)
class RoutesResponse:
    """One outcome per name, in request order, all read at one linearizable point."""

    outcomes: list[TopicRouted]


@dataclass(frozen=True, slots=True)
class ClusterStatusResponse:
    """Everything known about one cluster."""

    cluster: ClusterInfo
    storage_nodes: list[StorageNodeInfo]
    brokers: list[BrokerInfo]
    groups: list[RaftGroupInfo]
    topic_count: int
    consumer_group_count: int
    revision: int
    # How many groups may move at once now (the move throttle), and the append p99 it
    # judges against (0: none yet); filled by the nameserver leader.
    moves_budget: int = 0
    append_baseline_us: int = 0


@dataclass(frozen=True, slots=True)
class GroupMembershipInfo:
    """The raft membership of a group as its leader applied it (sent by the leader)."""

    group_id: int
    voters: list[int]
    learners: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class GroupLoadInfo:
    """The message rate appended to a group through its leader since the last heartbeat."""

    group_id: int
    msgs_per_s: int


@dataclass(frozen=True, slots=True)
class StorageHeartbeatRequest:
    """A storage node is alive (the first heartbeat registers it), with its load:
    ``fsync_p99_us`` is the p99 of its WAL syncs since its last heartbeat (0: none
    ran), ``group_loads`` the rates of the groups it leads (those not at 0);
    ``data_lost``: its WAL was set aside and some group has not re-admitted it yet
    (storage_node/data_loss.py): the nameserver reports it degraded meanwhile;
    ``append_p99_us`` the p99 of its appends since its last heartbeat, from their
    arrival to their commit (0: none ran): the nameserver throttles replica moves by it."""

    node_id: int
    cluster: str
    address: str
    groups: int = 0
    leaders: int = 0
    bytes: int = 0
    msgs_per_s: int = 0
    disk_free_bytes: int = 0
    memberships: list[GroupMembershipInfo] = field(default_factory=list)
    fsync_p99_us: int = 0
    group_loads: list[GroupLoadInfo] = field(default_factory=list)
    data_lost: bool = False
    append_p99_us: int = 0


@dataclass(frozen=True, slots=True)
class LeaderTransferInfo:
    """The nameserver asks the leader of ``group_id`` to hand leadership to ``to_node``."""

    group_id: int
    to_node: int


@dataclass(frozen=True, slots=True)
class StorageHeartbeatResponse:
    """The groups the node should host (it reconciles to these), and the leader
    transfers asked of it (leader balancing; it drops those of groups it no
    longer leads)."""

    groups: list[RaftGroupInfo]
    revision: int
    leader_transfers: list[LeaderTransferInfo] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    """A broker is alive, and these producer groups have Telemetry streams on it."""

    broker_id: str
    cluster: str
    address: str
    producer_groups: list[str] = field(default_factory=list)
    remoting_address: str = ""  # where 4.x (remoting) clients reach it; "" if nowhere


@dataclass(frozen=True, slots=True)
class LeaderReportInfo:
    """What a storage node knows of one group: the leader (0: none) at ``term``."""

    group_id: int
    leader: int
    term: int


@dataclass(frozen=True, slots=True)
class ReportLeadersRequest:
    """Leader reports from one storage node."""

    node_id: int
    reports: list[LeaderReportInfo]


@dataclass(frozen=True, slots=True)
class ReportLeadersResponse:
    """Which reports were taken (stale ones are not)."""

    taken: list[bool]
    revision: int


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """Acquire or renew a lease for ``ttl_ms``, or release it (``ttl_ms`` unused)."""

    name: str
    owner: str
    ttl_ms: int = 0


@dataclass(frozen=True, slots=True)
class LeaseResponse:
    """The lease as held after the call."""

    lease: LeaseInfo
    revision: int


@dataclass(frozen=True, slots=True)
class WatchRequest:
    """Stream every change after ``revision`` (of ``kinds`` only; empty: all kinds)."""

    revision: int
    kinds: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class WatchBatchInfo:
    """Changes after the previous batch's revision, oldest first; ``revision`` is
    where the stream stands (the first batch of a stream comes at once, maybe
    empty, confirming the subscription). ``resync_required``: the asked revision is older than
    the kept history (or ahead of the state): re-read what you follow and go on
    from ``revision``."""

    revision: int
    changes: list[ChangeInfo]
    resync_required: bool = False


# -- access control (ACL 2.0) ------------------------------------------------------------
# Users and policies in wire shapes (``protocol.acl`` holds the domain values and the
# decision). Brokers read them whole with ``acl_tables``; writes carry ``signed``, the
# admin's signature, which the nameserver checks once any user exists (it must be a
# super user's).


@dataclass(frozen=True, slots=True)
class UserInfo:
    """A user; ``user_type`` is a ``protocol.acl.UserType`` (0 in an update: keep)."""

    name: str
    secret: str
    user_type: int


@dataclass(frozen=True, slots=True)
class PolicyEntryInfo:
    """One policy entry: ``resource`` as written (``Topic:orders``, ``Topic:order*``,
    ``*``), ``actions`` and ``decision`` as ``protocol.acl`` numbers."""

    resource: str
    actions: list[int]
    decision: int
    source_cidrs: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AclInfo:
    """The policy of the user ``subject``."""

    subject: str
    entries: list[PolicyEntryInfo]


@dataclass(frozen=True, slots=True)
class UserRequest:
    """Create, update or delete a user (update: "" and 0 keep the secret and type)."""

    user: UserInfo
    signed: SignedBy = field(default_factory=SignedBy)


@dataclass(frozen=True, slots=True)
class AclRequest:
    """Create or update a user's policy (an update replaces the entries for the same
    resources), or delete entries by resource (no entries: the whole policy)."""

    acl: AclInfo
    signed: SignedBy = field(default_factory=SignedBy)


@dataclass(frozen=True, slots=True)
class AclTablesRequest:
    """Read every user and policy."""

    signed: SignedBy = field(default_factory=SignedBy)


@dataclass(frozen=True, slots=True)
class AuthenticateRequest:
    """Check a signature: who signs this request (a login, e.g. the dashboard's)."""

    signed: SignedBy = field(default_factory=SignedBy)


@dataclass(frozen=True, slots=True)
class AuthenticateResponse:
    """The user who signed (``user_type`` a ``protocol.acl.UserType``); "" and 0 when
    the cluster has no user (ACL off: nothing to check)."""

    name: str
    user_type: int


@dataclass(frozen=True, slots=True)
class AclTablesResponse:
    """Every user (secrets included: brokers verify signatures with them) and policy."""

    users: list[UserInfo]
    acls: list[AclInfo]
    revision: int
