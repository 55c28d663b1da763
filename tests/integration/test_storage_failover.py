"""Three storage node processes on 127.0.0.1: append, read, receive + ack, and a leader
SIGKILLed mid-stream.

Contract checked: every acknowledged append is read back exactly once, at the
offset its acknowledgement named, with dense offsets per queue; a consumer
group receives and acknowledges every stored message exactly once; a
follower answers NOT_LEADER with the leader's address; a killed node comes
back from its WAL and serves again.
"""

from __future__ import annotations

import asyncio
import random
from operator import methodcaller
from pathlib import Path

import pytest

from angelia_rpc import AngeliaError
from protocol import errors
from protocol.storage_api import (
    AckRequest,
    AppendRequest,
    ChangeInvisibleRequest,
    GetOffsetRequest,
    Message,
    QueueInfoRequest,
    ReadRequest,
    ReceiveRequest,
    StoredMessage,
)
from rip5.bench.storage_cluster import LocalStorageCluster
from tests.waiting import async_wait_until

pytestmark = pytest.mark.integration

TOPIC = "orders"
QUEUES = range(6)
BATCH = 8
GROUPS = 8


def _batch(queue_id: int, serial: int) -> list[Message]:
    return [
        Message(
            TOPIC,
            queue_id,
            f"q{queue_id}-b{serial}-m{i}",
            f"body {queue_id}/{serial}/{i}".encode() * 20,
            tag="even" if i % 2 == 0 else "odd",
            properties={"serial": str(serial)},
        )
        for i in range(BATCH)
    ]


async def _append(cluster: LocalStorageCluster, queue_id: int, serial: int) -> dict[str, int]:
    messages = _batch(queue_id, serial)
    response = await cluster.call(lambda s: s.append(AppendRequest(TOPIC, queue_id, messages)))
    assert [o.message_id for o in response.outcomes] == [m.message_id for m in messages]
    assert all(o.placement == 0 and o.queue_offset >= 0 for o in response.outcomes)
    return {o.message_id: o.queue_offset for o in response.outcomes}


async def _read_all(cluster: LocalStorageCluster, queue_id: int) -> list[StoredMessage]:
    stored: list[StoredMessage] = []
    offset = 0
    while True:
        request = ReadRequest(TOPIC, queue_id, offset, count_max=20)
        response = await cluster.call(methodcaller("read", request))
        assert response.first_offset == 0
        stored += response.messages
        offset += len(response.messages)
        if offset >= response.end_offset:
            assert offset == response.end_offset
            return stored
        assert response.messages, "a read below the end offset returned nothing"


async def _consume_all(cluster: LocalStorageCluster, queue_id: int) -> list[str]:
    """Receive and ack everything currently visible to group ``cg``; the message ids."""
    received: list[str] = []
    while True:
        response = await cluster.call(
            lambda s: s.receive(ReceiveRequest("cg", TOPIC, queue_id, 16, 120_000))
        )
        if not response.messages:
            return received
        handles = [m.handle for m in response.messages]
        ack = AckRequest("cg", TOPIC, queue_id, [m.handle for m in response.messages])
        acks = await cluster.call(methodcaller("ack", ack))
        assert [o.error_code for o in acks.outcomes] == [0] * len(handles)
        received += [m.message.message.message_id for m in response.messages]


async def _check_queue(
    cluster: LocalStorageCluster, queue_id: int, acked: dict[str, int]
) -> list[str]:
    stored = await _read_all(cluster, queue_id)
    assert [m.queue_offset for m in stored] == list(range(len(stored))), "offsets not dense"
    ids = [m.message.message_id for m in stored]
    assert len(ids) == len(set(ids)), "a message id is stored twice"
    at = {m.message.message_id: m for m in stored}
    for message_id, offset in acked.items():
        assert message_id in at, f"acknowledged {message_id} is lost"
        assert at[message_id].queue_offset == offset
    for m in stored:
        assert m.message.topic == TOPIC
        assert m.message.queue_id == queue_id
        serial = m.message.properties["serial"]
        assert m.message.body.startswith(f"body {queue_id}/{serial}/".encode())
    return ids


