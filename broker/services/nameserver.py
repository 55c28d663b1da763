"""Metadata from the nameserver: topics, consumer groups and routes.

:class:`NameserverLink` calls whichever nameserver replica leads, through
:func:`angelia_rpc.failover.call_leader`: it follows leader hints, moves on
from a replica that names none and backs off while an election runs, all
within the call's deadline, deciding by the error's flags alone.

:class:`ClusterMetadata` implements the ``MetadataService`` port. Lookups
are served from a cache while the watch stream runs (:meth:`run_watch`); a
change of a topic, group, raft group or storage node drops what it touches,
and a miss (or a lookup while the watch is down) is a linearizable read. So
a topic created or changed through any nameserver client is seen by the next
lookup after the watch delivers it, and never an older state after that.

Auto-create (``rip5 dev``): a topic unknown to the nameserver is offered to
clients as a provisional topic (default queues, every message type) and
created on its first send with that message's type; a consumer group is
created on first use with the defaults. A dead-letter topic ``%DLQ%<group>``
is created on first lookup whenever its group exists (the storage nodes
write into it by themselves), auto-create or not; so is a retry topic
``%RETRY%<group>`` (one queue: what the group's 4.x consumers gave back).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from angelia_rpc import AngeliaError, Peers
from angelia_rpc.cluster_services import NameserverService
from angelia_rpc.failover import Failover, FailoverPolicy, call_leader, starting_at
from broker.domain import GroupInfo, QueueInfo, TopicInfo
from broker.errors import BrokerError, Reason
from broker.services import cluster_convert as convert
from protocol import errors as codes
from protocol import nameserver_api as ns
from protocol import routing
from protocol.vocabulary import MessageType

log = logging.getLogger("broker.nameserver")
T = TypeVar("T")

CALL_TIMEOUT_MS = 3_000
DEADLINE_MS = 10_000
DEFAULT_QUEUE_COUNT = 8
PAUSE_FIRST_S = 0.02
PAUSE_MAX_S = 0.5
WATCH_KINDS = [ns.KIND_TOPIC, ns.KIND_CONSUMER_GROUP, ns.KIND_RAFT_GROUP, ns.KIND_STORAGE_NODE]


class NameserverLink:
    """Calls the nameserver leader among ``addresses`` (see the module docstring)."""

    def __init__(
        self,
        addresses: list[str],
        peers: Peers,
        *,
        call_timeout_ms: int = CALL_TIMEOUT_MS,
        deadline_ms: int = DEADLINE_MS,
    ) -> None:
        if not addresses:
            raise ValueError("at least one nameserver address is needed")
        self.addresses = list(addresses)
        self._peers = peers
        self._current = self.addresses[0]
        self._deadline_ms = deadline_ms
        self._policy = FailoverPolicy(PAUSE_FIRST_S, PAUSE_MAX_S, call_timeout_ms=call_timeout_ms)

    def stub(self) -> NameserverService:
        """The typed client of the replica believed to lead."""
        return self._stub_at(self._current)

    def _stub_at(self, address: str) -> NameserverService:
        # With another replica to try, a dead one is passed over at once (the stub
        # does not wait for it).
        return self._peers.stub(NameserverService, address, wait_for_ready=len(self.addresses) == 1)

    def moved(self, error: AngeliaError) -> None:
        """Aim the next call elsewhere after ``error`` from the current replica: at its
        leader hint, else at the next replica (the watch's reconnects, which retry
        whatever the error)."""
        index = self.addresses.index(self._current) if self._current in self.addresses else -1
        self._current = error.leader_hint or self.addresses[(index + 1) % len(self.addresses)]

    async def call(self, what: str, method: Callable[[NameserverService, int], Awaitable[T]]) -> T:
        """``method(stub, timeout_ms)`` on the leader; BrokerError when it cannot be done."""
        loop = asyncio.get_running_loop()
        failover = Failover(
            starting_at(self._current, self.addresses),
            self._policy,
            loop.time() + self._deadline_ms / 1000,
        )

        def attempt(address: str, timeout_ms: int) -> Awaitable[T]:
            return method(self._stub_at(address), timeout_ms)

        try:
            return await call_leader(failover, attempt, clock=loop.time, sleep=asyncio.sleep)
        except AngeliaError as error:
            raise convert.error_from_angelia(error, what) from None
        finally:
            self._current = failover.address


class ClusterMetadata:
    """The ``MetadataService`` port over the nameserver (see the module docstring)."""

    def __init__(
        self,
        link: NameserverLink,
        *,
        cluster: str,
        auto_create: bool = False,
        default_queue_count: int = DEFAULT_QUEUE_COUNT,
    ) -> None:
        self._link = link
        self.cluster = cluster
        self.auto_create = auto_create
        self.default_queue_count = default_queue_count
        self._routes: dict[str, ns.RouteResponse] = {}
        # The topic of each route last converted, by topic name (see _topic_of).
        self._topics: dict[str, tuple[ns.RouteResponse, TopicInfo]] = {}
        self._groups: dict[str, GroupInfo] = {}
        self._route_listeners: list[Callable[[], None]] = []
        self.watching = False  # the cache is trusted only while the watch runs

    # -- the port ---------------------------------------------------------------------

    async def get_topic(self, name: str) -> TopicInfo:
        """The topic; raises TOPIC_NOT_FOUND (auto-create: a provisional topic)."""
        try:
            return convert.topic_from_route(await self.route(name))
        except BrokerError as error:
            if error.reason is not Reason.TOPIC_NOT_FOUND or not self.auto_create:
                raise
            return self._provisional(name)

    async def get_topic_for_send(self, name: str, message_type: MessageType) -> TopicInfo:
        """The topic a send goes to; auto-create makes a missing one for ``message_type``."""
        try:
            return self._topic_of(name, await self.route(name))
        except BrokerError as error:
            if error.reason is not Reason.TOPIC_NOT_FOUND or not self.auto_create:
                raise
        await self._create(
            f"create topic {name!r}",
            lambda stub, timeout_ms: stub.create_topic(
                ns.CreateTopicRequest(
                    name, self.cluster, self.default_queue_count, int(message_type)
                ),
                timeout_ms=timeout_ms,
            ),
        )
        log.info("topic auto-created", extra={"topic": name, "type": message_type.name})
        self.forget_route(name)
        return convert.topic_from_route(await self.route(name))

    async def get_group(self, name: str, *, topics: Sequence[str] = ()) -> GroupInfo:
        """The consumer group; raises CONSUMER_GROUP_NOT_FOUND (auto-create: created,
        FIFO when one of ``topics`` is a FIFO topic)."""
        cached = self._groups.get(name) if self.watching else None
        if cached is not None:
            return cached
        try:
            response = await self._link.call(
                f"consumer group {name!r}",
                lambda stub, timeout_ms: stub.get_consumer_group(
                    ns.NameRequest(name), timeout_ms=timeout_ms
                ),
            )
        except BrokerError as error:
            if error.reason is not Reason.CONSUMER_GROUP_NOT_FOUND or not self.auto_create:
                raise
            fifo = await self._any_fifo(topics)
            await self._create(
                f"create consumer group {name!r}",
                lambda stub, timeout_ms: stub.create_consumer_group(
                    ns.CreateConsumerGroupRequest(name, self.cluster, fifo), timeout_ms=timeout_ms
                ),
            )
            log.info("consumer group auto-created", extra={"group": name, "fifo": fifo})
            return await self.get_group(name)
        group = convert.group_from_info(response.group)
        self._groups[name] = group
        return group

    async def _any_fifo(self, topics: Sequence[str]) -> bool:
        for topic in topics:
            try:
                route = await self.route(topic)
            except BrokerError:
                continue  # unknown (or not yet created): not a FIFO topic
            if route.topic.message_type == int(MessageType.FIFO):
                return True
        return False

    # -- routes (for the storage port) ---------------------------------------------------

    async def route(self, topic: str) -> ns.RouteResponse:
        """Where each queue of ``topic`` is served; raises TOPIC_NOT_FOUND."""
        cached = self._routes.get(topic) if self.watching else None
        if cached is not None:
            return cached
        try:
            route = await self._read_route(topic)
        except BrokerError as error:
            if error.reason is not Reason.TOPIC_NOT_FOUND or not _is_group_topic(topic):
                raise
            route = await self._create_group_topic(topic)
        self._routes[topic] = route
        return route

    def _topic_of(self, name: str, route: ns.RouteResponse) -> TopicInfo:
        """The topic of ``route``, converted once per route read: every send asks."""
        cached = self._topics.get(name)
        if cached is not None and cached[0] is route:
            return cached[1]
        topic = convert.topic_from_route(route)
        self._topics[name] = (route, topic)
        return topic

    def forget_route(self, topic: str | None = None) -> None:
        """Drop the cached route of ``topic`` (None: every route), e.g. after NOT_LEADER."""
        if topic is None:
            self._routes.clear()
        else:
            self._routes.pop(topic, None)

    def on_route_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever leaders or storage nodes may have changed."""
        self._route_listeners.append(listener)

    async def _read_route(self, topic: str) -> ns.RouteResponse:
        return await self._link.call(
            f"topic {topic!r}",
            lambda stub, timeout_ms: stub.route(ns.NameRequest(topic), timeout_ms=timeout_ms),
        )

    async def _create_group_topic(self, topic: str) -> ns.RouteResponse:
        prefix = routing.DLQ_TOPIC_PREFIX if routing.is_dead_letter_topic(topic) else ""
        group = topic[len(prefix or routing.RETRY_TOPIC_PREFIX) :]
        await self.get_group(group)  # CONSUMER_GROUP_NOT_FOUND: no such group topic
        await self._create(
            f"create consumer group topic {topic!r}",
            lambda stub, timeout_ms: stub.create_topic(
                ns.CreateTopicRequest(topic, self.cluster, 1), timeout_ms=timeout_ms
            ),
        )
        return await self._read_route(topic)

    async def _create(
        self, what: str, method: Callable[[NameserverService, int], Awaitable[object]]
    ) -> None:
        """A create that tolerates losing the race to another broker."""
        try:
            await self._link.call(what, method)
        except BrokerError as error:
            if error.code is not codes.ALREADY_EXISTS:
                raise

    def _provisional(self, name: str) -> TopicInfo:
        return TopicInfo(
            name,
            tuple(QueueInfo(queue_id) for queue_id in range(self.default_queue_count)),
            frozenset({MessageType.NORMAL, MessageType.FIFO}),
        )

    # -- the watch ----------------------------------------------------------------------

    def _apply(self, change: ns.ChangeInfo) -> None:
        if change.kind == ns.KIND_TOPIC:
            self._routes.pop(change.key, None)
            self._topics.pop(change.key, None)
        elif change.kind == ns.KIND_CONSUMER_GROUP:
            self._groups.pop(change.key, None)
        else:  # a raft group's leader or a storage node changed: routes may be stale
            self._routes.clear()
            for listener in self._route_listeners:
                listener()

    def _clear(self) -> None:
        self._routes.clear()
        self._topics.clear()
        self._groups.clear()
        for listener in self._route_listeners:
            listener()

    async def run_watch(self) -> None:
        """Forever: keep the cache fresh from the nameserver's watch stream.

        The cache is used only while a stream is confirmed; after a break the
        stream resumes from the last revision seen, so no change is missed.
        """
        revision = 0
        delay_s = 0.05
        while True:
            try:
                stream = self._link.stub().watch(ns.WatchRequest(revision, list(WATCH_KINDS)))
                async with stream as batches:
                    async for batch in batches:
                        if batch.resync_required:
                            self._clear()
                        for change in batch.changes:
                            self._apply(change)
                        revision = batch.revision
                        self.watching = True
                        delay_s = 0.05
            except AngeliaError as error:
                log.debug("metadata watch broke", extra={"error": str(error)})
                self._link.moved(error)
            finally:
                self.watching = False
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, 1.0)

    async def cluster_status(self) -> ns.ClusterStatusResponse:
        """The cluster's raft groups (with leaders), storage nodes and brokers (a
        linearizable read)."""
        return await self._link.call(
            f"status of cluster {self.cluster!r}",
            lambda stub, timeout_ms: stub.cluster_status(
                ns.NameRequest(self.cluster), timeout_ms=timeout_ms
            ),
        )

    async def heartbeat(
        self,
        broker_id: str,
        address: str,
        producer_groups: list[str],
        remoting_address: str = "",
    ) -> None:
        """Tell the nameserver this broker is alive, with its producer groups (and where
        remoting clients reach it)."""
        await self._link.call(
            "broker heartbeat",
            lambda stub, timeout_ms: stub.broker_heartbeat(
                ns.BrokerHeartbeatRequest(
                    broker_id, self.cluster, address, producer_groups, remoting_address
                ),
                timeout_ms=timeout_ms,
            ),
        )


async def run_heartbeats(
    metadata: ClusterMetadata,
    broker_id: str,
    address: str,
    producer_groups: Callable[[], list[str]],
    interval_ms: int,
    remoting_address: str = "",
) -> None:
    """Forever: a broker heartbeat every ``interval_ms`` (failures are logged, not fatal)."""
    while True:
        try:
            await metadata.heartbeat(
                broker_id, address, sorted(producer_groups()), remoting_address
            )
        except BrokerError as error:
            log.warning("broker heartbeat failed", extra={"error": error.message})
        await asyncio.sleep(interval_ms / 1000)


def _is_group_topic(topic: str) -> bool:
    """Whether ``topic`` is a consumer group's dead-letter or retry topic."""
    return routing.is_dead_letter_topic(topic) or routing.is_retry_topic(topic)
