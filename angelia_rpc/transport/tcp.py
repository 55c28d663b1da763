"""The tcp transport: asyncio (uvloop when installed as the loop) streams of Angelia frames.

The hot path: one socket per peer, frames written back to back (coalesced per
loop turn by the connection), TCP_NODELAY on. TLS wraps the socket when
configured.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import cast

from angelia_rpc.config import TlsConfig
from angelia_rpc.transport.base import LinkHandler, split_address
from angelia_rpc.transport.tls import client_context, server_context


class _TcpLink(asyncio.Protocol):
    """Adapts an asyncio transport to :class:`Link` and a handler."""

    def __init__(self, handler: LinkHandler) -> None:
        self.handler = handler
        self.transport: asyncio.Transport | None = None
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peername = transport.get_extra_info("peername")
        if peername:
            self.peer = f"{peername[0]}:{peername[1]}"
        self.write = transport.write  # type: ignore[method-assign,attr-defined]
        self.data_received = self.handler.data_received  # type: ignore[method-assign]
        self.handler.link_made(self)

    def write(self, data: bytes) -> None:
        """Replaced by the transport's write once connected."""
        raise ConnectionError("not connected")

    def data_received(self, data: bytes) -> None:
        """Replaced by the handler's data_received once connected."""
        self.handler.data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.handler.link_lost(f"{type(exc).__name__}: {exc}" if exc else "closed by the peer")

    def eof_received(self) -> bool | None:
        return None

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    def close(self) -> None:
        """Flush and close."""
        if self.transport is not None:
            self.transport.close()

    def pause_reading(self) -> None:
        """Stop reading the socket."""
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Read the socket again."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()


class _TcpListener:
    def __init__(self, server: asyncio.Server, address: str, links: set[_TcpLink]) -> None:
        self.server = server
        self.address = address
        self.links = links
        self.closed = False

    async def close(self) -> None:
        """Stop accepting and drop every connection, also one accepted but not yet
        made (its ``connection_made`` still to come): that one is aborted on arrival."""
        self.closed = True
        self.server.close()
        for link in list(self.links):
            if link.transport is not None:
                link.transport.abort()
        await self.server.wait_closed()


class TcpTransport:
    """Length-prefixed Angelia frames straight on TCP (optionally TLS)."""

    name = "tcp"

    def __init__(self, tls: TlsConfig | None = None) -> None:
        self.tls = tls

    async def connect(self, address: str, handler: LinkHandler, timeout_s: float) -> None:
        """See :class:`angelia_rpc.transport.base.Transport`."""
        host, port = split_address(address)
        loop = asyncio.get_running_loop()
        ssl = client_context(self.tls) if self.tls else None
        async with asyncio.timeout(timeout_s):
            await loop.create_connection(
                lambda: _TcpLink(handler),
                host,
                port,
                ssl=ssl,
                server_hostname=self.tls.server_hostname if self.tls else None,
            )

    async def listen(self, address: str, new_handler: Callable[[], LinkHandler]) -> _TcpListener:
        """See :class:`angelia_rpc.transport.base.Transport`."""
        host, port = split_address(address)
        loop = asyncio.get_running_loop()
        links: set[_TcpLink] = set()
        listener: _TcpListener | None = None

        def make() -> _TcpLink:
            link = _TcpLink(new_handler())
            links.add(link)
            made, lost = link.connection_made, link.connection_lost

            def made_unless_closed(transport: asyncio.BaseTransport) -> None:
                if listener is not None and listener.closed:
                    cast(asyncio.Transport, transport).abort()  # accepted as it closed
                    return
                made(transport)

            def lost_and_forgotten(exc: Exception | None) -> None:
                links.discard(link)
                if link.transport is not None:
                    lost(exc)

            link.connection_made = made_unless_closed  # type: ignore[method-assign]
            link.connection_lost = lost_and_forgotten  # type: ignore[method-assign]
            return link

        ssl = server_context(self.tls) if self.tls else None
        server = await loop.create_server(make, host, port, ssl=ssl, reuse_address=True)
        bound = server.sockets[0].getsockname()
        listener = _TcpListener(server, f"{bound[0]}:{bound[1]}", links)
        return listener
