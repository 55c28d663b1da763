"""The http2 transport: h2c (or h2 over TLS), one stream per connection.

An Angelia connection is one HTTP/2 ``POST /angelia`` stream whose DATA
frames carry whole Angelia frames in both directions. HTTP/2 is
``protocol.http2_connection`` (the sans-IO connection the broker's gRPC
server runs on), driven here from asyncio: windows are opened wide
(connection and stream), received data is given back as it is consumed, and
bytes beyond the peer's windows wait inside the connection, in order, for
its WINDOW_UPDATE, so HTTP/2 flow control never stalls a healthy peer.

SHELL: sockets and the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from angelia_rpc.config import TlsConfig
from angelia_rpc.errors import RemoteProtocolError
from angelia_rpc.transport.base import LinkHandler, fail_future, split_address
from angelia_rpc.transport.tls import client_context, server_context
from protocol import errors, http2
from protocol.http2_connection import Http2Connection
from protocol.http2_events import (
    ConnectionTerminated,
    DataReceived,
    Event,
    RequestReceived,
    ResponseReceived,
    StreamReset,
    TrailersReceived,
)

log = logging.getLogger("angelia_rpc.transport.http2")
PATH = b"/angelia"
WINDOW = http2.WINDOW_MAX
FRAME_BYTES = 1024 * 1024
"""The largest HTTP/2 frame either end takes (16 KiB is HTTP/2's default): an
Angelia batch crosses in few frames."""

_CONTENT_TYPE = (b"content-type", b"application/angelia")
_TUNNEL_OPEN = http2.header_block([(b":status", b"200"), _CONTENT_TYPE])
_NOT_FOUND = http2.header_block([(b":status", b"404")])


class _H2Link(asyncio.Protocol):
    """Both ends: an HTTP/2 connection with one tunnel stream, as a :class:`Link`."""

    def __init__(
        self, client_side: bool, handler_factory: Callable[[], LinkHandler], authority: str = ""
    ) -> None:
        self.client_side = client_side
        self.handler_factory = handler_factory
        self.handler: LinkHandler | None = None
        self.authority = authority
        self.h2 = Http2Connection(
            client_side=client_side, window_bytes=WINDOW, frame_bytes_max=FRAME_BYTES
        )
        self.transport: asyncio.Transport | None = None
        self.stream_id: int | None = None
        self.peer = "?"
        self._lost = False
        self._closing = False
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- asyncio.Protocol ---------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peername = transport.get_extra_info("peername")
        if peername:
            self.peer = f"{peername[0]}:{peername[1]}"
        self.h2.initiate()
        if self.client_side:
            scheme = b"https" if transport.get_extra_info("sslcontext") else b"http"
            request = http2.header_block(
                [
                    (b":method", b"POST"),
                    (b":scheme", scheme),
                    (b":authority", self.authority.encode()),
                    (b":path", PATH),
                    _CONTENT_TYPE,
                ]
            )
            self.stream_id = self.h2.open_stream(request)
            self._attach()
        self._send()

    def _attach(self) -> None:
        self.handler = self.handler_factory()
        self.handler.link_made(self)
        if not self.client_side and not self.ready.done():
            self.ready.set_result(None)  # a client is ready when the response headers came

    def data_received(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except http2.FrameError as exc:  # the GOAWAY naming it is queued
            log.warning("HTTP/2 protocol error from %s: %s", self.peer, exc)
            self._send()
            fail_future(
                self.ready,
                RemoteProtocolError(
                    errors.PROTOCOL_VIOLATION,
                    f"{self.peer} does not speak HTTP/2 ({exc}): it is not an Angelia "
                    "http2 server (is it configured with another transport?)",
                ),
            )
            self._fail(f"HTTP/2 protocol error: {exc}")
            return
        for event in events:
            if self._lost:
                return
            self._on_event(event)
        self._send()

    def _on_event(self, event: Event) -> None:
        if isinstance(event, DataReceived):
            if event.stream_id == self.stream_id:
                if self.handler is not None and event.data:
                    self.handler.data_received(event.data)
                if event.end_stream:
                    self._fail("the peer ended the tunnel stream")
        elif isinstance(event, RequestReceived):
            headers = dict(event.headers)
            if self.stream_id is None and headers.get(b":path") == PATH:
                self.stream_id = event.stream_id
                self.h2.send_headers(event.stream_id, _TUNNEL_OPEN)
                self._attach()
            else:
                self.h2.send_headers(event.stream_id, _NOT_FOUND, end_stream=True)
        elif isinstance(event, ResponseReceived):
            status = dict(event.headers).get(b":status")
            if status != b"200":
                fail_future(
                    self.ready,
                    RemoteProtocolError(
                        errors.PROTOCOL_VIOLATION,
                        f"{self.peer} answered HTTP status {status!r} to {PATH!r}: it is "
                        "an HTTP/2 server but not an Angelia one",
                    ),
                )
                self._fail(f"the peer answered HTTP status {status!r}, not an Angelia tunnel")
            elif not self.ready.done():
                self.ready.set_result(None)
        elif isinstance(event, (StreamReset, TrailersReceived)):
            if event.stream_id == self.stream_id:
                self._fail("the peer ended the tunnel stream")
        elif isinstance(event, ConnectionTerminated):
            self._closing = self._closing or event.error_code == http2.NO_ERROR
            self._fail(f"the peer closed the HTTP/2 connection (error {event.error_code})")

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"{type(exc).__name__}: {exc}" if exc else "closed by the peer"
        fail_future(self.ready, ConnectionError(reason))
        self._lose(reason)

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()

    # -- Link ---------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self._closing or self._lost or self.stream_id is None:
            return
        self.h2.send_data(self.stream_id, data)
        self._send()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self.h2.close_connection(http2.NO_ERROR)
        self._send()
        if self.transport is not None:
            self.transport.close()

    def pause_reading(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    # -- internals ----------------------------------------------------------------
    def _send(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _fail(self, reason: str) -> None:
        if not self._closing:
            log.info("http2 link to %s failed: %s", self.peer, reason)
        if self.transport is not None:
            self.transport.close()
        fail_future(self.ready, ConnectionError(reason))
        self._lose(reason)

    def _lose(self, reason: str) -> None:
        if self._lost:
            return
        self._lost = True
        if self.handler is not None:
            self.handler.link_lost(reason)


class _H2Listener:
    def __init__(self, server: asyncio.Server, address: str, links: set[_H2Link]) -> None:
        self.server = server
        self.address = address
        self.links = links

    async def close(self) -> None:
        self.server.close()
        for link in list(self.links):
            if link.transport is not None:
                link.transport.abort()
        await self.server.wait_closed()


class Http2Transport:
    """Angelia frames in one HTTP/2 stream per connection (h2c, or h2 with ALPN over TLS)."""

    name = "http2"

    def __init__(self, tls: TlsConfig | None, frame_bytes_max: int) -> None:
        self.tls = tls
        self.frame_bytes_max = frame_bytes_max

    async def connect(self, address: str, handler: LinkHandler, timeout_s: float) -> None:
        """See :class:`angelia_rpc.transport.base.Transport`."""
        host, port = split_address(address)
        loop = asyncio.get_running_loop()
        ssl = client_context(self.tls, ["h2"]) if self.tls else None
        async with asyncio.timeout(timeout_s):
            _, link = await loop.create_connection(
                lambda: _H2Link(True, lambda: handler, address),
                host,
                port,
                ssl=ssl,
                server_hostname=self.tls.server_hostname if self.tls else None,
            )
            await link.ready

    async def listen(self, address: str, new_handler: Callable[[], LinkHandler]) -> _H2Listener:
        """See :class:`angelia_rpc.transport.base.Transport`."""
        host, port = split_address(address)
        loop = asyncio.get_running_loop()
        links: set[_H2Link] = set()

        def make() -> _H2Link:
            link = _H2Link(False, new_handler)
            links.add(link)
            link.ready.add_done_callback(lambda f: f.exception() if not f.cancelled() else None)
            original = link.connection_lost

            def lost(exc: Exception | None) -> None:
                links.discard(link)
                original(exc)

            link.connection_lost = lost  # type: ignore[method-assign]
            return link

        ssl = server_context(self.tls, ["h2"]) if self.tls else None
        server = await loop.create_server(make, host, port, ssl=ssl, reuse_address=True)
        bound = server.sockets[0].getsockname()
        return _H2Listener(server, f"{bound[0]}:{bound[1]}", links)
