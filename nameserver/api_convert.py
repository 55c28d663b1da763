"""Between the nameserver's records and the wire types of protocol.nameserver_api.

PURE.
"""

from __future__ import annotations

from dataclasses import replace

from nameserver import records as r
from protocol import nameserver_api as api


def cluster_info(cluster: r.Cluster) -> api.ClusterInfo:
    """The wire form of a cluster."""
    return api.ClusterInfo(
        cluster.name, cluster.group_count, cluster.first_group_id, cluster.replication_factor
    )


def topic_info(topic: r.Topic) -> api.TopicInfo:
    """The wire form of a topic."""
    return api.TopicInfo(
        topic.name,
        topic.cluster,
        topic.queue_count,
        int(topic.message_type),
        topic.retention_ms,
        int(topic.permission),
        topic.retention_bytes,
        topic.local_retention_ms,
        topic.local_retention_bytes,
        topic.read_replicas,
    )


def retry_info(retry: r.RetryPolicy) -> api.RetryInfo:
    """The wire form of a retry policy."""
    return api.RetryInfo(
        retry.initial_backoff_ms, retry.max_backoff_ms, retry.multiplier, list(retry.backoff_ms)
    )


def retry_policy(retry: api.RetryInfo) -> r.RetryPolicy:
    """A retry policy from its wire form."""
    return r.RetryPolicy(
        retry.initial_backoff_ms, retry.max_backoff_ms, retry.multiplier, tuple(retry.backoff_ms)
    )


def consumer_group_info(group: r.ConsumerGroup) -> api.ConsumerGroupInfo:
    """The wire form of a consumer group."""
    return api.ConsumerGroupInfo(
        group.name, group.cluster, group.fifo, group.max_delivery_attempts, retry_info(group.retry)
    )


def endpoint_info(endpoint: r.Endpoint) -> api.EndpointInfo:
    """The wire form of a route endpoint."""
    return api.EndpointInfo(endpoint.node_id, endpoint.address, endpoint.alive)


def route_response(route: r.TopicRoute) -> api.RouteResponse:
    """The wire form of a topic route."""
    return api.RouteResponse(
        topic_info(route.topic),
        [
            api.QueueRouteInfo(
                q.queue_id,
                q.group_id,
                q.term,
                None if q.leader is None else endpoint_info(q.leader),
                [endpoint_info(f) for f in q.followers],
            )
            for q in route.queues
        ],
        route.revision,
    )


def storage_node_info(node: r.StorageNode) -> api.StorageNodeInfo:
    """The wire form of a storage node."""
    load = node.load
    return api.StorageNodeInfo(
        node.node_id,
        node.cluster,
        node.address,
        node.alive,
        node.last_heartbeat_ms,
        load.groups,
        load.leaders,
        load.bytes,
        load.msgs_per_s,
        load.disk_free_bytes,
        draining=node.draining,
    )


def broker_info(broker: r.Broker) -> api.BrokerInfo:
    """The wire form of a broker."""
    return api.BrokerInfo(
        broker.broker_id,
        broker.cluster,
        broker.address,
        broker.alive,
        broker.last_heartbeat_ms,
        list(broker.producer_groups),
        broker.remoting_address,
    )


def raft_group_info(group: r.RaftGroup) -> api.RaftGroupInfo:
    """The wire form of a raft group."""
    return api.RaftGroupInfo(
        group.group_id,
        group.cluster,
        list(group.replicas),
        group.leader,
        group.term,
        list(group.joining),
        list(group.leaving),
    )


def lease_info(lease: r.Lease) -> api.LeaseInfo:
    """The wire form of a lease."""
    return api.LeaseInfo(lease.name, lease.owner, lease.expires_ms, lease.token)


def cluster_status_response(status: r.ClusterStatus) -> api.ClusterStatusResponse:
    """The wire form of a cluster's status."""
    return api.ClusterStatusResponse(
        cluster_info(status.cluster),
        [storage_node_info(n) for n in status.storage_nodes],
        [broker_info(b) for b in status.brokers],
        [raft_group_info(g) for g in status.groups],
        status.topic_count,
        status.consumer_group_count,
        status.revision,
    )


def change_info(change: r.Change) -> api.ChangeInfo:
    """The wire form of a change: the record goes in the field of its kind."""
    value = change.value
    info = api.ChangeInfo(change.revision, int(change.kind), change.key, value is None)
    if isinstance(value, r.Cluster):
        return _with(info, cluster=cluster_info(value))
    if isinstance(value, r.StorageNode):
        return _with(info, storage_node=storage_node_info(value))
    if isinstance(value, r.Broker):
        return _with(info, broker=broker_info(value))
    if isinstance(value, r.Topic):
        return _with(info, topic=topic_info(value))
    if isinstance(value, r.ConsumerGroup):
        return _with(info, consumer_group=consumer_group_info(value))
    if isinstance(value, r.RaftGroup):
        return _with(info, raft_group=raft_group_info(value))
    if isinstance(value, r.Lease):
        return _with(info, lease=lease_info(value))
    return info


def _with(info: api.ChangeInfo, **record: object) -> api.ChangeInfo:
    return replace(info, **record)  # type: ignore[arg-type]


def watch_batch_info(batch: r.WatchBatch) -> api.WatchBatchInfo:
    """The wire form of a watch batch."""
    return api.WatchBatchInfo(
        batch.revision, [change_info(c) for c in batch.changes], batch.resync_required
    )
