"""One nameserver served in-process on 127.0.0.1 (real WAL, real sockets): heartbeats
and failure detection, leases, watches, and errors that name their cause."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from angelia_rpc import AngeliaError, Peers, RpcConfig
from angelia_rpc.cluster_services import NameserverService
from nameserver.config import NameserverConfig
from nameserver.server import serve
from nameserver.service import ROUTES_NAMES_MAX, WATCH_IDLE_MS
from protocol import errors
from protocol import nameserver_api as api
from tests.waiting import async_wait_until

pytestmark = pytest.mark.integration

CLUSTER = "DefaultCluster"
T = TypeVar("T")


def _config(*, timeout_ms: int) -> NameserverConfig:
    """One in-process nameserver sweeping every 100 ms, storage nodes and brokers
    timing out after ``timeout_ms``."""
    return NameserverConfig(
        listen="127.0.0.1:0",
        groups=4,
        expire_interval_ms=100,
        storage_node_timeout_ms=timeout_ms,
        broker_timeout_ms=timeout_ms,
    )


@pytest.fixture
async def nameserver(tmp_path: Path) -> AsyncIterator[NameserverService]:
    config = _config(timeout_ms=400)
    stopping = asyncio.Event()
    endpoints: list[str] = []
    task = asyncio.create_task(serve(config, tmp_path, stopping, endpoints.append))
    await async_wait_until(lambda: endpoints or task.done(), timeout_s=30, what="ready")
    peers = Peers(RpcConfig())
    stub = NameserverService(peers.channel(endpoints[0]))

    async def cluster_exists() -> bool:
        with contextlib.suppress(AngeliaError):
            await stub.cluster_status(api.NameRequest(CLUSTER))
            return True
        return False

    deadline = asyncio.get_running_loop().time() + 30
    while not await cluster_exists():
        assert asyncio.get_running_loop().time() < deadline, "the cluster was never created"
        await asyncio.sleep(0.02)
    yield stub
    await peers.close()
    stopping.set()
    await task


async def test_a_silent_storage_node_is_marked_down_and_back_up(
    nameserver: NameserverService,
) -> None:
    answer = await nameserver.storage_heartbeat(
        api.StorageHeartbeatRequest(7, CLUSTER, "127.0.0.1:7007", groups=3)
    )
    assert answer.groups == []  # nothing placed on it yet
    status = await nameserver.cluster_status(api.NameRequest(CLUSTER))
    assert [(n.node_id, n.alive, n.groups) for n in status.storage_nodes] == [(7, True, 3)]

    async def alive() -> bool:
        status = await nameserver.cluster_status(api.NameRequest(CLUSTER))
        return status.storage_nodes[0].alive

    deadline = asyncio.get_running_loop().time() + 30
    while await alive():
        assert asyncio.get_running_loop().time() < deadline, "never marked down"
        await asyncio.sleep(0.05)
    await nameserver.storage_heartbeat(api.StorageHeartbeatRequest(7, CLUSTER, "127.0.0.1:7007"))
    assert await alive()


async def test_leases_are_exclusive_until_released(nameserver: NameserverService) -> None:
    held = await nameserver.acquire_lease(api.LeaseRequest("txn-check/0", "broker-a", 60_000))
    assert held.lease.owner == "broker-a"
    with pytest.raises(AngeliaError) as taken:
        await nameserver.acquire_lease(api.LeaseRequest("txn-check/0", "broker-b", 60_000))
    assert taken.value.code is errors.LEASE_HELD
    assert "broker-a" in taken.value.message
    renewed = await nameserver.renew_lease(api.LeaseRequest("txn-check/0", "broker-a", 60_000))
    assert renewed.lease.token == held.lease.token
    with pytest.raises(AngeliaError) as refused:
        await nameserver.release_lease(api.LeaseRequest("txn-check/0", "broker-b"))
    assert refused.value.code is errors.LEASE_NOT_HELD
    await nameserver.release_lease(api.LeaseRequest("txn-check/0", "broker-a"))
    again = await nameserver.acquire_lease(api.LeaseRequest("txn-check/0", "broker-b", 60_000))
    assert again.lease.token > held.lease.token


async def test_a_watch_streams_changes_in_order_confirms_when_idle_and_asks_a_far_watcher_to_resync(
    nameserver: NameserverService,
) -> None:
    start = (await nameserver.list_topics(api.ListRequest())).revision
    async with nameserver.watch(api.WatchRequest(start, [api.KIND_TOPIC])) as stream:
        batches = aiter(stream)
        first = await anext(batches)
        assert first.changes == []  # the subscription's confirmation
        for i in range(3):
            await nameserver.create_topic(api.CreateTopicRequest(f"W{i}", CLUSTER, 1))
        keys: list[str] = []
        while len(keys) < 3:
            batch = await asyncio.wait_for(anext(batches), 10)
            keys += [c.key for c in batch.changes]
            assert all(c.topic is not None for c in batch.changes)
        assert keys == ["W0", "W1", "W2"]
        # Idle, the stream is confirmed every few seconds: an empty batch.
        confirmed = await asyncio.wait_for(anext(batches), WATCH_IDLE_MS / 1000 + 10)
        assert confirmed.changes == []
        assert not confirmed.resync_required
        assert confirmed.revision >= batch.revision
    async with nameserver.watch(api.WatchRequest(10**9)) as stream:
        ahead = await asyncio.wait_for(anext(aiter(stream)), 10)
        assert ahead.resync_required


async def test_bad_requests_name_their_cause(nameserver: NameserverService) -> None:
    with pytest.raises(AngeliaError) as bad_type:
        await nameserver.create_topic(api.CreateTopicRequest("T", CLUSTER, 1, message_type=9))
    assert bad_type.value.code is errors.BAD_REQUEST
    assert "message_type 9" in bad_type.value.message
    with pytest.raises(AngeliaError) as no_cluster:
        await nameserver.create_topic(api.CreateTopicRequest("T", "Nowhere", 1))
    assert no_cluster.value.code is errors.NOT_FOUND
    with pytest.raises(AngeliaError) as no_topic:
        await nameserver.route(api.NameRequest("Missing"))
    assert no_topic.value.code is errors.TOPIC_NOT_FOUND
    # The process goes on serving.
    created = await nameserver.create_topic(api.CreateTopicRequest("T", CLUSTER, 1))
    assert created.topic.queue_count == 1
    # Routes read together: each name has its own outcome, a missing one its own error.
    joined = await nameserver.routes(api.NamesRequest(["T", "Missing", "T"]))
    alone = await nameserver.route(api.NameRequest("T"))
    assert [o.route for o in joined.outcomes] == [alone, None, alone]
    failure = joined.outcomes[1].failure
    assert failure is not None
    assert errors.by_number(failure.code) is errors.TOPIC_NOT_FOUND
    assert "'Missing'" in failure.message
    with pytest.raises(AngeliaError) as too_many:
        await nameserver.routes(api.NamesRequest(["T"] * (ROUTES_NAMES_MAX + 1)))
    assert too_many.value.code is errors.BAD_REQUEST
    assert f"more than {ROUTES_NAMES_MAX}" in too_many.value.message


async def test_topics_and_groups_list_by_cluster(nameserver: NameserverService) -> None:
    await nameserver.create_cluster(api.CreateClusterRequest("Other", 2, 1))
    await nameserver.create_topic(api.CreateTopicRequest("T-default", CLUSTER, 1))
    await nameserver.create_topic(api.CreateTopicRequest("T-other", "Other", 1))
    await nameserver.create_consumer_group(api.CreateConsumerGroupRequest("G-default", CLUSTER))
    await nameserver.create_consumer_group(api.CreateConsumerGroupRequest("G-other", "Other"))

    def names(infos: list[api.TopicInfo] | list[api.ConsumerGroupInfo]) -> list[str]:
        return sorted(info.name for info in infos)

    every = await nameserver.list_topics(api.ListRequest())
    assert {"T-default", "T-other"} <= set(names(every.topics))
    other = await nameserver.list_topics(api.ListRequest("Other"))
    assert names(other.topics) == ["T-other"]
    assert other.revision >= every.revision
    # A caller holding a list learns it still stands without the topics being sent.
    same = await nameserver.list_topics(api.ListRequest("Other", unchanged_since=other.revision))
    assert same.unchanged
    assert same.topics == []
    assert same.revision >= other.revision
    await nameserver.create_topic(api.CreateTopicRequest("T-later", CLUSTER, 1))
    changed = await nameserver.list_topics(api.ListRequest(unchanged_since=same.revision))
    assert not changed.unchanged
    assert "T-later" in names(changed.topics)
    groups = await nameserver.list_consumer_groups(api.ListRequest(CLUSTER))
    assert "G-default" in names(groups.groups)
    assert "G-other" not in names(groups.groups)
    assert names((await nameserver.list_consumer_groups(api.ListRequest("Other"))).groups) == [
        "G-other"
    ]
    for listing in (nameserver.list_topics, nameserver.list_consumer_groups):
        with pytest.raises(AngeliaError) as unknown:
            await listing(api.ListRequest("Nowhere"))
        assert unknown.value.code is errors.NOT_FOUND
        assert "'Nowhere'" in unknown.value.message


async def test_a_nameserver_back_from_an_outage_does_not_mark_every_node_down(
    tmp_path: Path,
) -> None:
    """Restarted on its data after its storage nodes' timeout has passed, the leader
    waits a whole timeout for their heartbeats before it marks any of them down."""
    config = _config(timeout_ms=3_000)
    peers = Peers(RpcConfig())
    heartbeat = api.StorageHeartbeatRequest(7, CLUSTER, "127.0.0.1:7007", groups=3)

    async def run(stopping: asyncio.Event) -> tuple[asyncio.Task[None], NameserverService]:
        endpoints: list[str] = []
        task = asyncio.create_task(serve(config, tmp_path, stopping, endpoints.append))
        await async_wait_until(lambda: endpoints or task.done(), timeout_s=30, what="ready")
        return task, NameserverService(peers.channel(endpoints[0]))

    async def node_alive(stub: NameserverService) -> bool:
        status = await stub.cluster_status(api.NameRequest(CLUSTER))
        return status.storage_nodes[0].alive

    stopping = asyncio.Event()
    task, stub = await run(stopping)
    await _once_served(lambda: stub.storage_heartbeat(heartbeat))
    stopping.set()
    await task
    down_since = asyncio.get_running_loop().time()
    # The outage outlasts the timeout: the heartbeat on record is older than it.
    await async_wait_until(
        lambda: asyncio.get_running_loop().time() - down_since > 3.5, timeout_s=10, what="outage"
    )
    stopping = asyncio.Event()
    task, stub = await run(stopping)
    try:
        # Not marked down by the new leader's first sweeps, then kept up by a heartbeat.
        assert await _once_served(lambda: node_alive(stub)) is True
        await stub.storage_heartbeat(heartbeat)
        assert await node_alive(stub) is True
    finally:
        stopping.set()
        await task
        await peers.close()


async def _once_served(call: Callable[[], Awaitable[T]]) -> T:
    """``call``'s answer once the nameserver serves it (it fails while no leader is
    elected yet); 30 s at most."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            return await call()
        except AngeliaError:
            assert asyncio.get_running_loop().time() < deadline, "never served"
        await asyncio.sleep(0.02)
