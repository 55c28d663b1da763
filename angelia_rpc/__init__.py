"""Angelia: the internal RPC layer, the only way rip5 processes talk to each other.

Transports (``tcp`` default, ``grpc``, ``http2``, ``memory``) x codecs
(``msgpack`` default, ``avro``, ``json``), chosen per cluster by
:class:`RpcConfig`; a peer configured differently is refused at connect
time with a clear error. Every pair passes one conformance suite.

Usage::

    from dataclasses import dataclass
    from angelia_rpc import (
        Bidi, CallContext, Peers, RpcConfig, Server, Service, ServerStream, Unary,
    )

    @dataclass(frozen=True, slots=True)
    class AppendRequest:
        group: int
        entries: list[bytes]

    @dataclass(frozen=True, slots=True)
    class AppendResponse:
        index: int

    class Storage(Service, name="storage"):            # wire names "storage.append", ...
        append = Unary(AppendRequest, AppendResponse)
        watch = ServerStream(AppendRequest, AppendResponse)   # long polls, watches
        raft = Bidi(AppendRequest, AppendResponse)            # raft traffic

    class StorageImpl:                                  # the server side
        async def append(self, request: AppendRequest, context: CallContext) -> AppendResponse:
            return AppendResponse(index=42)     # or raise an error with .code (NOT_LEADER ...)
        async def watch(self, request, context):        # async generators for streams
            yield AppendResponse(index=1)
        async def raft(self, requests, context):        # requests: an async iterator
            async for request in requests:
                yield AppendResponse(index=request.group)

    config = RpcConfig(transport="tcp", codec="msgpack")
    server = Server([Storage.bind(StorageImpl())], config)
    address = await server.start("127.0.0.1:0")         # returns "127.0.0.1:<port>"

    peers = Peers(config)                                # one reused connection per peer
    storage = Storage(peers.channel(address))            # typed client stub
    response = await storage.append(AppendRequest(1, [b"x"]), timeout_ms=500)
    async with storage.watch(AppendRequest(1, [])) as events:   # cancelled on exit
        async for event in events:
            ...
    stream = storage.raft()                              # bidirectional
    await stream.send(AppendRequest(7, []))              # waits for flow-control credit
    reply = await anext(aiter(stream))
    stream.done_sending()                                # or stream.cancel()

Failures raise :class:`AngeliaError` with ``code`` (a ``protocol.errors``
code), ``message``, ``retriable`` and ``leader_hint``; a handler's exception
that carries a ``code`` (e.g. ``raft.errors.RaftNotLeader``) keeps its code and
leader across the wire. Deadlines: ``timeout_ms`` (default
``RpcConfig.call_timeout_ms`` for unary calls; streams have none unless given,
but connecting is bounded by ``call_timeout_ms``). A lost connection fails
open calls and streams with UNAVAILABLE; the next call reconnects (open a new
stream yourself). See docs/angelia.md for the design and the benchmark.
"""

from angelia_rpc.channel import Channel, ClientStream, Peers
from angelia_rpc.config import RpcConfig, TlsConfig
from angelia_rpc.errors import AngeliaError, LocalUsageError, RemoteError, RemoteProtocolError
from angelia_rpc.server import CallContext, Server
from angelia_rpc.service import Bidi, ServerStream, Service, Unary

__all__ = [
    "AngeliaError",
    "Bidi",
    "CallContext",
    "Channel",
    "ClientStream",
    "LocalUsageError",
    "Peers",
    "RemoteError",
    "RemoteProtocolError",
    "RpcConfig",
    "Server",
    "ServerStream",
    "Service",
    "TlsConfig",
    "Unary",
]
