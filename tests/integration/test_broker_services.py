"""The broker's cluster-backed ports against an in-process nameserver and storage node
(real sockets, real WALs): metadata kept fresh by the watch, NOT_LEADER hints followed,
unreachable nameservers skipped, storage errors mapped to broker errors."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from angelia_rpc import AngeliaError, CallContext, Peers, RpcConfig, Server
from angelia_rpc.cluster_services import NameserverService, StorageService
from broker.domain import GroupInfo, Message, PopResult, QueueRef
from broker.errors import BrokerError, Reason
from broker.services.nameserver import ClusterMetadata, NameserverLink
from broker.services.storage import StorageStore
from nameserver.config import NameserverConfig
from nameserver.server import serve as serve_nameserver
from protocol import errors
from protocol import nameserver_api as api
from protocol import storage_api as st
from protocol.filters import MessageFilter
from protocol.vocabulary import MessageType
from storage_node.config import StorageConfig
from storage_node.errors import StorageNotLeader
from storage_node.server import serve as serve_storage
from tests.waiting import async_wait_until

pytestmark = [pytest.mark.integration, pytest.mark.alone]

CLUSTER = "DefaultCluster"
GROUPS = 4


@dataclass
class Cluster:
    nameserver: str
    storage: str
    admin: NameserverService
    peers: Peers


async def _serve(
    serve: object, config: object, data_dir: Path, stopping: asyncio.Event
) -> tuple[str, asyncio.Task[None]]:
    endpoints: list[str] = []
    task = asyncio.create_task(serve(config, data_dir, stopping, endpoints.append))  # type: ignore[operator]
    await async_wait_until(lambda: endpoints or task.done(), timeout_s=30, what="ready")
    assert not task.done(), task.exception()
    return endpoints[0], task


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    stopping = asyncio.Event()
    nameserver, ns_task = await _serve(
        serve_nameserver,
        NameserverConfig(listen="127.0.0.1:0", groups=GROUPS, replication_factor=1),
        tmp_path / "ns",
        stopping,
    )
    storage, st_task = await _serve(
        serve_storage,
        StorageConfig(listen="127.0.0.1:0", groups=GROUPS, nameserver=nameserver),
        tmp_path / "st",
        stopping,
    )
    peers = Peers(RpcConfig())
    admin = NameserverService(peers.channel(nameserver))

    async def cluster_exists() -> bool:
        with contextlib.suppress(AngeliaError):
            await admin.cluster_status(api.NameRequest(CLUSTER))
            return True
        return False

    deadline = asyncio.get_running_loop().time() + 30
    while not await cluster_exists():
        assert asyncio.get_running_loop().time() < deadline, "the cluster was never created"
        await asyncio.sleep(0.02)
    node = StorageService(peers.channel(storage))

    async def leads_every_group() -> bool:
        status = await node.status(st.NodeStatusRequest())
        return len(status.led) == GROUPS

    while not await leads_every_group():
        assert asyncio.get_running_loop().time() < deadline, "the storage node never led"
        await asyncio.sleep(0.02)
    yield Cluster(nameserver, storage, admin, peers)
    await peers.close()
    stopping.set()
    await asyncio.gather(ns_task, st_task)


def _metadata(cluster: Cluster, *addresses: str, auto_create: bool = False) -> ClusterMetadata:
    link = NameserverLink(list(addresses or [cluster.nameserver]), cluster.peers)
    return ClusterMetadata(link, cluster=CLUSTER, auto_create=auto_create)


async def test_metadata_follows_the_watch_and_skips_an_unreachable_nameserver(
    cluster: Cluster,
) -> None:
    metadata = _metadata(cluster, "127.0.0.1:1", cluster.nameserver)  # the first is down
    watch = asyncio.create_task(metadata.run_watch())
    try:
        await cluster.admin.create_topic(api.CreateTopicRequest("orders", CLUSTER, 2, 2))
        await async_wait_until(lambda: metadata.watching, what="the watch to run")
        topic = await metadata.get_topic("orders")
        assert [q.queue_id for q in topic.queues] == [0, 1]
        assert topic.message_types == {MessageType.FIFO}
        for_send = await metadata.get_topic_for_send("orders", MessageType.FIFO)
        assert for_send == topic
        # Converted once per route read: every send asks for it.
        assert await metadata.get_topic_for_send("orders", MessageType.FIFO) is for_send
        await cluster.admin.update_topic(api.UpdateTopicRequest("orders", queue_count=3))

        async def grown() -> bool:
            return (await metadata.get_topic("orders")).queue_count == 3

        deadline = asyncio.get_running_loop().time() + 10
        while not await grown():  # the watch drops the cached route
            assert asyncio.get_running_loop().time() < deadline, "the cache never refreshed"
            await asyncio.sleep(0.02)
        assert (await metadata.get_topic_for_send("orders", MessageType.FIFO)).queue_count == 3
        with pytest.raises(BrokerError) as missing:
            await metadata.get_topic("nope")
        assert missing.value.reason is Reason.TOPIC_NOT_FOUND
        with pytest.raises(BrokerError) as no_group:
            await metadata.get_group("nobody")
        assert no_group.value.reason is Reason.CONSUMER_GROUP_NOT_FOUND
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch


async def test_auto_create_makes_topics_on_first_send_and_groups_on_first_use(
    cluster: Cluster,
) -> None:
    metadata = _metadata(cluster, auto_create=True)
    provisional = await metadata.get_topic("fresh")  # offered, not created
    assert provisional.message_types == {MessageType.NORMAL, MessageType.FIFO}
    with pytest.raises(AngeliaError):
        await cluster.admin.get_topic(api.NameRequest("fresh"))
    created = await metadata.get_topic_for_send("fresh", MessageType.FIFO)
    assert created.message_types == {MessageType.FIFO}
    stored = await cluster.admin.get_topic(api.NameRequest("fresh"))
    assert stored.topic.message_type == 2
    group = await metadata.get_group("new-group", topics=["unknown-topic"])
    assert group.retry.max_delivery_attempts == 17
    assert not group.fifo
    ordered = await metadata.get_group("ordered-group", topics=["unknown-topic", "fresh"])
    assert ordered.fifo  # a subscriber of a FIFO topic gets a FIFO group
    dlq = await metadata.get_topic("%DLQ%new-group")  # made for its group, one queue per raft group
    assert [q.queue_id for q in dlq.queues] == list(range(1, GROUPS + 1))


class _StaleRoutes(ClusterMetadata):
    """Routes that name ``former`` as the leader of every group, as a stale route would."""

    def __init__(self, cluster: Cluster, former: str) -> None:
        super().__init__(NameserverLink([cluster.nameserver], cluster.peers), cluster=CLUSTER)
        self.former = former

    async def route(self, topic: str) -> api.RouteResponse:
        route = await super().route(topic)
        former = api.EndpointInfo(99, self.former, True)
        return replace(
            route, queues=[replace(q, leader=former, followers=[]) for q in route.queues]
        )


class _Follower:
    """A storage node that never leads: NOT_LEADER naming ``leader``; counts calls."""

    def __init__(self, leader: str) -> None:
        self.leader = leader
        self.calls = 0

    async def append(self, request: st.AppendRequest, context: CallContext) -> st.AppendResponse:
        self.calls += 1
        raise StorageNotLeader("this node follows", self.leader)

    def __getattr__(self, name: str) -> object:
        async def refuse(request: object, context: CallContext) -> object:
            self.calls += 1
            raise StorageNotLeader("this node follows", self.leader)

        return refuse


async def test_store_follows_a_not_leader_hint_and_remembers_the_leader(
    cluster: Cluster,
) -> None:
    await cluster.admin.create_topic(api.CreateTopicRequest("t", CLUSTER, 1))
    await cluster.admin.create_consumer_group(api.CreateConsumerGroupRequest("g", CLUSTER))
    follower = _Follower(cluster.storage)
    server = Server([StorageService.bind(follower)], RpcConfig())
    follower_address = await server.start("127.0.0.1:0")
    try:
        metadata = _StaleRoutes(cluster, follower_address)
        store = StorageStore(metadata, cluster.peers)
        queue = QueueRef("t", 0)
        first = await store.append(queue, [Message("t", b"one", "id-1")])
        assert [r.offset for r in first] == [0]
        assert follower.calls == 1
        second = await store.append(
            queue, [Message("t", b"two", "id-2"), Message("t", b"3", "id-3")]
        )
        assert [r.offset for r in second] == [1, 2]
        assert follower.calls == 1  # the leader was remembered

        group = GroupInfo("g")
        popped = await store.pop(
            group, queue, batch_size=8, invisible_ms=30_000, message_filter=MessageFilter()
        )
        assert [p.message.body for p in popped.messages] == [b"one", b"two", b"3"]
        head = popped.messages[0]
        await store.ack("g", queue, head.offset, head.generation)
        with pytest.raises(BrokerError) as stale:
            await store.ack("g", queue, head.offset, head.generation)
        assert stale.value.reason is Reason.INVALID_RECEIPT_HANDLE
        renewed, _ = await store.change_invisible(
            "g", queue, popped.messages[1].offset, popped.messages[1].generation, 0
        )
        assert renewed != popped.messages[1].generation
        dead = await store.forward_to_dead_letter(
            group, queue, popped.messages[2].offset, popped.messages[2].generation
        )
        assert dead.queue.topic == "%DLQ%g"
        # The committed offset passes "two", still in flight (RocketMQ's committed offset).
        assert await store.get_consumer_offset("g", queue) == 3
    finally:
        await server.stop()


async def test_store_reports_an_unreachable_cluster_as_retriable(cluster: Cluster) -> None:
    await cluster.admin.create_topic(api.CreateTopicRequest("lonely", CLUSTER, 1))
    metadata = _StaleRoutes(cluster, "127.0.0.1:1")  # a leader that is gone for good
    store = StorageStore(metadata, cluster.peers, deadline_ms=500)
    with pytest.raises(BrokerError) as failed:
        await store.append(QueueRef("lonely", 0), [Message("lonely", b"x", "id")])
    assert failed.value.retriable
    assert failed.value.code in (errors.UNAVAILABLE, errors.DEADLINE_EXCEEDED)


async def test_store_passes_over_a_dead_leader_at_once(cluster: Cluster) -> None:
    # A route naming a node that is down (as right after it was killed): the store's
    # stubs do not wait for it, so the append reaches the seed long before one call's
    # timeout, which a waiting stub would spend on the dead node.
    await cluster.admin.create_topic(api.CreateTopicRequest("failover", CLUSTER, 1))
    metadata = _StaleRoutes(cluster, "127.0.0.1:1")
    store = StorageStore(
        metadata,
        cluster.peers,
        seeds=[cluster.storage],
        call_timeout_ms=600_000,
        deadline_ms=1_200_000,
    )
    queue = QueueRef("failover", 0)
    appended = await asyncio.wait_for(
        store.append(queue, [Message("failover", b"x", "id-1")]), timeout=60
    )
    assert [r.offset for r in appended] == [0]


async def _popped_with_counted_acks(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, topic: str, count: int
) -> tuple[StorageStore, QueueRef, PopResult, list[int]]:
    """``count`` messages appended to a new one-queue topic and popped for group "g";
    the list collects the number of handles of every storage ack call from then on."""
    await cluster.admin.create_topic(api.CreateTopicRequest(topic, CLUSTER, 1))
    store = StorageStore(_metadata(cluster), cluster.peers, seeds=[cluster.storage])
    queue = QueueRef(topic, 0)
    await store.append(
        queue, [Message(topic, f"m{i}".encode(), f"{topic}{i}") for i in range(count)]
    )
    popped = await store.pop(
        GroupInfo("g"), queue, batch_size=8, invisible_ms=30_000, message_filter=MessageFilter()
    )
    assert len(popped.messages) == count
    calls: list[int] = []
    real_call = store._ack_call

    async def counted(group: str, q: QueueRef, handles: list[st.ReceiptHandle]) -> st.AckResponse:
        calls.append(len(handles))
        return await real_call(group, q, handles)

    monkeypatch.setattr(store, "_ack_call", counted)
    return store, queue, popped, calls


async def test_concurrent_acks_of_one_queue_share_one_storage_call(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, queue, popped, calls = await _popped_with_counted_acks(cluster, monkeypatch, "acks", 6)
    head = popped.messages[0]
    outcomes = await asyncio.gather(
        *(store.ack("g", queue, p.offset, p.generation) for p in popped.messages),
        store.ack("g", queue, head.offset, head.generation + 1000),  # never issued
        return_exceptions=True,
    )
    assert outcomes[:6] == [None] * 6
    assert isinstance(outcomes[6], BrokerError)
    assert outcomes[6].reason is Reason.INVALID_RECEIPT_HANDLE
    assert sum(calls) == 7
    assert len(calls) <= 2  # the first ack goes at once; the rest wait for it and go together


async def test_ack_all_finishes_a_receive_in_one_storage_call_with_outcomes_in_order(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, queue, popped, calls = await _popped_with_counted_acks(
        cluster, monkeypatch, "acks-all", 5
    )
    head = popped.messages[0]
    deliveries = [(queue, p.offset, p.generation) for p in popped.messages]
    deliveries.insert(2, (queue, head.offset, head.generation + 1000))  # never issued
    outcomes = await store.ack_all("g", deliveries)
    assert [outcome is None for outcome in outcomes] == [True, True, False, True, True, True]
    stale = outcomes[2]
    assert isinstance(stale, BrokerError)
    assert stale.reason is Reason.INVALID_RECEIPT_HANDLE
    assert calls == [6]
    assert await store.get_consumer_offset("g", queue) == 5


async def test_ack_all_of_two_queues_keeps_the_outcomes_in_request_order(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, first, popped, calls = await _popped_with_counted_acks(
        cluster, monkeypatch, "acks-one", 2
    )
    await cluster.admin.create_topic(api.CreateTopicRequest("acks-two", CLUSTER, 1))
    second = QueueRef("acks-two", 0)
    await store.append(second, [Message("acks-two", b"x", f"two{i}") for i in range(2)])
    other = await store.pop(
        GroupInfo("g"), second, batch_size=8, invisible_ms=30_000, message_filter=MessageFilter()
    )
    a, b = popped.messages
    c, d = other.messages
    deliveries = [
        (first, a.offset, a.generation),
        (second, c.offset, c.generation + 1000),  # never issued
        (first, b.offset, b.generation + 1000),  # never issued
        (second, d.offset, d.generation),
    ]
    outcomes = await store.ack_all("g", deliveries)
    assert [outcome is None for outcome in outcomes] == [True, False, False, True]
    assert sorted(calls) == [2, 2]  # one storage call per queue


async def test_ack_outcomes_not_matching_the_handles_fail_every_waiting_acker(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, queue, popped, _calls = await _popped_with_counted_acks(
        cluster, monkeypatch, "acks-short", 3
    )
    real_call = store._ack_call

    async def short(group: str, q: QueueRef, handles: list[st.ReceiptHandle]) -> st.AckResponse:
        response = await real_call(group, q, handles)
        return st.AckResponse(response.outcomes[:-1])  # a storage answer one outcome short

    monkeypatch.setattr(store, "_ack_call", short)
    deliveries = [(queue, p.offset, p.generation) for p in popped.messages]
    with pytest.raises(BrokerError) as failed:
        await asyncio.wait_for(store.ack_all("g", deliveries), 10)
    assert failed.value.code is errors.INTERNAL
    assert "2 outcomes for 3 handles" in failed.value.message


class _Unplaced(ClusterMetadata):
    """Routes naming no replica at all, as before the nameserver placed the groups."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(NameserverLink([cluster.nameserver], cluster.peers), cluster=CLUSTER)
        self.reads = 0

    async def route(self, topic: str) -> api.RouteResponse:
        self.reads += 1
        route = await super().route(topic)
        return replace(route, queues=[replace(q, leader=None, followers=[]) for q in route.queues])


