"""The nameserver's metadata state machine: every replica applies the committed
commands of the nameserver's raft log to one of these, in log order.

Contract of :meth:`MetadataState.apply`:

- Deterministic: the same commands in the same order give the same state,
  results and errors on every replica. Time enters only through commands.
- All or nothing: a command that fails raises a :class:`NameserverError` and
  changes nothing (each handler validates everything before its first write).
- Revisions: a command that changes what watchers follow bumps ``revision`` by
  one and records one :class:`Change` per record it created, replaced or
  deleted, all stamped with the new revision. Refreshing a heartbeat time or a
  storage node's load is soft state: it is applied (and snapshotted) but bumps
  no revision and emits no change, so a hundred nodes heartbeating every second
  do not flood watchers or push their history out of the window. A heartbeat
  that registers a node, marks it up again, or changes its address (or a
  broker's producer groups) does emit a change.
- The history of changes is bounded (``history_max`` changes); a watcher
  asking for changes after a revision older than what is kept gets
  ``resync_required``.

Snapshots (:meth:`snapshot`, :meth:`restore`) are deterministic bytes and
include the change history, so a restored replica answers watchers exactly as
the original would: ``restore(s.snapshot())`` then applying the same commands
gives the same snapshot bytes as applying them to ``s``. (Replicas configured
with different ``history_max`` keep different histories: same records, same
answers for recent revisions, different snapshot bytes.)

Decisions stay out: placement is chosen by the leader's ``PlacementPolicy``
and arrives as ``SetReplicas``; leaders arrive as storage nodes' reports;
time arrives as ``now_ms`` in commands. So every replica agrees whatever its
clock, configuration or policy code.

PURE.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from nameserver import commands as c
from nameserver import names
from nameserver.codec import from_wire, pack, to_wire, unpack_raw
from nameserver.errors import (
    AlreadyExists,
    BadRequest,
    ConsumerGroupNotFound,
    DecodeFailed,
    LeaseHeld,
    LeaseNotHeld,
    NotFound,
    TopicNotFound,
)
from nameserver.records import (
    NO_NODE,
    Broker,
    Change,
    ChangeKind,
    Cluster,
    ClusterStatus,
    ConsumerGroup,
    Endpoint,
    Lease,
    QueueRoute,
    RaftGroup,
    Record,
    RetryPolicy,
    StorageNode,
    Topic,
    TopicRoute,
    WatchBatch,
    change_from_wire,
    change_to_wire,
)
from protocol import routing

GROUP_COUNT_MAX = 65_536
REPLICATION_FACTOR_MAX = 7
QUEUE_COUNT_MAX = 1024
MAX_DELIVERY_ATTEMPTS_MAX = 1000
LEASE_NAME_LENGTH_MAX = 255
HISTORY_MAX_DEFAULT = 10_000
SNAPSHOT_VERSION = 1
FIRST_GROUP_ID = 1
"""Raft group ids start at 1 (the raft WAL reserves group 0)."""
GROUP_ID_MAX = 2**32 - 1
"""The largest raft group id the raft WAL can record."""

T = TypeVar("T")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Applied:
    """What applying one command did.

    ``revision``: the state's revision afterwards (unchanged if ``changes`` is
    empty). ``value``: the command's answer: the record created or updated
    (topics, groups, nodes, brokers, leases, the cluster), a tuple of booleans
    for ``ReportLeaders`` (which reports were taken), None otherwise.
    """

    revision: int
    changes: tuple[Change, ...]
    value: object = None


@dataclass(frozen=True, slots=True)
class _Tables:
    """The snapshot's body (history travels next to it). Each tuple in key order."""

    revision: int
    compacted_revision: int
    next_group_id: int
    clusters: tuple[Cluster, ...]
    storage_nodes: tuple[StorageNode, ...]
    brokers: tuple[Broker, ...]
    topics: tuple[Topic, ...]
    consumer_groups: tuple[ConsumerGroup, ...]
    raft_groups: tuple[RaftGroup, ...]
    leases: tuple[Lease, ...]


