"""Frames queued for a link whose transport closed under them are dropped quietly."""

from __future__ import annotations

import asyncio

import uvloop

from angelia_rpc import Channel, RpcConfig, Server
from tests.contract.angelia_rig import Conformance, ConformanceImpl, Req


def test_flush_after_the_transport_closed_raises_nothing() -> None:
    async def scenario() -> list[dict[str, object]]:
        errors: list[dict[str, object]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        config = RpcConfig(transport="tcp", codec="msgpack")
        server = Server([Conformance.bind(ConformanceImpl())], config)
        address = await server.start("127.0.0.1:0")
        channel = Channel(address, config)
        stub = Conformance(channel)
        assert (await stub.echo(Req(1), timeout_ms=5000)).n == 1
        connection = await channel.connection(asyncio.get_running_loop().time() + 5)
        link = connection.link
        assert link is not None
        link.transport.close()  # type: ignore[attr-defined]  # the socket goes first
        connection.send_raw(b"frames queued before anyone noticed")
        await asyncio.sleep(0)  # the scheduled flush runs: no RuntimeError may escape
        await asyncio.sleep(0)
        await channel.close()
        await server.stop()
        return errors

    assert uvloop.run(scenario()) == []
