"""A lean gRPC client for the load generators and the connector: unary and
server-streaming calls over h2c.

Why it exists: a load generator shares the machine with the servers it
measures, and grpc.aio is costly there: in ``rip5 bench e2e``'s receive+ack
phase the grpc.aio client took half of the 2 cores, nearly as much as the
broker, most of it in its streaming reads. This client reads HTTP/2
frames with ``struct``, splits gRPC messages out of DATA frames itself, and
keeps HPACK to the header blocks, one each way per call (its own indexed, as
grpc's client indexes them).

Scope, a load generator's (and the connector's, whose calls go through its
own failover, ``connector/client.py``): cleartext HTTP/2 (h2c, prior knowledge), identity
encoding only, no retries, no keepalive pings of its own. It follows the
protocol where a server relies on it: the connection preface and SETTINGS
(acknowledged), flow control of what it sends (connection and stream
windows, WINDOW_UPDATE), PING answers, RST_STREAM and GOAWAY, CONTINUATION
frames and padding. What it receives it allows generously: a stream window
of 2^31-1 bytes and a connection window topped up as data is read.

A call ends with its messages once the trailers say ``grpc-status: 0``;
any other status, a reset stream, a lost connection or the deadline raise
:class:`loadtest.client.CallFailed` named after the gRPC status code.

SHELL: asyncio sockets.
"""

from __future__ import annotations

import asyncio
import struct
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import cast

import grpc
import hpack

from loadtest.client import CallFailed
from protocol.http2 import (
    ACK,
    CANCEL,
    CONTINUATION,
    DATA,
    DEFAULT_FRAME_BYTES,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_FRAME_SIZE,
    U32,
    WINDOW_MAX,
    WINDOW_UPDATE,
    FrameError,
    header_fragment,
    parse_settings,
    settings_payload,
    split_frames,
    unpadded,
)
from protocol.http2 import frame as _frame

_GRPC_PREFIX = struct.Struct(">BI")

FRAME_BYTES_ANY = 1 << 24
"""Frames are taken up to HTTP/2's largest size, whatever SETTINGS said."""
TOP_UP_BYTES = 16 << 20
"""Received bytes after which the connection window is opened again by as much."""

_STATUS_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


def _failed(code: int, message: str = "") -> CallFailed:
    return CallFailed(_STATUS_NAMES.get(code, f"STATUS_{code}"), message)


@dataclass(eq=False)
class _Stream:
    """One call: what it still has to send, and what it received."""

    send_window: int
    pending: memoryview = field(default_factory=lambda: memoryview(b""))
    inbound: bytearray = field(default_factory=bytearray)
    messages: asyncio.Queue[bytes | BaseException | None] = field(default_factory=asyncio.Queue)
    headers_seen: bool = False