class MetadataState:
    """Clusters, storage nodes, brokers, topics, consumer groups, raft groups and
    leases, changed only by :meth:`apply`."""

    def __init__(self, history_max: int = HISTORY_MAX_DEFAULT) -> None:
        if history_max < 1:
            raise ValueError(f"history_max must be >= 1, got {history_max}")
        self._history_max = history_max
        self._revision = 0
        # Every change with revision <= this may be missing from the history.
        self._compacted_revision = 0
        self._next_group_id = FIRST_GROUP_ID
        self._clusters: dict[str, Cluster] = {}
        self._storage_nodes: dict[int, StorageNode] = {}
        self._brokers: dict[str, Broker] = {}
        self._topics: dict[str, Topic] = {}
        self._consumer_groups: dict[str, ConsumerGroup] = {}
        self._raft_groups: dict[int, RaftGroup] = {}
        self._leases: dict[str, Lease] = {}
        self._history: deque[Change] = deque()
        self._pending: list[Change] = []
        self._handlers: dict[type, Callable[[Any], object]] = {
            c.CreateCluster: self._create_cluster,
            c.StorageHeartbeat: self._storage_heartbeat,
            c.BrokerHeartbeat: self._broker_heartbeat,
            c.CreateTopic: self._create_topic,
            c.UpdateTopic: self._update_topic,
            c.DeleteTopic: self._delete_topic,
            c.CreateConsumerGroup: self._create_consumer_group,
            c.UpdateConsumerGroup: self._update_consumer_group,
            c.DeleteConsumerGroup: self._delete_consumer_group,
            c.SetReplicas: self._set_replicas,
            c.ReportLeaders: self._report_leaders,
            c.Expire: self._expire,
            c.AcquireLease: self._acquire_lease,
            c.RenewLease: self._renew_lease,
            c.ReleaseLease: self._release_lease,
            c.RemoveBroker: self._remove_broker,
            c.RemoveStorageNode: self._remove_storage_node,
        }

    # -- applying ------------------------------------------------------------------

    @property
    def revision(self) -> int:
        """The revision of the last change applied (0 for an empty state)."""
        return self._revision

    def apply(self, command: c.Command) -> Applied:
        """Apply one committed command; raise :class:`NameserverError` (changing
        nothing) if it is invalid in the current state."""
        handler = self._handlers.get(type(command))
        if handler is None:
            raise BadRequest(f"not a nameserver command: {type(command).__name__}")
        self._pending = []
        value = handler(command)
        changes = tuple(self._pending)
        self._pending = []
        if changes:
            self._revision += 1
            self._history.extend(changes)
            while len(self._history) > self._history_max:
                self._compacted_revision = self._history.popleft().revision
        return Applied(self._revision, changes, value)

    def _changed(self, kind: ChangeKind, key: object, value: Record | None) -> None:
        self._pending.append(Change(self._revision + 1, kind, str(key), value))

    # -- clusters and membership -----------------------------------------------------

    def _create_cluster(self, command: c.CreateCluster) -> Cluster:
        names.validate_cluster(command.name)
        _check_range("group_count", command.group_count, 1, GROUP_COUNT_MAX)
        _check_range("replication_factor", command.replication_factor, 1, REPLICATION_FACTOR_MAX)
        if command.name in self._clusters:
            raise AlreadyExists(f"cluster {command.name!r} exists already")
        if self._next_group_id + command.group_count - 1 > GROUP_ID_MAX:
            raise BadRequest(
                f"no room for {command.group_count} more raft group ids "
                f"(the next is {self._next_group_id}, the largest {GROUP_ID_MAX})"
            )
        cluster = Cluster(
            command.name, command.group_count, self._next_group_id, command.replication_factor
        )
        self._next_group_id += command.group_count
        self._clusters[cluster.name] = cluster
        self._changed(ChangeKind.CLUSTER, cluster.name, cluster)
        for group_id in range(cluster.first_group_id, self._next_group_id):
            group = RaftGroup(group_id, cluster.name)
            self._raft_groups[group_id] = group
            self._changed(ChangeKind.RAFT_GROUP, group_id, group)
        return cluster

    def _storage_heartbeat(self, command: c.StorageHeartbeat) -> StorageNode:
        if command.node_id < 1:
            raise BadRequest(f"storage node id must be >= 1, got {command.node_id}")
        self.cluster(command.cluster)
        _check_address(command.address)
        known = self._storage_nodes.get(command.node_id)
        if known is None:
            node = StorageNode(
                command.node_id,
                command.cluster,
                command.address,
                alive=True,
                last_heartbeat_ms=command.now_ms,
                load=command.load,
            )
            self._storage_nodes[node.node_id] = node
            self._changed(ChangeKind.STORAGE_NODE, node.node_id, node)
            return node
        if known.cluster != command.cluster:
            raise BadRequest(
                f"storage node {command.node_id} is registered in cluster "
                f"{known.cluster!r}, not {command.cluster!r}"
            )
        node = replace(
            known,
            address=command.address,
            alive=True,
            last_heartbeat_ms=max(known.last_heartbeat_ms, command.now_ms),
            load=command.load,
        )
        self._storage_nodes[node.node_id] = node
        if node.address != known.address or not known.alive:
            self._changed(ChangeKind.STORAGE_NODE, node.node_id, node)
        return node

    def _broker_heartbeat(self, command: c.BrokerHeartbeat) -> Broker:
        if not command.broker_id:
            raise BadRequest("broker id is empty")
        self.cluster(command.cluster)
        _check_address(command.address)
        for group in command.producer_groups:
            names.validate_consumer_group(group)
        producer_groups = tuple(sorted(set(command.producer_groups)))
        known = self._brokers.get(command.broker_id)
        if known is not None and known.cluster != command.cluster:
            raise BadRequest(
                f"broker {command.broker_id!r} is registered in cluster "
                f"{known.cluster!r}, not {command.cluster!r}"
            )
        broker = Broker(
            command.broker_id,
            command.cluster,
            command.address,
            alive=True,
            last_heartbeat_ms=(
                command.now_ms if known is None else max(known.last_heartbeat_ms, command.now_ms)
            ),
            producer_groups=producer_groups,
        )
        self._brokers[broker.broker_id] = broker
        if known is None or replace(known, last_heartbeat_ms=broker.last_heartbeat_ms) != broker:
            self._changed(ChangeKind.BROKER, broker.broker_id, broker)
        return broker

    def _remove_broker(self, command: c.RemoveBroker) -> None:
        self.broker(command.broker_id)
        del self._brokers[command.broker_id]
        self._changed(ChangeKind.BROKER, command.broker_id, None)

    def _remove_storage_node(self, command: c.RemoveStorageNode) -> None:
        self.storage_node(command.node_id)
        hosted = [g.group_id for g in self._raft_groups.values() if command.node_id in g.replicas]
        if hosted:
            raise BadRequest(
                f"storage node {command.node_id} is still a replica of groups "
                f"{_ids(hosted)}; move them away first"
            )
        del self._storage_nodes[command.node_id]
        self._changed(ChangeKind.STORAGE_NODE, command.node_id, None)
        self._forget_leaderships(command.node_id)

    # -- topics and consumer groups ----------------------------------------------------

    def _create_topic(self, command: c.CreateTopic) -> Topic:
        names.validate_topic(command.name)
        cluster = self.cluster(command.cluster)
        topic = Topic(
            command.name,
            command.cluster,
            # A dead-letter topic has one queue per group (protocol.routing).
            cluster.group_count
            if routing.is_dead_letter_topic(command.name)
            else command.queue_count,
            command.message_type,
            command.retention_ms,
            command.permission,
        )
        _check_topic(topic)
        if command.name in self._topics:
            raise AlreadyExists(f"topic {command.name!r} exists already")
        self._topics[topic.name] = topic
        self._changed(ChangeKind.TOPIC, topic.name, topic)
        return topic

    def _update_topic(self, command: c.UpdateTopic) -> Topic:
        known = self.topic(command.name)
        topic = replace(
            known,
            queue_count=_or(command.queue_count, known.queue_count),
            message_type=_or(command.message_type, known.message_type),
            retention_ms=_or(command.retention_ms, known.retention_ms),
            permission=_or(command.permission, known.permission),
        )
        _check_topic(topic)
        if topic.queue_count != known.queue_count and routing.is_dead_letter_topic(topic.name):
            raise BadRequest(
                f"topic {topic.name!r} is a dead-letter topic: it has one queue per raft "
                f"group of its cluster ({known.queue_count}), not {topic.queue_count}"
            )
        if topic.queue_count < known.queue_count:
            raise BadRequest(
                f"topic {topic.name!r} has {known.queue_count} queues; the queue count "
                f"may only grow (asked for {topic.queue_count})"
            )
        if topic != known:
            self._topics[topic.name] = topic
            self._changed(ChangeKind.TOPIC, topic.name, topic)
        return topic

    def _delete_topic(self, command: c.DeleteTopic) -> None:
        self.topic(command.name)
        del self._topics[command.name]
        self._changed(ChangeKind.TOPIC, command.name, None)

    def _create_consumer_group(self, command: c.CreateConsumerGroup) -> ConsumerGroup:
        names.validate_consumer_group(command.name)
        self.cluster(command.cluster)
        group = ConsumerGroup(
            command.name,
            command.cluster,
            command.fifo,
            command.max_delivery_attempts,
            command.retry,
        )
        _check_consumer_group(group)
        if command.name in self._consumer_groups:
            raise AlreadyExists(f"consumer group {command.name!r} exists already")
        self._consumer_groups[group.name] = group
        self._changed(ChangeKind.CONSUMER_GROUP, group.name, group)
        return group

    def _update_consumer_group(self, command: c.UpdateConsumerGroup) -> ConsumerGroup:
        known = self.consumer_group(command.name)
        group = replace(
            known,
            fifo=_or(command.fifo, known.fifo),
            max_delivery_attempts=_or(command.max_delivery_attempts, known.max_delivery_attempts),
            retry=_or(command.retry, known.retry),
        )
        _check_consumer_group(group)
        if group != known:
            self._consumer_groups[group.name] = group
            self._changed(ChangeKind.CONSUMER_GROUP, group.name, group)
        return group

    def _delete_consumer_group(self, command: c.DeleteConsumerGroup) -> None:
        self.consumer_group(command.name)
        del self._consumer_groups[command.name]
        self._changed(ChangeKind.CONSUMER_GROUP, command.name, None)

    # -- raft groups -------------------------------------------------------------------

    def _set_replicas(self, command: c.SetReplicas) -> None:
        if not command.assignments:
            raise BadRequest("SetReplicas names no group")
        seen: set[int] = set()
        for assignment in command.assignments:
            group = self.raft_group(assignment.group_id)
            if assignment.group_id in seen:
                raise BadRequest(f"group {assignment.group_id} is assigned twice")
            seen.add(assignment.group_id)
            if len(set(assignment.replicas)) != len(assignment.replicas):
                raise BadRequest(
                    f"group {group.group_id}: replicas {list(assignment.replicas)} repeat a node"
                )
            moving = set(assignment.joining) | set(assignment.leaving)
            if not moving <= set(assignment.replicas) or set(assignment.joining) & set(
                assignment.leaving
            ):
                raise BadRequest(
                    f"group {group.group_id}: joining {list(assignment.joining)} and leaving "
                    f"{list(assignment.leaving)} must be distinct replicas of "
                    f"{list(assignment.replicas)}"
                )
            for node_id in assignment.replicas:
                node = self.storage_node(node_id)
                if node.cluster != group.cluster:
                    raise BadRequest(
                        f"group {group.group_id} belongs to cluster {group.cluster!r} but "
                        f"storage node {node_id} to {node.cluster!r}"
                    )
        for assignment in command.assignments:
            known = self._raft_groups[assignment.group_id]
            # A leader removed from the replicas is no longer known to lead.
            leader = known.leader if known.leader in assignment.replicas else NO_NODE
            group = replace(
                known,
                replicas=assignment.replicas,
                leader=leader,
                joining=assignment.joining,
                leaving=assignment.leaving,
            )
            if group != known:
                self._raft_groups[group.group_id] = group
                self._changed(ChangeKind.RAFT_GROUP, group.group_id, group)

    def _report_leaders(self, command: c.ReportLeaders) -> tuple[bool, ...]:
        self.storage_node(command.node_id)
        taken: list[bool] = []
        for report in command.reports:
            known = self._raft_groups.get(report.group_id)
            leader_known = report.leader == NO_NODE or report.leader in self._storage_nodes
            if known is None or not leader_known or not _is_newer(report, known):
                taken.append(False)
                continue
            taken.append(True)
            group = replace(known, leader=report.leader, term=report.term)
            if group != known:
                self._raft_groups[group.group_id] = group
                self._changed(ChangeKind.RAFT_GROUP, group.group_id, group)
        return tuple(taken)

    # -- failure detection ---------------------------------------------------------------

    def _expire(self, command: c.Expire) -> None:
        if command.storage_node_timeout_ms < 1 or command.broker_timeout_ms < 1:
            raise BadRequest("failure detection timeouts must be >= 1 ms")
        now_ms = command.now_ms
        for node in sorted(self._storage_nodes.values(), key=lambda n: n.node_id):
            if node.alive and now_ms - node.last_heartbeat_ms >= command.storage_node_timeout_ms:
                down = replace(node, alive=False)
                self._storage_nodes[node.node_id] = down
                self._changed(ChangeKind.STORAGE_NODE, node.node_id, down)
                self._forget_leaderships(node.node_id)
        for broker in sorted(self._brokers.values(), key=lambda b: b.broker_id):
            if broker.alive and now_ms - broker.last_heartbeat_ms >= command.broker_timeout_ms:
                down_broker = replace(broker, alive=False)
                self._brokers[broker.broker_id] = down_broker
                self._changed(ChangeKind.BROKER, broker.broker_id, down_broker)
        for lease in sorted(self._leases.values(), key=lambda x: x.name):
            if lease.expires_ms <= now_ms:
                del self._leases[lease.name]
                self._changed(ChangeKind.LEASE, lease.name, None)

    def _forget_leaderships(self, node_id: int) -> None:
        """The groups ``node_id`` was recorded to lead have no known leader now
        (their term stays: the next report at that term or above sets one)."""
        for group in sorted(self._raft_groups.values(), key=lambda g: g.group_id):
            if group.leader == node_id:
                leaderless = replace(group, leader=NO_NODE)
                self._raft_groups[group.group_id] = leaderless
                self._changed(ChangeKind.RAFT_GROUP, group.group_id, leaderless)

    # -- leases ----------------------------------------------------------------------------

    def _acquire_lease(self, command: c.AcquireLease) -> Lease:
        _check_lease_request(command.name, command.owner, command.ttl_ms)
        known = self._leases.get(command.name)
        if known is not None and known.owner != command.owner and known.expires_ms > command.now_ms:
            raise LeaseHeld(
                f"lease {command.name!r} is held by {known.owner!r} until {known.expires_ms}",
                known.owner,
                known.expires_ms,
            )
        same_tenure = (
            known is not None and known.owner == command.owner and known.expires_ms > command.now_ms
        )
        token = known.token if known is not None and same_tenure else self._revision + 1
        lease = Lease(command.name, command.owner, command.now_ms + command.ttl_ms, token)
        self._leases[lease.name] = lease
        self._changed(ChangeKind.LEASE, lease.name, lease)
        return lease

    def _renew_lease(self, command: c.RenewLease) -> Lease:
        _check_lease_request(command.name, command.owner, command.ttl_ms)
        known = self._leases.get(command.name)
        if known is None or known.owner != command.owner:
            raise LeaseNotHeld(f"lease {command.name!r} is not held by {command.owner!r}")
        if known.expires_ms <= command.now_ms:
            raise LeaseNotHeld(
                f"lease {command.name!r} of {command.owner!r} expired at {known.expires_ms}"
            )
        lease = replace(known, expires_ms=command.now_ms + command.ttl_ms)
        self._leases[lease.name] = lease
        self._changed(ChangeKind.LEASE, lease.name, lease)
        return lease

    def _release_lease(self, command: c.ReleaseLease) -> None:
        known = self._leases.get(command.name)
        if known is None or known.owner != command.owner:
            raise LeaseNotHeld(f"lease {command.name!r} is not held by {command.owner!r}")
        del self._leases[command.name]
        self._changed(ChangeKind.LEASE, command.name, None)

    # -- queries ---------------------------------------------------------------------------

    def cluster(self, name: str) -> Cluster:
        """The cluster named ``name``; :class:`NotFound` if there is none."""
        cluster = self._clusters.get(name)
        if cluster is None:
            raise NotFound(f"cluster {name!r} does not exist")
        return cluster

    def clusters(self) -> tuple[Cluster, ...]:
        """Every cluster, by name."""
        return _sorted(self._clusters)

    def topic(self, name: str) -> Topic:
        """The topic named ``name``; :class:`TopicNotFound` if there is none."""
        topic = self._topics.get(name)
        if topic is None:
            raise TopicNotFound(f"topic {name!r} does not exist")
        return topic

    def topics(self) -> tuple[Topic, ...]:
        """Every topic, by name."""
        return _sorted(self._topics)

    def consumer_group(self, name: str) -> ConsumerGroup:
        """The consumer group ``name``; :class:`ConsumerGroupNotFound` if there is none."""
        group = self._consumer_groups.get(name)
        if group is None:
            raise ConsumerGroupNotFound(f"consumer group {name!r} does not exist")
        return group

    def consumer_groups(self) -> tuple[ConsumerGroup, ...]:
        """Every consumer group, by name."""
        return _sorted(self._consumer_groups)

    def storage_node(self, node_id: int) -> StorageNode:
        """The storage node ``node_id``; :class:`NotFound` if it never registered."""
        node = self._storage_nodes.get(node_id)
        if node is None:
            raise NotFound(f"storage node {node_id} is not registered")
        return node

    def storage_nodes(self) -> tuple[StorageNode, ...]:
        """Every storage node, by id."""
        return _sorted(self._storage_nodes)

    def broker(self, broker_id: str) -> Broker:
        """The broker ``broker_id``; :class:`NotFound` if it is not registered."""
        broker = self._brokers.get(broker_id)
        if broker is None:
            raise NotFound(f"broker {broker_id!r} is not registered")
        return broker

    def brokers(self) -> tuple[Broker, ...]:
        """Every broker, by id."""
        return _sorted(self._brokers)

    def brokers_for_producer_group(self, producer_group: str) -> tuple[Broker, ...]:
        """The live brokers on which clients of ``producer_group`` hold a Telemetry stream."""
        return tuple(
            b for b in _sorted(self._brokers) if b.alive and producer_group in b.producer_groups
        )

    def raft_group(self, group_id: int) -> RaftGroup:
        """The raft group ``group_id``; :class:`NotFound` if no cluster has it."""
        group = self._raft_groups.get(group_id)
        if group is None:
            raise NotFound(f"raft group {group_id} does not exist")
        return group

    def groups_of_node(self, node_id: int) -> tuple[RaftGroup, ...]:
        """The raft groups listing ``node_id`` as a replica, by id: what that
        storage node should host (it reconciles its local groups to this)."""
        return tuple(g for g in _sorted(self._raft_groups) if node_id in g.replicas)

    def raft_groups(self, cluster: str) -> tuple[RaftGroup, ...]:
        """The raft groups of one cluster, by id."""
        found = self.cluster(cluster)
        end = found.first_group_id + found.group_count
        return tuple(self._raft_groups[g] for g in range(found.first_group_id, end))

    def lease(self, name: str) -> Lease | None:
        """The lease ``name`` as recorded (possibly expired: compare with now), or None."""
        return self._leases.get(name)

    def leases(self) -> tuple[Lease, ...]:
        """Every recorded lease, by name."""
        return _sorted(self._leases)

    def queue_ids(self, topic: str) -> range:
        """The queue ids of ``topic`` (for a dead-letter topic: its cluster's group ids)."""
        found = self.topic(topic)
        cluster = self._clusters[found.cluster]
        return routing.queue_ids(
            topic, found.queue_count, cluster.first_group_id, cluster.group_count
        )

    def group_of_queue(self, topic: str, queue_id: int) -> int:
        """The raft group id serving one queue of a topic (see protocol.routing)."""
        found = self.topic(topic)
        ids = self.queue_ids(topic)
        if queue_id not in ids:
            raise BadRequest(
                f"topic {topic!r} has queues {ids.start}..{ids.stop - 1}, not {queue_id}"
            )
        cluster = self._clusters[found.cluster]
        return routing.group_id(topic, queue_id, cluster.first_group_id, cluster.group_count)

    def route(self, topic: str) -> TopicRoute:
        """Where each queue of ``topic`` is served: its group, leader and followers."""
        found = self.topic(topic)
        queues = []
        for queue_id in self.queue_ids(topic):
            group = self._raft_groups[self.group_of_queue(topic, queue_id)]
            leader = self._endpoint(group.leader) if group.leader != NO_NODE else None
            followers = tuple(
                endpoint
                for node_id in group.replicas
                if node_id != group.leader and (endpoint := self._endpoint(node_id)) is not None
            )
            queues.append(QueueRoute(queue_id, group.group_id, group.term, leader, followers))
        return TopicRoute(found, tuple(queues), self._revision)

    def cluster_status(self, cluster: str) -> ClusterStatus:
        """Everything known about one cluster."""
        found = self.cluster(cluster)
        return ClusterStatus(
            found,
            tuple(n for n in _sorted(self._storage_nodes) if n.cluster == cluster),
            tuple(b for b in _sorted(self._brokers) if b.cluster == cluster),
            self.raft_groups(cluster),
            sum(1 for t in self._topics.values() if t.cluster == cluster),
            sum(1 for g in self._consumer_groups.values() if g.cluster == cluster),
            self._revision,
        )

    def changes_since(
        self, revision: int, kinds: frozenset[ChangeKind] | None = None
    ) -> WatchBatch:
        """Every change with a revision above ``revision`` (of the given
        ``kinds`` only, if given), oldest first, or ``resync_required`` when
        some of them are no longer kept (or the watcher claims a revision this
        state has not reached). The batch's ``revision`` is where to continue."""
        if revision < self._compacted_revision or revision > self._revision:
            return WatchBatch(self._revision, (), resync_required=True)
        newer: list[Change] = []
        for change in reversed(self._history):
            if change.revision <= revision:
                break
            if kinds is None or change.kind in kinds:
                newer.append(change)
        newer.reverse()
        return WatchBatch(self._revision, tuple(newer))

    def _endpoint(self, node_id: int) -> Endpoint | None:
        node = self._storage_nodes.get(node_id)
        return None if node is None else Endpoint(node.node_id, node.address, node.alive)

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """Deterministic bytes of the whole state, change history included."""
        tables = _Tables(
            self._revision,
            self._compacted_revision,
            self._next_group_id,
            _sorted(self._clusters),
            _sorted(self._storage_nodes),
            _sorted(self._brokers),
            _sorted(self._topics),
            _sorted(self._consumer_groups),
            _sorted(self._raft_groups),
            _sorted(self._leases),
        )
        history = [change_to_wire(change) for change in self._history]
        return pack([SNAPSHOT_VERSION, to_wire(tables), history])

    @classmethod
    def restore(cls, data: bytes, history_max: int = HISTORY_MAX_DEFAULT) -> MetadataState:
        """The state a :meth:`snapshot` was taken of. A smaller ``history_max``
        drops the oldest changes (watchers behind them will resync)."""
        raw = unpack_raw(data)
        if not isinstance(raw, list) or len(raw) != 3 or raw[0] != SNAPSHOT_VERSION:
            raise DecodeFailed(f"not a version {SNAPSHOT_VERSION} nameserver snapshot")
        tables: _Tables = from_wire(_Tables, raw[1])
        if not isinstance(raw[2], list):
            raise DecodeFailed("snapshot history is not an array")
        state = cls(history_max)
        state._revision = tables.revision
        state._compacted_revision = tables.compacted_revision
        state._next_group_id = tables.next_group_id
        state._clusters = {x.name: x for x in tables.clusters}
        state._storage_nodes = {x.node_id: x for x in tables.storage_nodes}
        state._brokers = {x.broker_id: x for x in tables.brokers}
        state._topics = {x.name: x for x in tables.topics}
        state._consumer_groups = {x.name: x for x in tables.consumer_groups}
        state._raft_groups = {x.group_id: x for x in tables.raft_groups}
        state._leases = {x.name: x for x in tables.leases}
        state._history = deque(change_from_wire(item) for item in raw[2])
        while len(state._history) > history_max:
            state._compacted_revision = state._history.popleft().revision
        return state


