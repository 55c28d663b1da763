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

from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from nameserver import commands as c
from nameserver import names
from nameserver.codec import from_wire, pack, to_wire, unpack_raw
from nameserver.errors import (
    AlreadyExists,
    BadRequest,
    DecodeFailed,
    LeaseHeld,
    LeaseNotHeld,
    NameserverError,
    NotFound,
)
from nameserver.queries import HISTORY_MAX_DEFAULT, MetadataQueries, by_key
from nameserver.records import (
    NO_NODE,
    Broker,
    Change,
    ChangeKind,
    Cluster,
    ConsumerGroup,
    Lease,
    RaftGroup,
    Record,
    StorageNode,
    Topic,
    change_from_wire,
    change_to_wire,
)
from nameserver.validation import (
    CREATE_TOPICS_MAX,
    GROUP_COUNT_MAX,
    REPLICATION_FACTOR_MAX,
    check_address,
    check_consumer_group,
    check_lease_request,
    check_range,
    check_topic,
)
from protocol import routing
from protocol.acl import Acl, AclTables, InvalidAcl, User, check_acl, check_user, merge_entries

SNAPSHOT_VERSION = 1
FIRST_GROUP_ID = 1
"""Raft group ids start at 1 (the raft WAL reserves group 0)."""
GROUP_ID_MAX = 2**32 - 1
"""The largest raft group id the raft WAL can record."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Applied:
    """What applying one command did.

    ``revision``: the state's revision afterwards (unchanged if ``changes`` is
    empty). ``value``: the command's answer: the record created or updated
    (topics, groups, nodes, brokers, leases, the cluster), a tuple of booleans
    for ``ReportLeaders`` (which reports were taken), the tuple of topics
    created for ``CreateTopics``, None otherwise.
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


