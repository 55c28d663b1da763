"""The broker's metadata cache while the nameserver is away: the last routes, groups
and cluster status serve within the bound, what the cache cannot answer fails at
once and retriably, and the watch's return makes the cache current again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from angelia_rpc.errors import AngeliaError
from broker.errors import BrokerError
from broker.services.nameserver import ClusterMetadata, NameserverLink, cached_route_bytes
from protocol import errors
from protocol import nameserver_api as api
from protocol.vocabulary import MessageType
from tests.waiting import async_wait_until

A, B, C = "ns-a:1", "ns-b:1", "ns-c:1"
BOUND_MS = 60_000


def _route(topic: str, leader: str = "storage-1:1") -> api.RouteResponse:
    info = api.TopicInfo(topic, "c", 1, int(MessageType.NORMAL), 0, 6)
    queue = api.QueueRouteInfo(0, 1, 1, api.EndpointInfo(1, leader, True), [])
    return api.RouteResponse(info, [queue], 1)


def _group(name: str) -> api.ConsumerGroupResponse:
    retry = api.RetryInfo(1000, 10_000, 2.0)
    return api.ConsumerGroupResponse(api.ConsumerGroupInfo(name, "c", False, 16, retry), 1)


class _Nameservers:
    """Fake nameserver replicas sharing one state: every replica answers (as the
    leader) until ``away`` is set; then each call and the watch fail UNAVAILABLE."""

    def __init__(self) -> None:
        self.routes = {"orders": _route("orders")}
        self.groups = {"g": _group("g")}
        self.status = api.ClusterStatusResponse(api.ClusterInfo("c", 1, 4, 3), [], [], [], 1, 1, 1)
        self.calls: list[str] = []
        self.batches: asyncio.Queue[api.WatchBatchInfo | None] = asyncio.Queue()
        self.away = False

    def stub(self, service: object, address: str, *, wait_for_ready: bool = True) -> Any:
        return _Replica(self, address)

    def go_away(self) -> None:
        self.away = True
        self.batches.put_nowait(None)  # the open stream breaks

    def come_back(self) -> None:
        self.away = False


class _Replica:
    def __init__(self, state: _Nameservers, address: str) -> None:
        self.state = state
        self.address = address

    def _answer(self, what: str) -> None:
        self.state.calls.append(f"{what}@{self.address}")
        if self.state.away:
            raise AngeliaError(errors.UNAVAILABLE, "connection refused")

    async def route(self, request: api.NameRequest, timeout_ms: int = 0) -> api.RouteResponse:
        self._answer("route")
        if request.name not in self.state.routes:
            raise AngeliaError(errors.TOPIC_NOT_FOUND, f"no topic {request.name}")
        return self.state.routes[request.name]

    async def get_consumer_group(
        self, request: api.NameRequest, timeout_ms: int = 0
    ) -> api.ConsumerGroupResponse:
        self._answer("group")
        return self.state.groups[request.name]

    async def cluster_status(
        self, request: api.NameRequest, timeout_ms: int = 0
    ) -> api.ClusterStatusResponse:
        self._answer("status")
        return self.state.status

    @asynccontextmanager
    async def watch(self, request: api.WatchRequest) -> AsyncIterator[AsyncIterator[Any]]:
        self._answer("watch")

        async def batches() -> AsyncIterator[api.WatchBatchInfo]:
            yield api.WatchBatchInfo(request.revision, [])  # confirms the subscription
            while (batch := await self.state.batches.get()) is not None:
                yield batch
            raise AngeliaError(errors.UNAVAILABLE, "the nameserver went away")

        yield batches()


class _Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


async def _watched(
    bound_ms: int = BOUND_MS, silence_max_ms: int = 60_000
) -> tuple[ClusterMetadata, _Nameservers, _Clock, asyncio.Task[None]]:
    nameservers = _Nameservers()
    clock = _Clock()
    link = NameserverLink([A, B, C], nameservers)  # type: ignore[arg-type]
    metadata = ClusterMetadata(
        link,
        cluster="c",
        route_stale_max_ms=bound_ms,
        watch_silence_max_ms=silence_max_ms,
        clock=clock,
    )
    watch = asyncio.create_task(metadata.run_watch())
    await async_wait_until(lambda: metadata.watching, timeout_s=5)
    return metadata, nameservers, clock, watch


async def _stop(watch: asyncio.Task[None]) -> None:
    watch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await watch


async def test_routes_and_groups_serve_from_the_cache_while_every_nameserver_is_away() -> None:
    metadata, nameservers, clock, watch = await _watched()
    route = await metadata.route("orders")
    group = await metadata.get_group("g")
    nameservers.go_away()
    await async_wait_until(lambda: not metadata.watching, timeout_s=5)
    calls = len(nameservers.calls)
    clock.now_s += BOUND_MS / 1000  # at the bound: still served, without a call
    assert await metadata.route("orders") is route
    assert await metadata.get_group("g") == group
    assert len(nameservers.calls) - calls == sum(
        c.startswith("watch") for c in nameservers.calls[calls:]
    )
    await _stop(watch)


async def test_past_the_bound_a_lookup_needs_the_nameserver_and_says_so() -> None:
    metadata, nameservers, clock, watch = await _watched()
    await metadata.route("orders")
    nameservers.go_away()
    await async_wait_until(lambda: not metadata.watching, timeout_s=5)
    clock.now_s += BOUND_MS / 1000 + 1
    with pytest.raises(BrokerError) as raised:
        await metadata.route("orders")
    assert raised.value.code is errors.UNAVAILABLE
    assert raised.value.retriable
    assert "older than the bound of 60 s" in raised.value.message
    nameservers.come_back()  # and once it is back the route is read again
    assert (await metadata.route("orders")).topic.name == "orders"
    await _stop(watch)


async def test_a_new_topic_while_away_fails_at_once_after_one_pass_over_the_replicas() -> None:
    metadata, nameservers, _clock, watch = await _watched()
    nameservers.go_away()
    await async_wait_until(lambda: not metadata.watching, timeout_s=5)
    await _stop(watch)
    calls = len(nameservers.calls)
    with pytest.raises(BrokerError) as raised:
        await metadata.route("new-topic")
    assert raised.value.code is errors.UNAVAILABLE
    assert "the nameserver cannot be reached" in raised.value.message
    assert "no cached metadata" in raised.value.message
    assert sorted(nameservers.calls[calls:]) == [f"route@{a}" for a in (A, B, C)]


async def test_a_forgotten_route_is_read_again_and_kept_while_the_nameserver_is_away() -> None:
    metadata, nameservers, _clock, watch = await _watched()
    old = await metadata.route("orders")
    nameservers.go_away()
    await async_wait_until(lambda: not metadata.watching, timeout_s=5)
    metadata.forget_route("orders")
    calls = len(nameservers.calls)
    assert await metadata.route("orders") is old  # the read failed: the old route serves
    assert any(c.startswith("route@") for c in nameservers.calls[calls:])
    calls = len(nameservers.calls)  # tried once: the next lookups do not read again
    assert await metadata.route("orders") is old
    assert not any(c.startswith("route@") for c in nameservers.calls[calls:])
    nameservers.routes["orders"] = _route("orders", leader="storage-2:1")
    nameservers.come_back()
    await async_wait_until(lambda: metadata.watching, timeout_s=5)
    metadata.forget_route("orders")
    new = await metadata.route("orders")
    assert new.queues[0].leader is not None
    assert new.queues[0].leader.address == "storage-2:1"
    await _stop(watch)


async def test_the_cluster_status_falls_back_to_the_last_one_read_within_the_bound() -> None:
    metadata, nameservers, clock, watch = await _watched()
    status = await metadata.cluster_status()
    nameservers.go_away()
    await async_wait_until(lambda: not metadata.watching, timeout_s=5)
    assert await metadata.cluster_status() is status
    clock.now_s += BOUND_MS / 1000 + 1
    with pytest.raises(BrokerError) as raised:
        await metadata.cluster_status()
    assert raised.value.code is errors.UNAVAILABLE
    await _stop(watch)


def test_a_negative_bound_is_refused() -> None:
    link = NameserverLink([A], _Nameservers())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="route_stale_max_ms"):
        ClusterMetadata(link, cluster="c", route_stale_max_ms=-1)
    with pytest.raises(ValueError, match="route_cache_bytes_max must be at least 1, not 0"):
        ClusterMetadata(link, cluster="c", route_cache_bytes_max=0)


async def test_the_route_cache_keeps_the_topics_used_last_up_to_its_bound() -> None:
    """A broker holds the routes it uses: past the bound the least recently used
    topic's route (and its converted topic) goes, and is read again when asked."""
    nameservers = _Nameservers()
    nameservers.routes = {name: _route(name) for name in ("t1", "t2", "t3")}
    link = NameserverLink([A], nameservers)  # type: ignore[arg-type]
    metadata = ClusterMetadata(link, cluster="c", route_cache_bytes_max=2 * cached_route_bytes(1))
    metadata.watching = True  # cached entries serve (as while a watch runs)
    await metadata.get_topic("t1")
    await metadata.get_topic("t2")
    await metadata.route("t1")  # t1 used last: t2 is the least recently used
    await metadata.get_topic("t3")
    assert nameservers.calls == [f"route@{A}"] * 3
    await metadata.route("t1")
    await metadata.route("t3")
    assert len(nameservers.calls) == 3  # both still cached
    topic = await metadata.get_topic("t2")  # evicted: read again
    assert topic.name == "t2"
    assert len(nameservers.calls) == 4
    await metadata.route("t3")  # t1 went when t2 came back; t3 stays
    assert len(nameservers.calls) == 4
    await metadata.route("t1")
    assert len(nameservers.calls) == 5