# -- checks ---------------------------------------------------------------------------------


def _check_range(what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise BadRequest(f"{what} must be in [{low}, {high}], got {value}")


def _check_address(address: str) -> None:
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadRequest(f"address {address!r} is not host:port")


def _check_topic(topic: Topic) -> None:
    if not routing.is_dead_letter_topic(topic.name):
        _check_range(f"topic {topic.name!r}: queue_count", topic.queue_count, 1, QUEUE_COUNT_MAX)
    if topic.retention_ms < 1:
        raise BadRequest(
            f"topic {topic.name!r}: retention_ms must be >= 1, got {topic.retention_ms}"
        )


def _check_consumer_group(group: ConsumerGroup) -> None:
    _check_range(
        f"consumer group {group.name!r}: max_delivery_attempts",
        group.max_delivery_attempts,
        1,
        MAX_DELIVERY_ATTEMPTS_MAX,
    )
    _check_retry(group.name, group.retry)


def _check_retry(name: str, retry: RetryPolicy) -> None:
    where = f"consumer group {name!r}: retry"
    if retry.initial_backoff_ms < 0 or retry.max_backoff_ms < retry.initial_backoff_ms:
        raise BadRequest(
            f"{where} needs 0 <= initial_backoff_ms <= max_backoff_ms, got "
            f"{retry.initial_backoff_ms} and {retry.max_backoff_ms}"
        )
    if not retry.multiplier >= 1.0:
        raise BadRequest(f"{where} multiplier must be >= 1, got {retry.multiplier}")
    if any(b < 0 for b in retry.backoff_ms):
        raise BadRequest(f"{where} backoff_ms must all be >= 0, got {list(retry.backoff_ms)}")


def _check_lease_request(name: str, owner: str, ttl_ms: int) -> None:
    if not name or len(name) > LEASE_NAME_LENGTH_MAX:
        raise BadRequest(f"lease name must be 1..{LEASE_NAME_LENGTH_MAX} characters")
    if not owner:
        raise BadRequest(f"lease {name!r}: owner is empty")
    if ttl_ms < 1:
        raise BadRequest(f"lease {name!r}: ttl_ms must be >= 1, got {ttl_ms}")


def _is_newer(report: c.LeaderReport, known: RaftGroup) -> bool:
    """Raft has at most one leader per term: a report is news if its term is
    higher, or equal while no leader is recorded for that term."""
    if report.term > known.term:
        return True
    return report.term == known.term and known.leader == NO_NODE and report.leader != NO_NODE


def _or(value: T | None, default: T) -> T:
    return default if value is None else value


def _sorted(table: dict[Any, V]) -> tuple[V, ...]:
    return tuple(table[key] for key in sorted(table))


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(str(i) for i in sorted(ids))
