"""The metadata's tables and the read-only queries on them.

:class:`MetadataQueries` holds the records (clusters, storage nodes, brokers,
topics, consumer groups, raft groups, leases) and the change history, and
answers reads: lookups, routes, cluster status and the changes a watcher has
not seen. :class:`nameserver.state.MetadataState` adds apply and snapshots,
the only ways the tables change. A query changes nothing.

PURE.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any, TypeVar

from nameserver.errors import BadRequest, ConsumerGroupNotFound, NotFound, TopicNotFound
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
    StorageNode,
    Topic,
    TopicRoute,
    WatchBatch,
)
from protocol import routing
from protocol.acl import Acl, AclTables, User

HISTORY_MAX_DEFAULT = 10_000

V = TypeVar("V")


class MetadataQueries:
    """The metadata's tables and change history, and the queries that read them."""

    def __init__(self, history_max: int = HISTORY_MAX_DEFAULT) -> None:
        """Empty tables; the last ``history_max`` changes are kept for watchers."""
        if history_max < 1:
            raise ValueError(f"history_max must be >= 1, got {history_max}")
        self._history_max = history_max
        self._revision = 0
        # Every change with revision <= this may be missing from the history.
        self._compacted_revision = 0
        # No topic changed after this revision (the last topic change's, or later).
        self._topics_revision = 0
        self._clusters: dict[str, Cluster] = {}
        self._storage_nodes: dict[int, StorageNode] = {}
        self._brokers: dict[str, Broker] = {}
        self._topics: dict[str, Topic] = {}
        self._consumer_groups: dict[str, ConsumerGroup] = {}
        # Kept as the tables change (the metrics ask every second): len(_topics) and
        # len(_consumer_groups) by cluster, no cluster with a zero count.
        self._topics_by_cluster: Counter[str] = Counter()
        self._groups_by_cluster: Counter[str] = Counter()
        self._raft_groups: dict[int, RaftGroup] = {}
        self._leases: dict[str, Lease] = {}
        self._users: dict[str, User] = {}  # ACL users by name
        self._acls: dict[str, Acl] = {}  # ACL policies by subject
        self._history: deque[Change] = deque()

    @property
    def revision(self) -> int:
        """The revision of the last change applied (0 for an empty state)."""
        return self._revision

    @property
    def topics_revision(self) -> int:
        """A revision no topic changed after: the last topic change's (after a
        restore, the snapshot's revision, which is no earlier)."""
        return self._topics_revision

    def acl_tables(self) -> AclTables:
        """Every ACL user and policy, each in name order."""
        return AclTables(by_key(self._users), by_key(self._acls))

    def cluster(self, name: str) -> Cluster:
        """The cluster named ``name``; :class:`NotFound` if there is none."""
        cluster = self._clusters.get(name)
        if cluster is None:
            raise NotFound(f"cluster {name!r} does not exist")
        return cluster

    def clusters(self) -> tuple[Cluster, ...]:
        """Every cluster, by name."""
        return by_key(self._clusters)

    def topic(self, name: str) -> Topic:
        """The topic named ``name``; :class:`TopicNotFound` if there is none."""
        topic = self._topics.get(name)
        if topic is None:
            raise TopicNotFound(f"topic {name!r} does not exist")
        return topic

    def topics(self) -> tuple[Topic, ...]:
        """Every topic, by name."""
        return by_key(self._topics)

    def counts_by_cluster(self) -> tuple[Counter[str], Counter[str]]:
        """How many topics and how many consumer groups each cluster has (copies of
        counts kept as topics and groups come and go: the metrics ask every second,
        and a walk over a million queues' topics would cost every second)."""
        return Counter(self._topics_by_cluster), Counter(self._groups_by_cluster)

    def consumer_group(self, name: str) -> ConsumerGroup:
        """The consumer group ``name``; :class:`ConsumerGroupNotFound` if there is none."""
        group = self._consumer_groups.get(name)
        if group is None:
            raise ConsumerGroupNotFound(f"consumer group {name!r} does not exist")
        return group

    def consumer_groups(self) -> tuple[ConsumerGroup, ...]:
        """Every consumer group, by name."""
        return by_key(self._consumer_groups)

    def storage_node(self, node_id: int) -> StorageNode:
        """The storage node ``node_id``; :class:`NotFound` if it never registered."""
        node = self._storage_nodes.get(node_id)
        if node is None:
            raise NotFound(f"storage node {node_id} is not registered")
        return node

    def storage_nodes(self) -> tuple[StorageNode, ...]:
        """Every storage node, by id."""
        return by_key(self._storage_nodes)

    def broker(self, broker_id: str) -> Broker:
        """The broker ``broker_id``; :class:`NotFound` if it is not registered."""
        broker = self._brokers.get(broker_id)
        if broker is None:
            raise NotFound(f"broker {broker_id!r} is not registered")
        return broker

    def brokers(self) -> tuple[Broker, ...]:
        """Every broker, by id."""
        return by_key(self._brokers)

    def brokers_for_producer_group(self, producer_group: str) -> tuple[Broker, ...]:
        """The live brokers on which clients of ``producer_group`` hold a Telemetry stream."""
        return tuple(
            b for b in by_key(self._brokers) if b.alive and producer_group in b.producer_groups
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
        return tuple(g for g in by_key(self._raft_groups) if node_id in g.replicas)

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
        return by_key(self._leases)

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
        cluster = self._clusters[found.cluster]
        first, count = cluster.first_group_id, cluster.group_count
        # One Endpoint per node of the route (they are immutable): queues share them.
        endpoints: dict[int, Endpoint | None] = {}

        def endpoint(node_id: int) -> Endpoint | None:
            if node_id not in endpoints:
                endpoints[node_id] = self._endpoint(node_id)
            return endpoints[node_id]

        queues = []
        for queue_id in routing.queue_ids(topic, found.queue_count, first, count):
            group = self._raft_groups[routing.group_id(topic, queue_id, first, count)]
            leader = endpoint(group.leader) if group.leader != NO_NODE else None
            followers = tuple(
                found_endpoint
                for node_id in group.replicas
                if node_id != group.leader and (found_endpoint := endpoint(node_id)) is not None
            )
            queues.append(QueueRoute(queue_id, group.group_id, group.term, leader, followers))
        return TopicRoute(found, tuple(queues), self._revision)

    def cluster_status(self, cluster: str) -> ClusterStatus:
        """Everything known about one cluster."""
        found = self.cluster(cluster)
        topics, groups = self.counts_by_cluster()
        return ClusterStatus(
            found,
            tuple(n for n in by_key(self._storage_nodes) if n.cluster == cluster),
            tuple(b for b in by_key(self._brokers) if b.cluster == cluster),
            self.raft_groups(cluster),
            topics[cluster],
            groups[cluster],
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


def by_key(table: dict[Any, V]) -> tuple[V, ...]:
    """The values of ``table`` in key order."""
    return tuple(table[key] for key in sorted(table))