async def test_cached_routes_share_their_equal_queue_routes() -> None:
    """Topics whose queue i is served by the same raft group hold one queue route
    object (and one queue tuple), not a copy each: per-topic memory stays small."""
    nameservers = _Nameservers()
    leader = api.EndpointInfo(1, "storage-1:1", True)
    followers = [api.EndpointInfo(2, "storage-2:1", True)]
    for name in ("a", "b"):
        queues = [
            api.QueueRouteInfo(queue_id, 7 + queue_id, 3, leader, list(followers))
            for queue_id in range(4)
        ]
        nameservers.routes[name] = api.RouteResponse(
            api.TopicInfo(name, "c", 4, int(MessageType.NORMAL), 0, 6), queues, 1
        )
    link = NameserverLink([A], nameservers)  # type: ignore[arg-type]
    metadata = ClusterMetadata(link, cluster="c")
    metadata.watching = True
    a, b = await metadata.route("a"), await metadata.route("b")
    assert a == nameservers.routes["a"]
    assert b == nameservers.routes["b"]
    assert all(qa is qb for qa, qb in zip(a.queues, b.queues, strict=True))
    topic_a, topic_b = await metadata.get_topic("a"), await metadata.get_topic("b")
    assert topic_a.name == "a"
    assert topic_b.name == "b"
    assert [q.queue_id for q in topic_a.queues] == [0, 1, 2, 3]
    assert topic_a.queues is topic_b.queues


async def test_a_new_consumer_group_while_away_fails_retriably_even_with_auto_create() -> None:
    nameservers = _Nameservers()
    link = NameserverLink([A, B, C], nameservers)  # type: ignore[arg-type]
    metadata = ClusterMetadata(link, cluster="c", auto_create=True)
    nameservers.away = True
    with pytest.raises(BrokerError) as raised:
        await metadata.get_group("new-group")
    assert raised.value.code is errors.UNAVAILABLE
    assert raised.value.retriable
    assert "consumer group 'new-group': the nameserver cannot be reached" in raised.value.message


async def test_a_silent_watch_stream_is_dropped_for_the_next_replica() -> None:
    """A stream that confirms once and then says nothing (a replica cut off from its
    group sends no confirmations) counts as down after the silence bound."""
    _metadata, nameservers, _clock, watch = await _watched(silence_max_ms=100)
    await async_wait_until(
        lambda: (
            [c for c in nameservers.calls if c.startswith("watch")][:2]
            == [f"watch@{A}", f"watch@{B}"]
        ),
        timeout_s=10,
        what="the watch moved on from the silent replica",
    )
    await _stop(watch)
