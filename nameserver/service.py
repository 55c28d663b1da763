"""The nameserver's Angelia service (``NameserverService``) on one node:
:class:`NameserverImpl`, its metadata calls (topics, consumer groups, clusters,
leases, routes, watches) with the ACL calls (``nameserver.acl_service``) and the
cluster calls (``nameserver.cluster_service``) it is built from. How a call
writes and reads (through the raft group, linearizably) is
``nameserver.service_base``; what the leader does on its own,
``nameserver.leader_duties``.

Contract of a watch: it streams batches of changes after the asked revision,
oldest first, with nothing skipped; a watcher too far behind gets one batch with
``resync_required`` and the stream goes on from the current revision.

SHELL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar

from angelia_rpc import CallContext
from angelia_rpc.errors import from_exception, to_wire
from nameserver import commands as c
from nameserver import records as r
from nameserver.acl_service import AclCalls
from nameserver.api_convert import (
    cluster_info,
    consumer_group_info,
    lease_info,
    retry_policy,
    route_response,
    topic_info,
    watch_batch_info,
)
from nameserver.cluster_service import ClusterCalls
from nameserver.errors import BadRequest, NameserverError
from nameserver.state import MetadataState
from nameserver.validation import CREATE_TOPICS_MAX
from protocol import nameserver_api as api
from protocol.acl import Action, ResourceType
from protocol.vocabulary import MessageType, Permission

_InCluster = TypeVar("_InCluster", r.Topic, r.ConsumerGroup)

ROUTES_NAMES_MAX = 1024
"""The most topics one ``routes`` call may name (a broker joins fewer)."""

WATCH_IDLE_MS = 3000
"""A watch quiet this long re-confirms (ReadIndex) and sends an empty batch: a
stream whose replica lost touch with its group's leader ends instead of
staying silently open, so a watcher can bound how stale its view is."""


class NameserverImpl(ClusterCalls, AclCalls):
    """The server side of :class:`NameserverService` on one node."""

    # -- topics ----------------------------------------------------------------------

    async def create_cluster(
        self, request: api.CreateClusterRequest, context: CallContext
    ) -> api.ClusterResponse:
        """Create a cluster."""
        applied = await self.propose(
            c.CreateCluster(request.name, request.group_count, request.replication_factor)
        )
        assert isinstance(applied.value, r.Cluster)
        return api.ClusterResponse(cluster_info(applied.value), applied.revision)

    async def create_topic(
        self, request: api.CreateTopicRequest, context: CallContext
    ) -> api.TopicResponse:
        """Create a topic."""
        self._authenticate_admin(request.signed, Action.CREATE, (ResourceType.TOPIC, request.name))
        applied = await self.propose(_create_topic(request))
        assert isinstance(applied.value, r.Topic)
        return api.TopicResponse(topic_info(applied.value), applied.revision)

    async def create_topics(
        self, request: api.CreateTopicsRequest, context: CallContext
    ) -> api.CreateTopicsResponse:
        """Create many topics in one log entry (all or nothing)."""
        if len(request.topics) > CREATE_TOPICS_MAX:
            raise BadRequest(
                f"{len(request.topics)} topics in one request; the maximum is "
                f"{CREATE_TOPICS_MAX} (send several requests)"
            )
        if request.topics:
            self._authenticate_admin(
                request.signed,
                Action.CREATE,
                *((ResourceType.TOPIC, t.name) for t in request.topics),
            )
        topics = []
        for index, topic in enumerate(request.topics):
            try:
                topics.append(_create_topic(topic))
            except BadRequest as error:
                raise BadRequest(f"topics[{index}] ({topic.name!r}): {error}") from None
        applied = await self.propose(c.CreateTopics(tuple(topics), request.skip_existing))
        assert isinstance(applied.value, tuple)
        return api.CreateTopicsResponse(len(applied.value), applied.revision)

    async def update_topic(
        self, request: api.UpdateTopicRequest, context: CallContext
    ) -> api.TopicResponse:
        """Change a topic."""
        self._authenticate_admin(request.signed, Action.UPDATE, (ResourceType.TOPIC, request.name))
        applied = await self.propose(
            c.UpdateTopic(
                request.name,
                request.queue_count,
                None
                if request.message_type is None
                else _enum(MessageType, request.message_type, "message_type"),
                request.retention_ms,
                None
                if request.permission is None
                else _enum(Permission, request.permission, "permission"),
                request.retention_bytes,
                request.local_retention_ms,
                request.local_retention_bytes,
                request.read_replicas,
            )
        )
        assert isinstance(applied.value, r.Topic)
        return api.TopicResponse(topic_info(applied.value), applied.revision)

    async def delete_topic(
        self, request: api.NameRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Delete a topic."""
        self._authenticate_admin(request.signed, Action.DELETE, (ResourceType.TOPIC, request.name))
        applied = await self.propose(c.DeleteTopic(request.name))
        return api.RevisionResponse(applied.revision)

    async def get_topic(self, request: api.NameRequest, context: CallContext) -> api.TopicResponse:
        """One topic (linearizable)."""
        state = await self.linearizable()
        return api.TopicResponse(topic_info(state.topic(request.name)), state.revision)

    async def list_topics(
        self, request: api.ListRequest, context: CallContext
    ) -> api.TopicListResponse:
        """Topics, of one cluster or all (linearizable); ``unchanged`` and none listed
        when no topic changed after ``request.unchanged_since``."""
        state = await self.linearizable()
        since = request.unchanged_since
        if since > 0 and state.topics_revision <= since <= state.revision:
            return api.TopicListResponse([], state.revision, unchanged=True)
        topics = _of_cluster(state, request.cluster, state.topics())
        return api.TopicListResponse(list(map(topic_info, topics)), state.revision)

    # -- consumer groups -------------------------------------------------------------

    async def create_consumer_group(
        self, request: api.CreateConsumerGroupRequest, context: CallContext
    ) -> api.ConsumerGroupResponse:
        """Create a consumer group."""
        self._authenticate_admin(request.signed, Action.CREATE, (ResourceType.GROUP, request.name))
        retry = r.RETRY_DEFAULT if request.retry is None else retry_policy(request.retry)
        applied = await self.propose(
            c.CreateConsumerGroup(
                request.name, request.cluster, request.fifo, request.max_delivery_attempts, retry
            )
        )
        assert isinstance(applied.value, r.ConsumerGroup)
        return api.ConsumerGroupResponse(consumer_group_info(applied.value), applied.revision)

    async def update_consumer_group(
        self, request: api.UpdateConsumerGroupRequest, context: CallContext
    ) -> api.ConsumerGroupResponse:
        """Change a consumer group."""
        self._authenticate_admin(request.signed, Action.UPDATE, (ResourceType.GROUP, request.name))
        retry = None if request.retry is None else retry_policy(request.retry)
        applied = await self.propose(
            c.UpdateConsumerGroup(request.name, request.fifo, request.max_delivery_attempts, retry)
        )
        assert isinstance(applied.value, r.ConsumerGroup)
        return api.ConsumerGroupResponse(consumer_group_info(applied.value), applied.revision)

    async def delete_consumer_group(
        self, request: api.NameRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Delete a consumer group."""
        self._authenticate_admin(request.signed, Action.DELETE, (ResourceType.GROUP, request.name))
        applied = await self.propose(c.DeleteConsumerGroup(request.name))
        return api.RevisionResponse(applied.revision)

    async def get_consumer_group(
        self, request: api.NameRequest, context: CallContext
    ) -> api.ConsumerGroupResponse:
        """One consumer group (linearizable)."""
        state = await self.linearizable()
        group = state.consumer_group(request.name)
        return api.ConsumerGroupResponse(consumer_group_info(group), state.revision)

    async def list_consumer_groups(
        self, request: api.ListRequest, context: CallContext
    ) -> api.ConsumerGroupListResponse:
        """Consumer groups, of one cluster or all (linearizable)."""
        state = await self.linearizable()
        groups = _of_cluster(state, request.cluster, state.consumer_groups())
        return api.ConsumerGroupListResponse(list(map(consumer_group_info, groups)), state.revision)

    # -- routes -----------------------------------------------------------------------

    async def route(self, request: api.NameRequest, context: CallContext) -> api.RouteResponse:
        """The route of a topic (linearizable)."""
        state = await self.linearizable()
        return route_response(state.route(request.name))

    async def routes(self, request: api.NamesRequest, context: CallContext) -> api.RoutesResponse:
        """The routes of several topics, each with its own outcome (a missing topic
        fails only its name), all read at one linearizable point: one read index for
        the names a broker's concurrent route misses joined."""
        if len(request.names) > ROUTES_NAMES_MAX:
            raise BadRequest(
                f"a routes call names {len(request.names)} topics, more than {ROUTES_NAMES_MAX}"
            )
        state = await self.linearizable()
        outcomes: list[api.TopicRouted] = []
        for name in request.names:
            try:
                outcomes.append(api.TopicRouted(route_response(state.route(name))))
            except NameserverError as exc:
                outcomes.append(api.TopicRouted(None, to_wire(from_exception(exc))))
        return api.RoutesResponse(outcomes)

    # -- leases ----------------------------------------------------------------------

    async def acquire_lease(
        self, request: api.LeaseRequest, context: CallContext
    ) -> api.LeaseResponse:
        """Take a lease (free, expired or ours)."""
        applied = await self.propose(
            c.AcquireLease(request.name, request.owner, self.clock(), request.ttl_ms)
        )
        assert isinstance(applied.value, r.Lease)
        return api.LeaseResponse(lease_info(applied.value), applied.revision)

    async def renew_lease(
        self, request: api.LeaseRequest, context: CallContext
    ) -> api.LeaseResponse:
        """Extend a lease we hold."""
        applied = await self.propose(
            c.RenewLease(request.name, request.owner, self.clock(), request.ttl_ms)
        )
        assert isinstance(applied.value, r.Lease)
        return api.LeaseResponse(lease_info(applied.value), applied.revision)

    async def release_lease(
        self, request: api.LeaseRequest, context: CallContext
    ) -> api.RevisionResponse:
        """Give a lease up."""
        applied = await self.propose(c.ReleaseLease(request.name, request.owner))
        return api.RevisionResponse(applied.revision)

    # -- watch -----------------------------------------------------------------------

    async def watch(
        self, request: api.WatchRequest, context: CallContext
    ) -> AsyncIterator[api.WatchBatchInfo]:
        """Every change after ``request.revision``, in batches, oldest first.

        Starts on the leader (after a ReadIndex, so the stream begins from a
        state that has every acknowledged write); it then follows this node's
        applied log, which only ever holds committed commands in log order.
        The first batch comes at once (possibly with no changes): it confirms
        the subscription, so a client can bound how long it waits for it.
        After ``WATCH_IDLE_MS`` without a change the stream is confirmed again
        the same way (a ReadIndex round, then an empty batch): on a replica
        that cannot reach its group's leader the stream ends with NOT_LEADER.
        """
        kinds = frozenset(r.ChangeKind(k) for k in request.kinds) if request.kinds else None
        await self.linearizable()
        revision = request.revision
        confirm = True
        while True:
            changed = self.machine.changed()
            batch = self.machine.state.changes_since(revision, kinds)
            if confirm or batch.resync_required or batch.changes:
                confirm = False
                yield watch_batch_info(batch)
            revision = batch.revision
            try:
                await asyncio.wait_for(changed.wait(), WATCH_IDLE_MS / 1000)
            except TimeoutError:
                await self.linearizable()
                confirm = True


def _of_cluster(
    state: MetadataState, cluster: str, items: Iterable[_InCluster]
) -> list[_InCluster]:
    """``items`` of ``cluster`` (all of them when it is empty); an unknown cluster is an error."""
    if not cluster:
        return list(items)
    state.cluster(cluster)  # raises when the cluster is unknown
    return [item for item in items if item.cluster == cluster]


def _enum(kind: type[Any], number: int, what: str) -> Any:
    try:
        return kind(number)
    except ValueError:
        names = ", ".join(f"{m.value} ({m.name})" for m in kind)
        raise BadRequest(f"{what} {number} is not one of {names}") from None


def _create_topic(request: api.CreateTopicRequest) -> c.CreateTopic:
    """The command creating the topic ``request`` asks for."""
    return c.CreateTopic(
        request.name,
        request.cluster,
        request.queue_count,
        _enum(MessageType, request.message_type, "message_type"),
        request.retention_ms or r.RETENTION_MS_DEFAULT,
        _enum(Permission, request.permission, "permission"),
        request.retention_bytes,
        request.local_retention_ms,
        request.local_retention_bytes,
        request.read_replicas,
    )