async def _scenario(root: Path) -> None:
    cluster = LocalStorageCluster(root, nodes=3, groups=GROUPS)
    await cluster.start()
    try:
        leaders = await cluster.wait_all_led()
        acked: dict[int, dict[str, int]] = {q: {} for q in QUEUES}
        for serial in range(3):
            for q in QUEUES:
                acked[q] |= await _append(cluster, q, serial)

        # A follower refuses with the leader's address.
        victim_group = cluster.group_of(TOPIC, 0)
        leader = leaders[victim_group]
        follower = next(n for n in cluster.addresses if n != leader)
        with pytest.raises(AngeliaError) as refused:
            await cluster.stub(follower).append(AppendRequest(TOPIC, 0, _batch(0, 999)))
        assert refused.value.code == errors.NOT_LEADER
        assert refused.value.leader_hint == cluster.addresses[leader]

        # A repeated append (a client retry) is not stored again: same offsets back.
        again = await cluster.call(methodcaller("append", AppendRequest(TOPIC, 1, _batch(1, 0))))
        assert all(o.duplicate for o in again.outcomes)
        assert {o.message_id: o.queue_offset for o in again.outcomes} == {
            m.message_id: acked[1][m.message_id] for m in _batch(1, 0)
        }

        # Bad input names its cause, stores nothing, and the node goes on serving.
        with pytest.raises(AngeliaError) as bad:
            await cluster.stub(leader).append(
                AppendRequest(TOPIC, 0, [Message(TOPIC, 1, "stray", b"x")])
            )
        assert bad.value.code == errors.BAD_REQUEST
        assert "stray" in bad.value.message

        # Change invisible duration: a new handle; the old one is stale.
        got = await cluster.call(
            methodcaller("receive", ReceiveRequest("cg2", TOPIC, 1, 1, 60_000))
        )
        (delivery,) = got.messages
        changed = await cluster.call(
            methodcaller("change_invisible", ChangeInvisibleRequest("cg2", delivery.handle, 30_000))
        )
        assert changed.handle.generation > delivery.handle.generation
        stale = await cluster.call(
            methodcaller("ack", AckRequest("cg2", TOPIC, 1, [delivery.handle, changed.handle]))
        )
        assert [o.error_code for o in stale.outcomes] == [errors.INVALID_RECEIPT_HANDLE.number, 0]

        # Consume part of queue 0 before the failover.
        consumed = await _consume_all(cluster, 0)
        assert sorted(consumed) == sorted(acked[0])

        # Appends to every queue keep flowing while the leader of queue 0's group dies.
        acked_after_kill = asyncio.Event()
        stop = asyncio.Event()
        killed = False

        async def stream(q: int, first_serial: int) -> None:
            s = first_serial
            while not stop.is_set():
                acked[q] |= await _append(cluster, q, s)
                s += 1
                if killed and q == 0 and s > first_serial + 6:
                    acked_after_kill.set()

        writers = [asyncio.create_task(stream(q, 100 + 1000 * q)) for q in QUEUES]
        await async_wait_until(
            lambda: len(acked[0]) >= 3 * BATCH + 3 * BATCH, 60, "appends before the kill"
        )
        cluster.kill(leader)
        killed = True
        await asyncio.wait_for(acked_after_kill.wait(), 60)
        stop.set()
        await asyncio.gather(*writers)

        new_leaders = await cluster.wait_all_led()
        assert new_leaders[victim_group] != leader
        for q in QUEUES:
            await _check_queue(cluster, q, acked[q])

        # The consumer group goes on through the new leader: the rest, once each.
        consumed += await _consume_all(cluster, 0)
        assert sorted(consumed) == sorted(acked[0])
        info = await cluster.call(lambda s: s.queue_info(QueueInfoRequest(TOPIC, 0)))
        offset = await cluster.call(lambda s: s.get_offset(GetOffsetRequest("cg", TOPIC, 0)))
        assert offset.offset == info.end_offset == len(acked[0])

        # The killed node restarts from its WAL and can lead again.
        await cluster.start_node(leader)
        await cluster.wait_all_led()
        status = await cluster.status(leader)
        assert status is not None
        assert len(status.leaders) == GROUPS
        rng = random.Random(7)
        for q in rng.sample(list(QUEUES), 3):
            await _check_queue(cluster, q, acked[q])

        # A read sent to the restarted node is served, or routed by its NOT_LEADER hint.
        stored = await cluster.call(
            lambda s: s.read(ReadRequest(TOPIC, 0, 0, count_max=5)), first_node=leader
        )
        assert [m.queue_offset for m in stored.messages] == list(range(5))
    finally:
        await cluster.stop()


def test_storage_failover(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))