class _Connection(asyncio.Protocol):
    """The client end of one HTTP/2 connection (see the module docstring)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, _Stream] = {}
        self.next_stream_id = 1
        self.lost: CallFailed | None = None
        self._buffer = bytearray()
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._decoder = hpack.Decoder()
        self._encoder = hpack.Encoder()
        self._send_window = DEFAULT_WINDOW
        self._peer_initial_window = DEFAULT_WINDOW
        self._peer_frame_bytes = DEFAULT_FRAME_BYTES
        self._received_unacked = 0
        self._blocked: list[int] = []  # streams with data waiting for window, in order
        self._block = bytearray()  # the header block being received
        self._block_ends_stream = False

    # -- connection -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have asyncio.Transport's methods without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        settings = settings_payload(
            ((SETTINGS_ENABLE_PUSH, 0), (SETTINGS_INITIAL_WINDOW_SIZE, WINDOW_MAX))
        )
        self._send(
            PREFACE
            + _frame(SETTINGS, 0, 0, settings)
            + _frame(WINDOW_UPDATE, 0, 0, U32.pack(WINDOW_MAX - DEFAULT_WINDOW))
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(CallFailed("UNAVAILABLE", f"connection lost: {exc}"))

    def _fail_all(self, error: CallFailed, above: int = 0) -> None:
        """No new calls on this connection; the open ones above stream ``above`` fail."""
        self.lost = error
        for stream_id in [s for s in self.streams if s > above]:
            stream = self.streams.pop(stream_id)
            stream.messages.put_nowait(error)

    def _send(self, data: bytes) -> None:
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))

    # -- calls ------------------------------------------------------------------
    def start(self, headers: tuple[tuple[str, str], ...], message: bytes) -> int:
        """Open a stream: send ``headers`` and one request message, then half-close."""
        if self.lost is not None:
            raise self.lost
        stream_id = self.next_stream_id
        self.next_stream_id += 2
        # Indexed as a real client indexes: after the first call the block is a few
        # bytes of table references, the cheapest for the server to read.
        block = self._encoder.encode(headers)
        stream = _Stream(self._peer_initial_window)
        self.streams[stream_id] = stream
        self._send(_frame(HEADERS, END_HEADERS, stream_id, block))
        stream.pending = memoryview(_GRPC_PREFIX.pack(0, len(message)) + message)
        self._send_pending(stream_id, stream)
        return stream_id

    def cancel(self, stream_id: int) -> None:
        """Reset a stream the caller gave up on."""
        if self.streams.pop(stream_id, None) is not None:
            self._send(_frame(RST_STREAM, 0, stream_id, U32.pack(CANCEL)))

    def _send_pending(self, stream_id: int, stream: _Stream) -> None:
        """Send what the windows allow of the stream's request; END_STREAM with the last."""
        data = stream.pending
        while data:
            size = min(len(data), self._send_window, stream.send_window, self._peer_frame_bytes)
            if size <= 0:
                if stream_id not in self._blocked:
                    self._blocked.append(stream_id)
                break
            chunk, data = data[:size], data[size:]
            self._send_window -= size
            stream.send_window -= size
            self._send(_frame(DATA, 0 if data else END_STREAM, stream_id, bytes(chunk)))
        stream.pending = data

    def _unblock(self) -> None:
        blocked, self._blocked = self._blocked, []
        for stream_id in blocked:
            stream = self.streams.get(stream_id)
            if stream is not None and stream.pending:
                self._send_pending(stream_id, stream)

    # -- receiving --------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        try:
            for kind, flags, stream_id, payload in split_frames(buffer, FRAME_BYTES_ANY):
                self._on_frame(kind, flags, stream_id, payload)
        except FrameError as exc:
            self._fail_all(CallFailed("INTERNAL", f"HTTP/2 framing: {exc}"))
            if self.transport is not None:
                self.transport.close()

    def _on_frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind == DATA:
            self._on_data(flags, stream_id, payload)
        elif kind in (HEADERS, CONTINUATION):
            self._on_headers(kind, flags, stream_id, payload)
        elif kind == WINDOW_UPDATE:
            (increment,) = U32.unpack_from(payload)
            increment &= 0x7FFFFFFF
            if stream_id == 0:
                self._send_window += increment
            elif (stream := self.streams.get(stream_id)) is not None:
                stream.send_window += increment
            if self._blocked:
                self._unblock()
        elif kind == SETTINGS:
            if not flags & ACK:
                self._on_settings(payload)
                self._send(_frame(SETTINGS, ACK, 0))
        elif kind == PING:
            if not flags & ACK:
                self._send(_frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            stream = self.streams.pop(stream_id, None)
            if stream is not None:
                (code,) = U32.unpack_from(payload)
                stream.messages.put_nowait(CallFailed("CANCELLED", f"stream reset ({code})"))
        elif kind == GOAWAY:
            (last,) = U32.unpack_from(payload)
            error = CallFailed("UNAVAILABLE", "the server is going away")
            self._fail_all(error, above=last & 0x7FFFFFFF)
        # PUSH_PROMISE is refused by our SETTINGS; PRIORITY and unknown types are ignored.

    def _on_settings(self, payload: bytes) -> None:
        for key, value in parse_settings(payload):
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
            elif key == SETTINGS_MAX_FRAME_SIZE:
                self._peer_frame_bytes = value
        if self._blocked:
            self._unblock()

    def _on_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        self._received_unacked += len(payload)  # padding included, as flow control counts
        if self._received_unacked >= TOP_UP_BYTES:
            self._send(_frame(WINDOW_UPDATE, 0, 0, U32.pack(self._received_unacked)))
            self._received_unacked = 0
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        payload = unpadded(flags, payload)
        inbound = stream.inbound
        inbound += payload
        while len(inbound) >= 5:
            compressed, length = _GRPC_PREFIX.unpack_from(inbound)
            if len(inbound) < 5 + length:
                break
            if compressed:
                self._end(stream_id, CallFailed("UNIMPLEMENTED", "a compressed response"), True)
                return
            stream.messages.put_nowait(bytes(inbound[5 : 5 + length]))
            del inbound[: 5 + length]
        if flags & END_STREAM:
            self._end(stream_id, CallFailed("INTERNAL", "the response ended without trailers"))

    def _on_headers(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        """A HEADERS or CONTINUATION frame; a header block is whole at END_HEADERS
        (its CONTINUATION frames follow it at once, on the same stream)."""
        if kind == HEADERS:
            self._block = bytearray(header_fragment(flags, payload))
            self._block_ends_stream = bool(flags & END_STREAM)
        else:
            self._block += payload
        if not flags & END_HEADERS:
            return
        block, self._block = self._block, bytearray()
        # Every block is decoded, streams gone or not, to keep the decoder's table in
        # step; names and values come as str (the decoder's raw=False).
        headers = cast(dict[str, str], dict(self._decoder.decode(bytes(block))))
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if not stream.headers_seen and not self._block_ends_stream:
            stream.headers_seen = True
            status = headers.get(":status", "200")
            if status != "200":
                self._end(stream_id, CallFailed("UNAVAILABLE", f"HTTP status {status}"), True)
            return
        code = int(headers.get("grpc-status", "2"))
        if code == 0:
            self._end(stream_id, None)
        else:
            message = urllib.parse.unquote(headers.get("grpc-message", ""))
            self._end(stream_id, _failed(code, message))

    def _end(self, stream_id: int, error: CallFailed | None, reset: bool = False) -> None:
        """End a call with ``error`` (None: done); ``reset`` a stream the server left open."""
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            return
        stream.messages.put_nowait(error)
        if reset:
            self._send(_frame(RST_STREAM, 0, stream_id, U32.pack(CANCEL)))


class LeanChannel:
    """One HTTP/2 connection to a gRPC server, opened on the first call."""

    def __init__(self, endpoint: str) -> None:
        """``endpoint``: ``host:port`` of a cleartext gRPC server."""
        host, _, port = endpoint.rpartition(":")
        self._host = host
        self._port = int(port)
        self._authority = endpoint
        self._connection: _Connection | None = None
        self._connecting: asyncio.Lock | None = None

    async def _connected(self) -> _Connection:
        if self._connection is not None and self._connection.lost is None:
            return self._connection
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._connection is None or self._connection.lost is not None:
                loop = asyncio.get_running_loop()
                try:
                    _, protocol = await loop.create_connection(_Connection, self._host, self._port)
                except OSError as exc:
                    raise CallFailed("UNAVAILABLE", f"cannot connect: {exc}") from exc
                self._connection = protocol
            return self._connection

    def _headers(
        self, path: str, timeout_s: float, metadata: Sequence[tuple[str, str]]
    ) -> tuple[tuple[str, str], ...]:
        return (
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", self._authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", f"{max(1, int(timeout_s * 1000))}m"),
            *metadata,
        )

    async def _start(
        self, path: str, request: bytes, timeout_s: float, metadata: Sequence[tuple[str, str]]
    ) -> tuple[_Connection, int, asyncio.Queue[bytes | BaseException | None]]:
        """Open a call: its connection, stream id and the queue its answers come to."""
        connection = await self._connected()
        stream_id = connection.start(self._headers(path, timeout_s, metadata), request)
        return connection, stream_id, connection.streams[stream_id].messages

    async def stream(
        self,
        path: str,
        request: bytes,
        *,
        timeout_s: float,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> AsyncIterator[bytes]:
        """The response messages of one call (unary or server streaming), as they come."""
        connection, stream_id, messages = await self._start(path, request, timeout_s, metadata)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            while True:
                # The deadline is armed only to wait: a response's messages mostly come
                # in one read, and all but the first are taken as they lie.
                if messages.empty():
                    async with asyncio.timeout_at(deadline):
                        item = await messages.get()
                else:
                    item = messages.get_nowait()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        except TimeoutError:
            raise CallFailed("DEADLINE_EXCEEDED", f"no answer within {timeout_s} s") from None
        finally:
            connection.cancel(stream_id)  # a no-op for a call that ended

    async def call(
        self,
        path: str,
        request: bytes,
        *,
        timeout_s: float,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> list[bytes]:
        """Every response message of one call, once it ended well (as :meth:`stream`,
        without a step of an async generator per message)."""
        connection, stream_id, messages = await self._start(path, request, timeout_s, metadata)
        answers: list[bytes] = []
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    item = await messages.get()  # no suspension while messages lie queued
                    if item is None:
                        return answers
                    if isinstance(item, BaseException):
                        raise item
                    answers.append(item)
        except TimeoutError:
            raise CallFailed("DEADLINE_EXCEEDED", f"no answer within {timeout_s} s") from None
        finally:
            connection.cancel(stream_id)  # a no-op for a call that ended

    async def unary(
        self,
        path: str,
        request: bytes,
        *,
        timeout_s: float,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> bytes:
        """The one response message of a unary call."""
        answers = await self.call(path, request, timeout_s=timeout_s, metadata=metadata)
        if len(answers) != 1:
            raise CallFailed("INTERNAL", f"a unary call answered {len(answers)} messages")
        return answers[0]

    async def close(self) -> None:
        """Close the connection (open calls fail as UNAVAILABLE)."""
        connection, self._connection = self._connection, None
        if connection is not None and connection.transport is not None:
            connection.transport.close()


__all__ = ["LeanChannel"]
