"""Metadata from the nameserver: topics, consumer groups and routes.

:class:`NameserverLink` calls whichever nameserver replica leads, through
:func:`angelia_rpc.failover.call_leader`: it follows leader hints, moves on
from a replica that names none and backs off while an election runs, all
within the call's deadline, deciding by the error's flags alone.

:class:`ClusterMetadata` implements the ``MetadataService`` port. Lookups
are served from a cache kept fresh by the watch stream (:meth:`run_watch`); a
change of a topic or consumer group drops what it touches, and a miss is a
linearizable read. So a topic created or changed through any nameserver
client is seen by the next lookup after the watch delivers it, and never an
older state after that. A raft group's change (its leader, term or replicas)
or a storage node's (its address, up or down) does not drop routes: the
cache keeps each group's and node's latest record from the watch, and a
lookup patches the queues of a cached route whose group or nodes changed
since the route was read, in memory (see :meth:`ClusterMetadata._patched`);
it reads the route again only when it lacks a record the patch needs.

Traffic outlives the nameserver. While the watch is down (every nameserver
away, or this broker cut off from them), cached topics, groups, routes and
the cluster status keep serving, at most ``route_stale_max_ms`` past the
moment the cache was last known current (the watch's last batch, or the
entry's own read since; an idle stream is confirmed every few seconds and
one silent for ``watch_silence_max_ms`` counts as down); a route dropped
after a failed pass over its raft group (:meth:`forget_route`) is read
again, and kept when that read cannot reach a nameserver. Storage nodes
elect group leaders without the nameserver and name them in NOT_LEADER
hints, which the storage port follows. Only lookups
the cache cannot answer (a new topic or group) need a nameserver; they fail
at once with a retriable UNAVAILABLE that says so (the link gives up after a
pass in which no replica answered). At the bound an entry is no longer
trusted: each lookup reads the nameserver, and fails UNAVAILABLE while it
cannot. When a watch stream is confirmed again it replays every change since
the last revision seen (or asks for a resync, which clears the cache), so the
broker reconciles without a restart.

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
import dataclasses
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from angelia_rpc import AngeliaError, Peers
from angelia_rpc.cluster_services import NameserverService
from angelia_rpc.errors import from_wire
from angelia_rpc.failover import Failover, FailoverPolicy, call_leader, starting_at
from broker.config import BrokerConfig
from broker.domain import GroupInfo, QueueInfo, TopicInfo
from broker.errors import BrokerError, Reason
from broker.services import cluster_convert as convert
from broker.services.base import NAMESERVER_QUIET_AT_START_MS
from broker.services.route_reads import RouteReads
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
WATCH_SILENCE_MAX_MS = 10_000
"""A watch stream silent this long is taken as broken (nameservers confirm an idle
stream every few seconds, ``nameserver.service.WATCH_IDLE_MS``)."""
WATCH_KINDS = [ns.KIND_TOPIC, ns.KIND_CONSUMER_GROUP, ns.KIND_RAFT_GROUP, ns.KIND_STORAGE_NODE]
ROUTE_CACHE_BYTES_MAX = 128 << 20
"""About the most memory the routes a broker keeps may take (least recently used go
first, by :func:`cached_route_bytes`): a broker holds the routes it uses, not every
topic of the cluster. 128 MiB is about 190,000 topics of 8 queues (1.5 million queues):
a sweep over every topic of a million queues fits, where a bound below the topics in
use evicts each route before its next use and reads every route again."""
ROUTE_TOPIC_BYTES = 640
ROUTE_QUEUE_BYTES = 8
"""What one cached route takes, measured with tracemalloc over 20,000 routes decoded
as the nameserver sends them, over 3 storage nodes: 625, 657 and 721 bytes a topic of
1, 8 and 16 queues (its record, name, route, converted topic and cache entry; the
queue routes themselves are shared between topics, see ``SHARED_PARTS_MAX``), before
the entry's ``as_of`` slot: 8 bytes more (its int is the route's revision, shared)."""
SHARED_PARTS_MAX = 65_536
"""The most distinct queue routes and queue tuples kept for sharing between cached routes
(past it the table starts afresh; the routes keep what they hold)."""


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
        # A pass in which no replica answered ends the call: with every nameserver
        # away, waiting out the deadline would only stall the caller (see the module).
        self._policy = FailoverPolicy(
            PAUSE_FIRST_S, PAUSE_MAX_S, call_timeout_ms=call_timeout_ms, unreachable_ends=True
        )

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


def _routed(topic: str, outcome: ns.TopicRouted) -> ns.RouteResponse | BrokerError:
    """One topic's outcome of a ``routes`` call: its route, or the error a ``route`` call
    of it alone would have raised."""
    if outcome.route is not None:
        return outcome.route
    if outcome.failure is None:
        return BrokerError(codes.INTERNAL, f"topic {topic!r}: the nameserver left it unanswered")
    return convert.error_from_angelia(from_wire(outcome.failure), f"topic {topic!r}")


def cached_route_bytes(queues: int) -> int:
    """About the memory a cached route of ``queues`` queues takes (the cache's measure)."""
    return ROUTE_TOPIC_BYTES + ROUTE_QUEUE_BYTES * queues


class _CachedRoute:
    """A cached route: when it was read (see ``ClusterMetadata._usable``), the
    nameserver revision its queues are known current at (``as_of``: the route's
    revision, raised as lookups check or patch it against later changes) and, once a
    lookup converted it, its topic."""

    __slots__ = ("as_of", "read_at", "route", "topic")

    def __init__(self, route: ns.RouteResponse, read_at: float) -> None:
        self.route = route
        self.read_at = read_at
        self.as_of = route.revision
        self.topic: TopicInfo | None = None


class ClusterMetadata:
    """The ``MetadataService`` port over the nameserver (see the module docstring)."""

    def __init__(
        self,
        link: NameserverLink,
        *,
        cluster: str,
        auto_create: bool = False,
        default_queue_count: int = DEFAULT_QUEUE_COUNT,
        route_stale_max_ms: int = BrokerConfig.route_stale_max_ms,
        watch_silence_max_ms: int = WATCH_SILENCE_MAX_MS,
        clock: Callable[[], float] = time.monotonic,
        signer: Callable[[], ns.SignedBy] = ns.SignedBy,
        route_cache_bytes_max: int = ROUTE_CACHE_BYTES_MAX,
    ) -> None:
        """``route_stale_max_ms``: how long past its last confirmation a cached entry
        serves while the watch is down (see the module docstring; the broker option's
        default unless given); ``watch_silence_max_ms``: a watch stream
        silent this long counts as down; ``clock``: seconds, monotonic; ``signer``: the
        signature of the topics and groups this broker creates (ACL on);
        ``route_cache_bytes_max``: about the most memory the cached routes take
        (:func:`cached_route_bytes`; least recently used dropped first)."""
        if route_stale_max_ms < 0:
            raise ValueError(f"route_stale_max_ms must not be negative, not {route_stale_max_ms}")
        if route_cache_bytes_max < 1:
            raise ValueError(
                f"route_cache_bytes_max must be at least 1, not {route_cache_bytes_max}"
            )
        self._link = link
        self.cluster = cluster
        self.auto_create = auto_create
        self.default_queue_count = default_queue_count
        self.route_stale_max_s = route_stale_max_ms / 1000
        self._watch_silence_max_s = watch_silence_max_ms / 1000
        self._clock = clock
        self._signer = signer
        # Cached routes, least recently used first. Invariant: _routes_bytes is the sum
        # of cached_route_bytes over them, at most _routes_bytes_max past an insertion
        # (one route larger than the bound stays alone).
        self._routes: OrderedDict[str, _CachedRoute] = OrderedDict()
        self._routes_bytes = 0
        self._routes_bytes_max = route_cache_bytes_max
        self._forgotten: set[str] = set()  # routes to read again, kept as a fallback
        # Concurrent misses' reads joined into one nameserver call.
        self.route_reads = RouteReads(self._read_one_route, self._read_routes)
        # Equal parts of cached routes, shared (see _compact): most topics' queue i is
        # served by one of a few raft groups, so their queue routes are equal.
        self._queue_routes: dict[tuple[object, ...], ns.QueueRouteInfo] = {}
        self._queue_tuples: dict[tuple[QueueInfo, ...], tuple[QueueInfo, ...]] = {}
        # What patches cached routes (see _patched). Revisions are the nameserver's.
        # _raft_groups: each raft group's latest record the watch brought, with its
        # revision. _nodes: each storage node's latest endpoint (None: removed) with
        # the revision it is known at, from the watch and from every route read; as
        # the watch applies every change in order from _floor on, an entry known at
        # revision r >= _floor is current at the later of r and the watch's revision.
        # Invariant: a node a cached route names has an entry at least as new as the
        # route. _changed_at: the latest revision of a group or node change applied;
        # a route whose as_of is below it is checked (and patched) on its next lookup.
        # _floor: the revision of the last resync; a route older has missed changes.
        self._raft_groups: dict[int, tuple[int, ns.RaftGroupInfo | None]] = {}
        self._nodes: dict[int, tuple[int, ns.EndpointInfo | None]] = {}
        self._changed_at = 0
        self._floor = 0
        self._groups: dict[str, tuple[GroupInfo, float]] = {}
        self._status: tuple[ns.ClusterStatusResponse, float] | None = None
        self._route_listeners: list[Callable[[int | None], None]] = []
        self.watching = False  # a watch stream is confirmed: the cache is current
        self.revision = 0  # the nameserver revision of the last watch batch applied
        self._current_at = -math.inf  # when the watch last confirmed the cache

    # -- the port ---------------------------------------------------------------------

    async def get_topic(self, name: str) -> TopicInfo:
        """The topic; raises TOPIC_NOT_FOUND (auto-create: a provisional topic)."""
        try:
            return self._topic_of(name, await self.route(name))
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
                    name,
                    self.cluster,
                    self.default_queue_count,
                    int(message_type),
                    signed=self._signer(),
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
        cached = self._groups.get(name)
        if cached is not None and self._usable(cached[1]):
            return cached[0]
        try:
            response = await self._link.call(
                f"consumer group {name!r}",
                lambda stub, timeout_ms: stub.get_consumer_group(
                    ns.NameRequest(name), timeout_ms=timeout_ms
                ),
            )
        except BrokerError as error:
            if self._away(error):
                raise self._stale(error, f"consumer group {name!r}", cached) from None
            if error.reason is not Reason.CONSUMER_GROUP_NOT_FOUND or not self.auto_create:
                raise
            fifo = await self._any_fifo(topics)
            await self._create(
                f"create consumer group {name!r}",
                lambda stub, timeout_ms: stub.create_consumer_group(
                    ns.CreateConsumerGroupRequest(name, self.cluster, fifo, signed=self._signer()),
                    timeout_ms=timeout_ms,
                ),
            )
            log.info("consumer group auto-created", extra={"group": name, "fifo": fifo})
            return await self.get_group(name)
        group = convert.group_from_info(response.group)
        self._groups[name] = (group, self._clock())
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
        cached = self._routes.get(topic)
        if (
            cached is not None
            and topic not in self._forgotten
            and self._usable(cached.read_at)
            and (cached.as_of >= self._changed_at or self._patched(cached))
        ):
            self._routes.move_to_end(topic)
            return cached.route
        try:
            route = await self._read_route(topic)
        except BrokerError as error:
            if self._away(error):
                if cached is not None and self._usable(cached.read_at):
                    # The read was tried: later lookups take the cache again (the next
                    # failed pass over the group forgets it again), never a read each.
                    self._forgotten.discard(topic)
                    cached.as_of = max(cached.as_of, self._changed_at)
                    log.debug("nameserver away: the last route serves", extra={"topic": topic})
                    return cached.route
                raise self._stale(error, f"topic {topic!r}", cached) from None
            if error.reason is not Reason.TOPIC_NOT_FOUND or not _is_group_topic(topic):
                raise
            route = await self._create_group_topic(topic)
        self._learn_nodes(route)
        route = self._compact(route)
        self._drop_route(topic)
        name = route.topic.name
        # Keyed by the route's own copy of the name where equal: one string, not two.
        self._routes[name if name == topic else topic] = _CachedRoute(route, self._clock())
        self._routes_bytes += cached_route_bytes(len(route.queues))
        self._forgotten.discard(topic)
        while self._routes_bytes > self._routes_bytes_max and len(self._routes) > 1:
            self._drop_route(next(iter(self._routes)))
        return route

    def _drop_route(self, topic: str) -> None:
        """Forget the cached route of ``topic``, if any (and its converted topic)."""
        cached = self._routes.pop(topic, None)
        if cached is not None:
            self._routes_bytes -= cached_route_bytes(len(cached.route.queues))
            self._forgotten.discard(topic)

    def _drop_routes(self) -> None:
        self._routes.clear()
        self._routes_bytes = 0
        self._queue_routes.clear()
        self._forgotten.clear()

    def _compact(self, route: ns.RouteResponse) -> ns.RouteResponse:
        """``route`` with each queue route replaced by an equal one already cached, if
        any (queue routes are frozen: sharing them changes nothing a reader sees)."""
        return dataclasses.replace(route, queues=self._shared(route.queues))

    def _shared(self, queues: Sequence[ns.QueueRouteInfo]) -> list[ns.QueueRouteInfo]:
        """``queues``, each replaced by an equal queue route already cached, if any."""
        shared = self._queue_routes
        if len(shared) >= SHARED_PARTS_MAX:
            shared.clear()
        return [
            shared.setdefault(
                (queue.queue_id, queue.group_id, queue.term, queue.leader, *queue.followers),
                queue,
            )
            for queue in queues
        ]

    def _learn_nodes(self, route: ns.RouteResponse) -> None:
        """Keep the endpoints ``route`` names where they are newer than those known (a
        route read before the last resync may have missed changes: not taken)."""
        revision = route.revision
        if revision < self._floor:
            return
        nodes = self._nodes
        for queue in route.queues:
            if queue.leader is not None:
                known = nodes.get(queue.leader.node_id)
                if known is None or known[0] < revision:
                    nodes[queue.leader.node_id] = (revision, queue.leader)
            for follower in queue.followers:
                known = nodes.get(follower.node_id)
                if known is None or known[0] < revision:
                    nodes[follower.node_id] = (revision, follower)

    def _patched(self, cached: _CachedRoute) -> bool:
        """Bring ``cached`` up to the raft group and storage node changes the watch
        applied since its ``as_of``, in memory; False when that cannot be done (the
        route predates the last resync, or a replica's endpoint is unknown): the
        caller reads the route again.

        A queue whose group changed after ``as_of`` is rebuilt from the group's record
        as the nameserver builds it (``nameserver/queries.py``, ``route``): the
        leader's endpoint (None when there is no leader or it is not registered), and
        the other replicas' registered endpoints in replica order. A queue whose group
        did not change keeps its replicas: only their endpoints are brought up to date
        (a removed node is dropped; a node can only be a replica while registered, as
        the nameserver places groups on registered nodes and removes none that hosts
        one). Equal results are shared through the queue route table; the route keeps
        its converted topic (its queue ids do not change)."""
        if cached.as_of < self._floor:
            return False
        route = cached.route
        queues: list[ns.QueueRouteInfo] = []
        for queue in route.queues:
            changed = self._raft_groups.get(queue.group_id)
            if changed is not None and changed[0] > cached.as_of:
                rebuilt = self._queue_of_group(queue.queue_id, changed[1])
                if rebuilt is None:
                    return False
                queues.append(rebuilt)
                continue
            leader = queue.leader if queue.leader is None else self._endpoint(queue.leader)
            followers = [
                endpoint
                for follower in queue.followers
                if (endpoint := self._endpoint(follower)) is not None
            ]
            if leader is queue.leader and followers == queue.followers:
                queues.append(queue)
            else:
                queues.append(
                    ns.QueueRouteInfo(queue.queue_id, queue.group_id, queue.term, leader, followers)
                )
        if any(new is not old for new, old in zip(queues, route.queues, strict=True)):
            cached.route = dataclasses.replace(
                route, queues=self._shared(queues), revision=self._changed_at
            )
        cached.as_of = self._changed_at
        return True

    def _endpoint(self, endpoint: ns.EndpointInfo) -> ns.EndpointInfo | None:
        """The latest known endpoint of the node ``endpoint`` names (None: removed);
        ``endpoint`` itself when it is current."""
        known = self._nodes.get(endpoint.node_id)
        if known is None or known[1] == endpoint:
            return endpoint
        return known[1]

    def _queue_of_group(
        self, queue_id: int, group: ns.RaftGroupInfo | None
    ) -> ns.QueueRouteInfo | None:
        """The route of queue ``queue_id`` served by ``group`` (None: the group's record
        or a replica's endpoint is unknown here)."""
        if group is None:
            return None
        nodes = self._nodes
        leader = None
        if group.leader != 0:
            known = nodes.get(group.leader)
            if known is None:
                return None
            leader = known[1]
        followers = []
        for node_id in group.replicas:
            if node_id == group.leader:
                continue
            known = nodes.get(node_id)
            if known is None:
                return None
            if known[1] is not None:
                followers.append(known[1])
        return ns.QueueRouteInfo(queue_id, group.group_id, group.term, leader, followers)

    def _usable(self, read_at: float) -> bool:
        """Whether a cached entry read at ``read_at`` may serve: always while the
        watch runs, else for ``route_stale_max_s`` past the later of its read and
        the moment the watch last confirmed the cache."""
        if self.watching:
            return True
        confirmed_at = max(read_at, self._current_at)
        return self._clock() - confirmed_at <= self.route_stale_max_s

    @staticmethod
    def _away(error: BrokerError) -> bool:
        """The nameserver could not be asked (as opposed to answering no)."""
        return error.code in (codes.UNAVAILABLE, codes.DEADLINE_EXCEEDED)

    def _stale(self, error: BrokerError, what: str, cached: object | None) -> BrokerError:
        """The retriable error of a lookup the cache cannot answer while the
        nameserver is away (UNAVAILABLE; names the cause and the bound)."""
        if cached is None:
            cause = "this broker has no cached metadata for it"
        else:
            cause = (
                f"its cached metadata is older than the bound of "
                f"{self.route_stale_max_s:g} s (route_stale_max_ms)"
            )
        return BrokerError(
            codes.UNAVAILABLE,
            f"{what}: the nameserver cannot be reached and {cause}; "
            f"retry once a nameserver is back ({error.message})",
        )

    def _topic_of(self, name: str, route: ns.RouteResponse) -> TopicInfo:
        """The topic of ``route``, converted once per route read: every send asks."""
        cached = self._routes.get(name)
        if cached is not None and cached.route is route and cached.topic is not None:
            return cached.topic
        topic = convert.topic_from_route(route)
        tuples = self._queue_tuples
        if len(tuples) >= SHARED_PARTS_MAX:
            tuples.clear()
        queues = tuples.setdefault(topic.queues, topic.queues)
        if queues is not topic.queues:
            topic = dataclasses.replace(topic, queues=queues)
        if cached is not None and cached.route is route:  # else evicted or read anew since
            cached.topic = topic
        return topic

    def forget_route(self, topic: str | None = None) -> None:
        """Read the route of ``topic`` (None: every route) again on its next lookup,
        e.g. after a failed pass over its raft group; the old one is kept to serve
        while the nameserver cannot be reached (see the module docstring)."""
        self._forgotten.update(self._routes if topic is None else (topic,))

    def on_route_change(self, listener: Callable[[int | None], None]) -> None:
        """Call ``listener(group_id)`` whenever raft group ``group_id``'s leader or
        replicas may have changed, and ``listener(None)`` whenever any group's may
        have (a storage node changed, or the cache was resynced)."""
        self._route_listeners.append(listener)

    async def _read_route(self, topic: str) -> ns.RouteResponse:
        """The route of ``topic`` from the nameserver (joined with concurrent reads)."""
        return await self.route_reads.read(topic)

    async def _read_one_route(self, topic: str) -> ns.RouteResponse:
        return await self._link.call(
            f"topic {topic!r}",
            lambda stub, timeout_ms: stub.route(ns.NameRequest(topic), timeout_ms=timeout_ms),
        )

    async def _read_routes(self, topics: Sequence[str]) -> list[ns.RouteResponse | BrokerError]:
        request = ns.NamesRequest(list(topics))
        response = await self._link.call(
            f"routes of {len(topics)} topics",
            lambda stub, timeout_ms: stub.routes(request, timeout_ms=timeout_ms),
        )
        # A count that differs from the topics' fails them all (RouteReads checks it).
        return list(map(_routed, topics, response.outcomes))

    async def _create_group_topic(self, topic: str) -> ns.RouteResponse:
        prefix = routing.DLQ_TOPIC_PREFIX if routing.is_dead_letter_topic(topic) else ""
        group = topic[len(prefix or routing.RETRY_TOPIC_PREFIX) :]
        await self.get_group(group)  # CONSUMER_GROUP_NOT_FOUND: no such group topic
        await self._create(
            f"create consumer group topic {topic!r}",
            lambda stub, timeout_ms: stub.create_topic(
                ns.CreateTopicRequest(topic, self.cluster, 1, signed=self._signer()),
                timeout_ms=timeout_ms,
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
        """One change of the watch (changes come in revision order)."""
        if change.kind == ns.KIND_TOPIC:
            self._drop_route(change.key)
        elif change.kind == ns.KIND_CONSUMER_GROUP:
            self._groups.pop(change.key, None)
        elif change.kind == ns.KIND_RAFT_GROUP:
            group_id = int(change.key)
            known = self._raft_groups.get(group_id)
            if known is None or known[0] < change.revision:
                self._raft_groups[group_id] = (change.revision, change.raft_group)
            self._changed_at = max(self._changed_at, change.revision)
            for listener in self._route_listeners:
                listener(group_id)
        elif change.kind == ns.KIND_STORAGE_NODE:
            node_id = int(change.key)
            node = change.storage_node
            endpoint = None
            if not change.deleted and node is not None:
                endpoint = ns.EndpointInfo(node.node_id, node.address, node.alive)
            node_known = self._nodes.get(node_id)
            if node_known is None or node_known[0] < change.revision:
                self._nodes[node_id] = (change.revision, endpoint)
            self._changed_at = max(self._changed_at, change.revision)
            for listener in self._route_listeners:
                listener(None)

    def _clear(self, revision: int) -> None:
        """Forget everything cached: the watch resynced at ``revision`` (routes read
        before it may have missed changes, so none is patched or learned from)."""
        self._drop_routes()
        self._groups.clear()
        self._status = None
        self._raft_groups.clear()
        self._nodes.clear()
        self._floor = revision
        self._changed_at = max(self._changed_at, revision)
        for listener in self._route_listeners:
            listener(None)

    async def run_watch(self) -> None:
        """Forever: keep the cache fresh from the nameserver's watch stream.

        While a stream is confirmed the cache is current; after a break it serves
        for a bounded time (see the module docstring) while the stream resumes from
        the last revision seen, so no change is missed.
        """
        revision = 0
        delay_s = 0.05
        while True:
            try:
                stream = self._link.stub().watch(ns.WatchRequest(revision, list(WATCH_KINDS)))
                async with stream as batches:
                    batch_iterator = aiter(batches)
                    while True:
                        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can
                        # swallow a cancellation racing the stream's end (a hung stop).
                        try:
                            async with asyncio.timeout(self._watch_silence_max_s):
                                batch = await anext(batch_iterator)
                        except StopAsyncIteration:
                            break
                        except TimeoutError:
                            log.info("metadata watch silent too long; reconnecting")
                            self._link.moved(AngeliaError(codes.UNAVAILABLE, "watch silent"))
                            break
                        if batch.resync_required:
                            self._clear(batch.revision)
                        for change in batch.changes:
                            self._apply(change)
                        revision = self.revision = batch.revision
                        self.watching = True
                        self._current_at = self._clock()
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
        linearizable read; while the nameserver cannot be reached, the last one read,
        within the bound of the module docstring)."""
        what = f"status of cluster {self.cluster!r}"
        try:
            status = await self._link.call(
                what,
                lambda stub, timeout_ms: stub.cluster_status(
                    ns.NameRequest(self.cluster), timeout_ms=timeout_ms
                ),
            )
        except BrokerError as error:
            last = self._status
            if not self._away(error):
                raise
            if last is not None and self._usable(last[1]):
                return last[0]
            raise self._stale(error, what, last) from None
        self._status = (status, self._clock())
        return status

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
    """Forever: a broker heartbeat every ``interval_ms`` (failures are logged, not fatal:
    at INFO while the broker is starting (``NAMESERVER_QUIET_AT_START_MS``), then the
    first of a run as a warning and the rest at DEBUG until one succeeds again)."""
    loop = asyncio.get_running_loop()
    quiet_until_s = loop.time() + NAMESERVER_QUIET_AT_START_MS / 1000
    warned = False
    while True:
        try:
            await metadata.heartbeat(
                broker_id, address, sorted(producer_groups()), remoting_address
            )
        except BrokerError as error:
            if warned:
                level = logging.DEBUG
            elif loop.time() < quiet_until_s:
                level = logging.INFO
            else:
                level, warned = logging.WARNING, True
            log.log(level, "broker heartbeat failed", extra={"error": error.message})
        else:
            if warned:
                log.info("broker heartbeats answered again")
            warned = False
        await asyncio.sleep(interval_ms / 1000)


def _is_group_topic(topic: str) -> bool:
    """Whether ``topic`` is a consumer group's dead-letter or retry topic."""
    return routing.is_dead_letter_topic(topic) or routing.is_retry_topic(topic)