async def test_store_waits_for_placement_then_reports_unavailable(cluster: Cluster) -> None:
    await cluster.admin.create_topic(api.CreateTopicRequest("unplaced", CLUSTER, 1))
    metadata = _Unplaced(cluster)
    store = StorageStore(metadata, cluster.peers, deadline_ms=600)
    with pytest.raises(BrokerError) as failed:
        await store.append(QueueRef("unplaced", 0), [Message("unplaced", b"x", "id")])
    assert failed.value.code is errors.UNAVAILABLE
    assert "no storage node serves" in failed.value.message
    assert metadata.reads > 1  # the route was read again while waiting


async def test_stale_hints_bouncing_between_two_nodes_end_at_the_deadline(
    cluster: Cluster,
) -> None:
    await cluster.admin.create_topic(api.CreateTopicRequest("bounce", CLUSTER, 1))
    first, second = _Follower(""), _Follower("")
    servers = [Server([StorageService.bind(f)], RpcConfig()) for f in (first, second)]
    first_address = await servers[0].start("127.0.0.1:0")
    second_address = await servers[1].start("127.0.0.1:0")
    first.leader, second.leader = second_address, first_address  # each names the other
    try:
        store = StorageStore(_StaleRoutes(cluster, first_address), cluster.peers, deadline_ms=800)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(BrokerError) as failed:
            await store.append(QueueRef("bounce", 0), [Message("bounce", b"x", "id")])
        assert failed.value.code is errors.NOT_LEADER
        assert failed.value.retriable
        assert loop.time() - started < 5
        assert first.calls + second.calls < 100  # paced, not a busy loop
    finally:
        for server in servers:
            await server.stop()


async def test_large_messages_are_received_in_answers_that_fit_a_frame(cluster: Cluster) -> None:
    # 32 x 3 MiB would be one 96 MiB answer, past the 16 MiB frame limit: storage answers
    # with what fits and hands the rest back for the next receive, uncounted.
    await cluster.admin.create_topic(api.CreateTopicRequest("large", CLUSTER, 1))
    store = StorageStore(_metadata(cluster), cluster.peers, seeds=[cluster.storage])
    queue = QueueRef("large", 0)
    for i in range(6):
        await store.append(queue, [Message("large", bytes(3 << 20), f"large{i}")])
    received: list[int] = []
    while len(received) < 6:
        popped = await store.pop(
            GroupInfo("g"),
            queue,
            batch_size=32,
            invisible_ms=60_000,
            message_filter=MessageFilter(),
        )
        assert 1 <= len(popped.messages) <= 2
        assert all(p.delivery_attempt == 1 for p in popped.messages)
        received += [p.offset for p in popped.messages]
    assert received == list(range(6))
