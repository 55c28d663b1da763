"""The http2 transport: h2c (or h2 over TLS) with the h2 library, one stream per connection.

An Angelia connection is one HTTP/2 ``POST /angelia`` stream whose DATA
frames carry whole Angelia frames in both directions. Windows are opened
wide (connection and stream) and received data is acknowledged as it is
consumed, so HTTP/2 flow control never stalls a healthy peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from angelia_rpc.config import TlsConfig
from angelia_rpc.errors import RemoteProtocolError
from angelia_rpc.transport import h2_frames  # noqa: F401 - patches a costly repr
from angelia_rpc.transport.base import LinkHandler, split_address
from angelia_rpc.transport.tls import client_context, server_context
from protocol import errors

log = logging.getLogger("angelia_rpc.transport.http2")
PATH = b"/angelia"
WINDOW = 2**31 - 1


class _H2Link(asyncio.Protocol):
    """Both ends: an HTTP/2 connection with one tunnel stream, as a :class:`Link`."""

    def __init__(
        self, client_side: bool, handler_factory: Callable[[], LinkHandler], authority: str = ""
    ) -> None:
        self.client_side = client_side
        self.handler_factory = handler_factory
        self.handler: LinkHandler | None = None
        self.authority = authority
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=client_side, header_encoding=None)
        )
        self.transport: asyncio.Transport | None = None
        self.stream_id: int | None = None
        self.peer = "?"
        self._pending: deque[bytes] = deque()
        self._lost = False
        self._closing = False
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- asyncio.Protocol ---------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peername = transport.get_extra_info("peername")
        if peername:
            self.peer = f"{peername[0]}:{peername[1]}"
        conn = self.h2
        conn.initiate_connection()
        # MAX_FRAME_SIZE stays at the 16 KiB default: h2 checks frames that
        # arrive in the same read as the SETTINGS ACK against the old limit.
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WINDOW})
        conn.increment_flow_control_window(WINDOW - 65535)
        if self.client_side:
            self.stream_id = conn.get_next_available_stream_id()
            scheme = b"https" if transport.get_extra_info("sslcontext") else b"http"
            conn.send_headers(
                self.stream_id,
                [
                    (b":method", b"POST"),
                    (b":scheme", scheme),
                    (b":authority", self.authority.encode()),
                    (b":path", PATH),
                    (b"content-type", b"application/angelia"),
                ],
            )
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
        except h2.exceptions.ProtocolError as exc:
            log.warning("HTTP/2 protocol error from %s: %r", self.peer, exc)
            if not self.ready.done():
                self.ready.set_exception(
                    RemoteProtocolError(
                        errors.PROTOCOL_VIOLATION,
                        f"{self.peer} does not speak HTTP/2 ({exc}): it is not an Angelia "
                        "http2 server (is it configured with another transport?)",
                    )
                )
            self._fail(f"HTTP/2 protocol error: {exc}")
            return
        for event in events:
            self._on_event(event)
        self._send()

    def _on_event(self, event: Any) -> None:
        conn = self.h2
        if isinstance(event, h2.events.DataReceived):
            if event.flow_controlled_length:
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            if event.stream_id == self.stream_id and self.handler is not None:
                self.handler.data_received(event.data)
        elif isinstance(event, h2.events.RequestReceived):
            headers = dict(event.headers)
            if self.stream_id is None and headers.get(b":path") == PATH:
                self.stream_id = event.stream_id
                conn.send_headers(
                    event.stream_id,
                    [(b":status", b"200"), (b"content-type", b"application/angelia")],
                )
                self._attach()
            else:
                conn.send_headers(event.stream_id, [(b":status", b"404")], end_stream=True)
        elif isinstance(event, h2.events.ResponseReceived):
            status = dict(event.headers).get(b":status")
            if status != b"200":
                if not self.ready.done():
                    self.ready.set_exception(
                        RemoteProtocolError(
                            errors.PROTOCOL_VIOLATION,
                            f"{self.peer} answered HTTP status {status!r} to {PATH!r}: it is "
                            "an HTTP/2 server but not an Angelia one",
                        )
                    )
                self._fail(f"the peer answered HTTP status {status!r}, not an Angelia tunnel")
            elif not self.ready.done():
                self.ready.set_result(None)
        elif isinstance(event, h2.events.WindowUpdated):
            self._drain_pending()
        elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
            if event.stream_id == self.stream_id:
                self._fail("the peer ended the tunnel stream")
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._closing = self._closing or event.error_code == 0
            self._fail(f"the peer closed the HTTP/2 connection (error {event.error_code})")

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"{type(exc).__name__}: {exc}" if exc else "closed by the peer"
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(reason))
        self._lose(reason)

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()

    # -- Link ---------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self._closing or self._lost:
            return
        self._pending.append(data)
        self._drain_pending()
        self._send()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._drain_pending()
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.h2.close_connection()
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
    def _drain_pending(self) -> None:
        conn = self.h2
        stream_id = self.stream_id
        if stream_id is None:
            return
        pending = self._pending
        while pending:
            window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
            if window <= 0:
                return
            data = pending[0]
            if len(data) <= window:
                pending.popleft()
                conn.send_data(stream_id, data)
            else:
                conn.send_data(stream_id, data[:window])
                pending[0] = data[window:]

    def _send(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _fail(self, reason: str) -> None:
        if not self._closing:
            log.info("http2 link to %s failed: %s", self.peer, reason)
        if self.transport is not None:
            self.transport.close()
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(reason))
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
