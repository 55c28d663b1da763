"""The service, implementation and harness the Angelia conformance suite runs on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from angelia_rpc import Bidi, CallContext, Channel, RpcConfig, Server, ServerStream, Service, Unary
from angelia_rpc.transport.base import Transport
from angelia_rpc.transport.memory import MemoryNetwork
from protocol import errors
from protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class Req:
    n: int
    body: bytes = b""
    text: str = ""


@dataclass(frozen=True, slots=True)
class Resp:
    n: int
    body: bytes = b""


class Conformance(Service, name="conformance"):
    echo = Unary(Req, Resp)
    fail = Unary(Req, Resp)
    grow = Unary(Req, Resp)
    hang = Unary(Req, Resp)
    count = ServerStream(Req, Resp)
    forever = ServerStream(Req, Resp)
    double = Bidi(Req, Resp)
    take_one = Bidi(Req, Resp)


class Narrow(Service, name="conformance"):
    """A client-side declaration naming a method the server does not serve."""

    missing = Unary(Req, Resp)


class NotLeaderError(Exception):
    """Like every package's error root: a code and a leader hint."""

    code: ErrorCode = errors.NOT_LEADER

    def __init__(self, leader_hint: str) -> None:
        super().__init__("not the leader of group 7")
        self.leader_hint = leader_hint


@dataclass
class ConformanceImpl:
    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: list[str] = field(default_factory=list)

    async def echo(self, request: Req, context: CallContext) -> Resp:
        return Resp(request.n, request.body)

    async def fail(self, request: Req, context: CallContext) -> Resp:
        if request.n == 1:
            raise NotLeaderError("127.0.0.9:7702")
        raise ValueError(f"bad n {request.n}")

    async def grow(self, request: Req, context: CallContext) -> Resp:
        return Resp(request.n, b"g" * request.n)

    async def hang(self, request: Req, context: CallContext) -> Resp:
        self.started.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.cancelled.append("hang")
        raise AssertionError("unreachable")

    async def count(self, request: Req, context: CallContext) -> AsyncIterator[Resp]:
        for i in range(request.n):
            yield Resp(i, request.body)

    async def forever(self, request: Req, context: CallContext) -> AsyncIterator[Resp]:
        try:
            yield Resp(0)
            self.started.set()
            await asyncio.Event().wait()
        finally:
            self.cancelled.append("forever")

    async def double(
        self, requests: AsyncIterator[Req], context: CallContext
    ) -> AsyncIterator[Resp]:
        async for request in requests:
            if request.n < 0:
                raise NotLeaderError("elsewhere:1")
            yield Resp(request.n * 2, request.body)

    async def take_one(
        self, requests: AsyncIterator[Req], context: CallContext
    ) -> AsyncIterator[Resp]:
        async for request in requests:
            yield Resp(request.n)
            return


class Rig:
    """Starts servers and channels for one transport x codec pair; cleans up after."""

    def __init__(self, config: RpcConfig) -> None:
        self.config = config
        self.network = MemoryNetwork(seed=7) if config.transport == "memory" else None
        self.servers: list[Server] = []
        self.channels: list[Channel] = []
        self.impl = ConformanceImpl()

    def transport(self, name: str = "") -> Transport | None:
        if self.network is None:
            return None
        return self.network.transport(name)

    async def serve(self, address: str = "", config: RpcConfig | None = None) -> Server:
        config = config or self.config
        server = Server([Conformance.bind(self.impl)], config, transport=self.transport("server"))
        await server.start(address or ("server" if self.network else "127.0.0.1:0"))
        self.servers.append(server)
        return server

    def channel(self, address: str, config: RpcConfig | None = None) -> Channel:
        channel = Channel(address, config or self.config, transport=self.transport())
        self.channels.append(channel)
        return channel

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()
        for server in self.servers:
            await server.stop()
