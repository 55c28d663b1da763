"""The raft transport over real Angelia tcp streams: batches larger than a frame."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from angelia_rpc import RpcConfig, Server
from angelia_rpc.ports import free_port
from raft.host.angelia_transport import AngeliaTransport
from tests.waiting import async_wait_until


@asynccontextmanager
async def receiving_node(
    address: str, received: list[tuple[int, bytes]], **options: int
) -> AsyncIterator[AngeliaTransport]:
    """Node 2: an Angelia server whose transport records every delivered batch."""
    transport = AngeliaTransport(2, {}, RpcConfig(), **options)
    await transport.start(lambda from_node, data: received.append((from_node, data)))
    server = Server([transport.binding()], RpcConfig())
    await server.start(address)
    try:
        yield transport
    finally:
        await server.stop()
        await transport.close()


async def test_a_batch_larger_than_a_frame_arrives_whole_and_in_order() -> None:
    address = f"127.0.0.1:{free_port()}"
    received: list[tuple[int, bytes]] = []
    big = os.urandom(40 << 20)  # beyond the 16 MiB frame limit
    async with receiving_node(address, received):
        sender = AngeliaTransport(1, {2: address}, RpcConfig(), part_bytes=1 << 20)
        try:
            for data in (b"before", big, b"after"):
                sender.send(2, data)
            await async_wait_until(lambda: len(received) == 3, timeout_s=60)
        finally:
            await sender.close()
    assert [data for _, data in received] == [b"before", big, b"after"]
    assert {from_node for from_node, _ in received} == {1}


async def test_a_batch_beyond_the_receivers_bound_is_dropped_and_the_stream_goes_on() -> None:
    address = f"127.0.0.1:{free_port()}"
    received: list[tuple[int, bytes]] = []
    async with receiving_node(address, received, batch_bytes_max=3000):
        sender = AngeliaTransport(1, {2: address}, RpcConfig(), part_bytes=1000)
        try:
            for data in (b"a" * 2500, b"b" * 5000, b"c" * 2999):
                sender.send(2, data)
            await async_wait_until(lambda: len(received) == 2, timeout_s=30)
        finally:
            await sender.close()
    assert [data for _, data in received] == [b"a" * 2500, b"c" * 2999]


async def test_batches_sent_past_an_idle_sender_task_keep_their_order() -> None:
    address = f"127.0.0.1:{free_port()}"
    received: list[tuple[int, bytes]] = []
    async with receiving_node(address, received):
        sender = AngeliaTransport(1, {2: address}, RpcConfig(), part_bytes=1000)
        try:
            sender.send(2, b"first")  # opens the stream through the sender task
            await async_wait_until(lambda: len(received) == 1, timeout_s=30)
            await async_wait_until(lambda: 2 in sender._idle_calls, timeout_s=30)
            # The task is idle on an open stream: these go straight into it, except
            # the one larger than a part, which the task sends (after "direct").
            sender.send(2, b"direct")
            sender.send(2, b"x" * 2500)
            sender.send(2, b"last")
            await async_wait_until(lambda: len(received) == 4, timeout_s=30)
        finally:
            await sender.close()
    assert [data for _, data in received] == [b"first", b"direct", b"x" * 2500, b"last"]