class MetadataState(MetadataQueries):
    """Clusters, storage nodes, brokers, topics, consumer groups, raft groups and
    leases, changed only by :meth:`apply` (read by :class:`MetadataQueries`' methods)."""

    def __init__(self, history_max: int = HISTORY_MAX_DEFAULT) -> None:
        """An empty state keeping the last ``history_max`` changes for watchers."""
        super().__init__(history_max)
        self._next_group_id = FIRST_GROUP_ID
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
            c.DrainStorageNode: self._drain_storage_node,
            c.CreateUser: self._create_user,
            c.UpdateUser: self._update_user,
            c.DeleteUser: self._delete_user,
            c.PutAcl: self._put_acl,
            c.DeleteAcl: self._delete_acl,
            c.CreateTopics: self._create_topics,
        }

    # -- applying ------------------------------------------------------------------

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
            if any(change.kind is ChangeKind.TOPIC for change in changes):
                self._topics_revision = self._revision
            self._history.extend(changes)
            while len(self._history) > self._history_max:
                self._compacted_revision = self._history.popleft().revision
        return Applied(self._revision, changes, value)

    def _changed(self, kind: ChangeKind, key: object, value: Record | None) -> None:
        self._pending.append(Change(self._revision + 1, kind, str(key), value))

    # -- clusters and membership -----------------------------------------------------

    def _create_cluster(self, command: c.CreateCluster) -> Cluster:
        names.validate_cluster(command.name)
        check_range("group_count", command.group_count, 1, GROUP_COUNT_MAX)
        check_range("replication_factor", command.replication_factor, 1, REPLICATION_FACTOR_MAX)
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
        check_address(command.address)
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
        check_address(command.address)
        if command.remoting_address:
            check_address(command.remoting_address)
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
            remoting_address=command.remoting_address,
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

    def _drain_storage_node(self, command: c.DrainStorageNode) -> StorageNode:
        node = replace(self.storage_node(command.node_id), draining=command.draining)
        self._storage_nodes[node.node_id] = node
        self._changed(ChangeKind.STORAGE_NODE, node.node_id, node)
        return node

    # -- topics and consumer groups ----------------------------------------------------

    def _create_topic(self, command: c.CreateTopic) -> Topic:
        topic = self._new_topic(command)
        if command.name in self._topics:
            raise AlreadyExists(f"topic {command.name!r} exists already")
        self._topics[topic.name] = topic
        self._topics_by_cluster[topic.cluster] += 1
        self._changed(ChangeKind.TOPIC, topic.name, topic)
        return topic

    def _create_topics(self, command: c.CreateTopics) -> tuple[Topic, ...]:
        """Every topic of the entry checked before the first is written; the topics
        created (with ``skip_existing``, without those that existed)."""
        check_range("topics in one CreateTopics", len(command.topics), 1, CREATE_TOPICS_MAX)
        created: dict[str, Topic] = {}
        for index, one in enumerate(command.topics):
            try:
                topic = self._new_topic(one)
                if one.name in created:
                    raise AlreadyExists(f"topic {one.name!r} is given twice")
                if one.name in self._topics:
                    if command.skip_existing:
                        continue
                    raise AlreadyExists(f"topic {one.name!r} exists already")
            except NameserverError as error:
                raise type(error)(
                    f"topics[{index}] ({one.name!r}) refused, so none of the "
                    f"{len(command.topics)} was created: {error}"
                ) from None
            created[topic.name] = topic
        for topic in created.values():
            self._topics[topic.name] = topic
            self._topics_by_cluster[topic.cluster] += 1
            self._changed(ChangeKind.TOPIC, topic.name, topic)
        return tuple(created.values())

    def _new_topic(self, command: c.CreateTopic) -> Topic:
        """The topic ``command`` creates, checked (not yet written)."""
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
            command.retention_bytes,
            command.local_retention_ms,
            command.local_retention_bytes,
            command.read_replicas,
        )
        check_topic(topic, cluster.replication_factor)
        return topic

    def _update_topic(self, command: c.UpdateTopic) -> Topic:
        known = self.topic(command.name)
        topic = replace(
            known,
            queue_count=_or(command.queue_count, known.queue_count),
            message_type=_or(command.message_type, known.message_type),
            retention_ms=_or(command.retention_ms, known.retention_ms),
            permission=_or(command.permission, known.permission),
            retention_bytes=_or(command.retention_bytes, known.retention_bytes),
            local_retention_ms=_or(command.local_retention_ms, known.local_retention_ms),
            local_retention_bytes=_or(command.local_retention_bytes, known.local_retention_bytes),
            read_replicas=_or(command.read_replicas, known.read_replicas),
        )
        check_topic(topic, self.cluster(topic.cluster).replication_factor)
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
        _discount(self._topics_by_cluster, self.topic(command.name).cluster)
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
        check_consumer_group(group)
        if command.name in self._consumer_groups:
            raise AlreadyExists(f"consumer group {command.name!r} exists already")
        self._consumer_groups[group.name] = group
        self._groups_by_cluster[group.cluster] += 1
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
        check_consumer_group(group)
        if group != known:
            self._consumer_groups[group.name] = group
            self._changed(ChangeKind.CONSUMER_GROUP, group.name, group)
        return group

    def _delete_consumer_group(self, command: c.DeleteConsumerGroup) -> None:
        _discount(self._groups_by_cluster, self.consumer_group(command.name).cluster)
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
        check_lease_request(command.name, command.owner, command.ttl_ms)
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
        check_lease_request(command.name, command.owner, command.ttl_ms)
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

    # -- access control (ACL 2.0) ---------------------------------------------------------
    # Users and policies are read whole (``acl_tables``) by brokers, not watched: their
    # commands bump no revision and emit no change.

    def _create_user(self, command: c.CreateUser) -> User:
        _checked(check_user, command.user)
        if command.user.name in self._users:
            raise AlreadyExists(f"user {command.user.name!r} exists already")
        self._users[command.user.name] = command.user
        return command.user

    def _update_user(self, command: c.UpdateUser) -> User:
        known = self._user(command.name)
        user = replace(
            known,
            secret=_or(command.secret, known.secret),
            user_type=_or(command.user_type, known.user_type),
        )
        _checked(check_user, user)
        self._users[user.name] = user
        return user

    def _delete_user(self, command: c.DeleteUser) -> None:
        self._user(command.name)
        del self._users[command.name]
        self._acls.pop(command.name, None)

    def _put_acl(self, command: c.PutAcl) -> Acl:
        self._user(command.subject)
        known = self._acls.get(command.subject)
        if command.create and known is not None:
            raise AlreadyExists(f"user {command.subject!r} has a policy already (update it)")
        entries = (
            command.entries if known is None else merge_entries(known.entries, command.entries)
        )
        acl = Acl(command.subject, entries)
        _checked(check_acl, acl)
        self._acls[acl.subject] = acl
        return acl

    def _delete_acl(self, command: c.DeleteAcl) -> Acl | None:
        known = self._acls.get(command.subject)
        if known is None:
            raise NotFound(f"user {command.subject!r} has no policy")
        if not command.resources:
            del self._acls[command.subject]
            return None
        missing = [
            r.text for r in command.resources if r not in {e.resource for e in known.entries}
        ]
        if missing:
            raise NotFound(
                f"the policy of {command.subject!r} has no entry for {', '.join(missing)}"
            )
        acl = Acl(
            known.subject, tuple(e for e in known.entries if e.resource not in command.resources)
        )
        self._acls[acl.subject] = acl
        return acl

    def _user(self, name: str) -> User:
        user = self._users.get(name)
        if user is None:
            raise NotFound(f"user {name!r} does not exist")
        return user

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """Deterministic bytes of the whole state, change history included."""
        tables = _Tables(
            self._revision,
            self._compacted_revision,
            self._next_group_id,
            by_key(self._clusters),
            by_key(self._storage_nodes),
            by_key(self._brokers),
            by_key(self._topics),
            by_key(self._consumer_groups),
            by_key(self._raft_groups),
            by_key(self._leases),
        )
        history = [change_to_wire(change) for change in self._history]
        # The ACL tables travel as a fourth item only when there are any, so a
        # snapshot of a cluster without ACL keeps its bytes (and older readers).
        acl = self.acl_tables()
        tail = [to_wire(acl)] if acl.users or acl.acls else []
        return pack([SNAPSHOT_VERSION, to_wire(tables), history, *tail])

    @classmethod
    def restore(cls, data: bytes, history_max: int = HISTORY_MAX_DEFAULT) -> MetadataState:
        """The state a :meth:`snapshot` was taken of. A smaller ``history_max``
        drops the oldest changes (watchers behind them will resync)."""
        raw = unpack_raw(data)
        if not isinstance(raw, list) or len(raw) not in (3, 4) or raw[0] != SNAPSHOT_VERSION:
            raise DecodeFailed(f"not a version {SNAPSHOT_VERSION} nameserver snapshot")
        tables: _Tables = from_wire(_Tables, raw[1])
        if not isinstance(raw[2], list):
            raise DecodeFailed("snapshot history is not an array")
        state = cls(history_max)
        state._revision = tables.revision
        state._compacted_revision = tables.compacted_revision
        state._topics_revision = tables.revision  # no later than the snapshot
        state._next_group_id = tables.next_group_id
        state._clusters = {x.name: x for x in tables.clusters}
        state._storage_nodes = {x.node_id: x for x in tables.storage_nodes}
        state._brokers = {x.broker_id: x for x in tables.brokers}
        state._topics = {x.name: x for x in tables.topics}
        state._consumer_groups = {x.name: x for x in tables.consumer_groups}
        state._topics_by_cluster = Counter(x.cluster for x in tables.topics)
        state._groups_by_cluster = Counter(x.cluster for x in tables.consumer_groups)
        state._raft_groups = {x.group_id: x for x in tables.raft_groups}
        state._leases = {x.name: x for x in tables.leases}
        if len(raw) == 4:
            acl: AclTables = from_wire(AclTables, raw[3])
            state._users = {x.name: x for x in acl.users}
            state._acls = {x.subject: x for x in acl.acls}
        state._history = deque(change_from_wire(item) for item in raw[2])
        while len(state._history) > history_max:
            state._compacted_revision = state._history.popleft().revision
        return state


def _is_newer(report: c.LeaderReport, known: RaftGroup) -> bool:
    """Raft has at most one leader per term: a report is news if its term is
    higher, or equal while no leader is recorded for that term."""
    if report.term > known.term:
        return True
    return report.term == known.term and known.leader == NO_NODE and report.leader != NO_NODE


def _checked(check: Callable[[Any], None], value: object) -> None:
    """Run a pure ACL check, its refusal as the nameserver's BAD_REQUEST."""
    try:
        check(value)
    except InvalidAcl as error:
        raise BadRequest(str(error)) from None


def _discount(counts: Counter[str], key: str) -> None:
    """One fewer of ``key`` in ``counts``; a count that reaches 0 goes (as none counted)."""
    counts[key] -= 1
    if not counts[key]:
        del counts[key]


def _or(value: T | None, default: T) -> T:
    return default if value is None else value


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(str(i) for i in sorted(ids))
