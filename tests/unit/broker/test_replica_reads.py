"""broker.processor.replica_reads and the storage port's offset reads: a topic whose record
has read_replicas on is read round-robin over every replica of a queue's group, one without
it from the leader only; the record as routed decides, so a change the nameserver's watch
delivers takes effect with the next read; a follower behind the offset asked does not
answer."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

from broker.domain import QueueRef
from broker.processor.replica_reads import ReadSpread, usable_answer
from broker.services.storage import StorageStore
from protocol import nameserver_api as ns
from protocol import storage_api as st
from protocol.filters import MessageFilter
from protocol.records import pack_records

LEADER, FOLLOWER_1, FOLLOWER_2 = "h:1", "h:2", "h:3"
GROUP = 7


def _topic(read_replicas: bool) -> ns.TopicInfo:
    return ns.TopicInfo("hot", "c1", 1, 0, 1000, 6, read_replicas=read_replicas)


def test_reads_of_a_topic_with_read_replicas_go_round_robin_over_every_replica() -> None:
    spread = ReadSpread()
    assert spread.spreads(_topic(read_replicas=True))
    assert not spread.spreads(_topic(read_replicas=False))
    assert not spread.spreads(ns.TopicInfo("cold", "c1", 1, 0, 1000, 6))  # off by default
    replicas = ["h:3", "h:1", "h:2"]
    picks = Counter(spread.pick(7, replicas) for _ in range(30))
    assert picks == {"h:1": 10, "h:2": 10, "h:3": 10}
    # Groups take turns independently.
    assert spread.pick(8, replicas) == "h:1"
    assert spread.pick(8, replicas) == "h:2"
    assert spread.pick(9, []) is None


def test_a_follower_answers_only_from_offsets_it_has_applied() -> None:
    assert usable_answer(requested_offset=10, end_offset=10)
    assert usable_answer(requested_offset=10, end_offset=42)
    assert not usable_answer(requested_offset=10, end_offset=9)


class _Metadata:
    """The route of topic ``hot`` (one queue: LEADER and two followers), with the topic
    record the nameserver holds now (``topic``: replaced as the watch would)."""

    def __init__(self, topic: ns.TopicInfo) -> None:
        self.topic = topic

    def on_route_change(self, callback: Callable[[int | None], None]) -> None:
        del callback

    async def route(self, topic: str) -> ns.RouteResponse:
        followers = [ns.EndpointInfo(2, FOLLOWER_1, True), ns.EndpointInfo(3, FOLLOWER_2, True)]
        info = ns.QueueRouteInfo(0, GROUP, 1, ns.EndpointInfo(1, LEADER, True), followers)
        return ns.RouteResponse(self.topic, [info], 1)


class _Node:
    """A storage node's stub that serves reads up to ``end_offset``; records each read."""

    def __init__(self, address: str, reads: list[tuple[str, bool]], end_offset: int) -> None:
        self.address = address
        self.reads = reads
        self.end_offset = end_offset

    async def read(self, request: st.ReadRequest, timeout_ms: int) -> st.ReadResponse:
        assert timeout_ms > 0
        self.reads.append((self.address, request.from_follower))
        return st.ReadResponse([], 0, self.end_offset, request.queue_offset, pack_records([]))


class _Peers:
    def __init__(self, end_offsets: dict[str, int]) -> None:
        self.reads: list[tuple[str, bool]] = []
        self.nodes = {a: _Node(a, self.reads, end) for a, end in end_offsets.items()}

    def stub(self, service: object, address: str, *, wait_for_ready: bool = True) -> _Node:
        return self.nodes[address]


async def _reads(store: StorageStore, count: int, offset: int = 0) -> None:
    for _ in range(count):
        await store.read(QueueRef("hot", 0), offset, batch_size=8, message_filter=MessageFilter())


async def test_the_topic_record_decides_where_offset_reads_go() -> None:
    metadata = _Metadata(_topic(read_replicas=False))
    peers = _Peers({LEADER: 10, FOLLOWER_1: 10, FOLLOWER_2: 10})
    store = StorageStore(metadata, peers)  # type: ignore[arg-type]

    await _reads(store, 6)
    assert peers.reads == [(LEADER, False)] * 6  # without read replicas: the leader only

    peers.reads.clear()
    metadata.topic = dataclasses.replace(metadata.topic, read_replicas=True)  # an update
    await _reads(store, 6)
    assert Counter(peers.reads) == {(LEADER, True): 2, (FOLLOWER_1, True): 2, (FOLLOWER_2, True): 2}

    peers.reads.clear()
    metadata.topic = dataclasses.replace(metadata.topic, read_replicas=False)  # switched off
    await _reads(store, 3)
    assert peers.reads == [(LEADER, False)] * 3


async def test_a_follower_behind_the_offset_asked_leaves_the_read_to_the_leader() -> None:
    metadata = _Metadata(_topic(read_replicas=True))
    peers = _Peers({LEADER: 10, FOLLOWER_1: 4, FOLLOWER_2: 10})
    store = StorageStore(metadata, peers)  # type: ignore[arg-type]
    await _reads(store, 3, offset=8)
    # In turn: h:1 (the leader, as a replica), h:2 (behind: the leader answers), h:3.
    assert peers.reads == [
        (LEADER, True),
        (FOLLOWER_1, True),
        (LEADER, False),
        (FOLLOWER_2, True),
    ]
