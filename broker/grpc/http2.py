"""A gRPC server on HTTP/2 that sends what a call yields together.

Why not grpc.aio: the v2 protocol streams one ReceiveMessageResponse per
message, and grpc-python writes each response of a stream on its own (one C
core operation, one completion through its poller thread, one event loop
wake-up and one ``sendmsg`` each): ~47 us of server CPU per streamed message
on these machines (docs/benchmarks.md, "gRPC itself"). Here a handler's
responses go into the call's outgoing bytes, and the bytes of every call
are handed to the socket once per event loop iteration: a ReceiveMessage
of 32 messages is a few DATA frames in one write.

Why not the h2 library: its state machine and events were more than half
of this server's CPU per call (a SendMessage-shaped call of 32 x 1 KiB cost
~280-390 us of server CPU with it, ~120-140 us without; docs/benchmarks.md,
"The broker's own HTTP/2 server"). The frames are read and
written here with ``protocol.http2``; HPACK decoding stays with the
``hpack`` library, and what is sent never touches HPACK's dynamic table
(literals without indexing), so no encoder state is kept.

What it serves: the standard gRPC wire protocol over cleartext HTTP/2
(prior knowledge, as the official clients connect), for the handlers that
grpc's generated ``add_*Servicer_to_server`` registers (it calls
:meth:`Http2GrpcServer.add_generic_rpc_handlers` and
:meth:`Http2GrpcServer.add_registered_method_handlers`): unary and streaming
requests and responses, handlers written for grpc.aio (coroutines and async
generators taking ``(request, context)``). The context offers what the
broker uses, ``invocation_metadata()`` and ``time_remaining()``.

Contracts:

- Statuses: an unknown method gets UNIMPLEMENTED, a compressed message
  (no encoding is negotiated) UNIMPLEMENTED, a message over
  ``inbound_bytes_max`` RESOURCE_EXHAUSTED, a unary call without exactly one
  request message INTERNAL, an exception escaping a handler UNKNOWN with
  its text, a call past its ``grpc-timeout`` DEADLINE_EXCEEDED (the handler
  is cancelled). The connection keeps serving its other calls.
- A stream the client resets cancels its handler; nothing more is sent on it.
- Ordering: a call's responses leave in the order the handler produced
  them; its trailers leave after its last DATA frame. Flow control is the
  peer's: bytes beyond its windows wait for its WINDOW_UPDATE.
- Inbound flow control: received bytes are consumed as they arrive and
  given back (WINDOW_UPDATE) once half of a window of ``WINDOW_BYTES`` is
  used, so one large request does not stall the connection's other calls.
- HTTP/2 itself (RFC 9113): the client's SETTINGS are applied and
  acknowledged, PINGs answered, padding, priority fields and CONTINUATION
  frames read, unknown frame types ignored. A call answered before its
  request ended is reset with NO_ERROR after its trailers. A stream over
  ``MAX_CONCURRENT_STREAMS`` is refused (REFUSED_STREAM). A framing,
  HPACK or flow-control error closes that connection after a GOAWAY naming
  the error; the server serves on.

SHELL: sockets, the event loop and the clock.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import struct
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, cast

import grpc
import hpack

from protocol import http2

log = logging.getLogger("broker.grpc.http2")

WINDOW_BYTES = 16 * 1024 * 1024
"""Inbound flow-control window of the connection and of each stream."""

MAX_CONCURRENT_STREAMS = 4096

FRAME_BYTES_MAX = 1024 * 1024
"""Largest frame the client may send (HTTP/2's default is 16 KiB): a batch of sends
arrives in one frame, parsed once."""

HEADER_BLOCK_BYTES_MAX = 1024 * 1024
"""Largest request header block (CONTINUATION frames joined) a connection takes."""

_PREFIX = struct.Struct(">BI")  # a gRPC message: compressed flag, length
_SETTINGS = http2.settings_payload(
    (
        (http2.SETTINGS_MAX_CONCURRENT_STREAMS, MAX_CONCURRENT_STREAMS),
        (http2.SETTINGS_INITIAL_WINDOW_SIZE, WINDOW_BYTES),
        (http2.SETTINGS_MAX_FRAME_SIZE, FRAME_BYTES_MAX),
    )
)
# ":status: 200" is entry 8 of HPACK's static table, "content-type" entry 31.
_RESPONSE_HEADERS = b"\x88" + http2.literal_indexed_name(31, b"application/grpc")
_STATUS_OK = http2.literal(b"grpc-status", b"0")
_RESERVED = frozenset(
    {"content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding", "user-agent"}
)
_TIMEOUT_UNITS_S = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_END = object()  # the end of a request stream


class CallContext:
    """The handler's view of its call (the subset of grpc.aio's ServicerContext it uses)."""

    def __init__(self, metadata: tuple[tuple[str, str | bytes], ...], deadline: float | None):
        self._metadata = metadata
        self._deadline = deadline

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        """The request's custom headers as (key, value); ``-bin`` values as bytes."""
        return self._metadata

    def time_remaining(self) -> float | None:
        """Seconds until the call's deadline, None without one."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())


class Http2GrpcServer:
    """Serves registered gRPC methods on one listening socket."""

    def __init__(self, *, inbound_bytes_max: int) -> None:
        """Nothing listens until :meth:`start`."""
        self.inbound_bytes_max = inbound_bytes_max
        self._methods: dict[str, grpc.RpcMethodHandler] = {}
        self._generic: list[grpc.GenericRpcHandler] = []
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self.stopping = False

    # grpc's generated add_*Servicer_to_server calls these two.
    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        """Methods looked up by path on each call (``grpc.method_handlers_generic_handler``)."""
        self._generic.extend(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        """Methods of ``service`` by name."""
        for name, handler in handlers.items():
            self._methods[f"/{service}/{name}"] = handler

    def method(self, path: str) -> grpc.RpcMethodHandler | None:
        """The handler of ``/service/method``, or None."""
        found = self._methods.get(path)
        if found is not None:
            return found
        details = _CallDetails(path)
        for generic in self._generic:
            found = generic.service(details)
            if found is not None:
                self._methods[path] = found
                return found
        return None

    async def start(self, host: str | None, port: int) -> int:
        """Listen on ``host:port`` (host None: every interface; port 0: any free port);
        returns the bound port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port)
        bound: int = self._server.sockets[0].getsockname()[1]
        return bound

    async def stop(self, grace_s: float) -> None:
        """Stop listening and taking calls (a new call gets UNAVAILABLE), give the calls
        in flight ``grace_s`` to finish, then send GOAWAY and close every connection."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        draining = [c.drained.wait() for c in self._connections]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*draining), grace_s)
        for connection in list(self._connections):
            connection.go_away()
            connection.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


class _CallDetails:
    """What a generic handler is asked with (grpc.HandlerCallDetails)."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata: tuple[Any, ...] = ()


class _Call:
    """One stream: its request bytes in, its response bytes out."""

    __slots__ = (
        "context",
        "half_closed",
        "handler",
        "headers_sent",
        "inbound",
        "messages",
        "outbound",
        "requests",
        "send_window",
        "stream_id",
        "task",
        "timer",
        "trailers",
        "unacked",
    )

    def __init__(
        self,
        stream_id: int,
        handler: grpc.RpcMethodHandler,
        context: CallContext,
        send_window: int,
    ):
        self.stream_id = stream_id
        self.send_window = send_window  # what the client lets us send on this stream
        self.unacked = 0  # received bytes not yet given back to the stream's window
        self.half_closed = False  # the client sent END_STREAM
        self.handler = handler
        self.context = context
        self.inbound = bytearray()
        self.requests: asyncio.Queue[object] | None = None  # streaming requests
        self.messages: list[bytes] = []  # unary request: the messages received
        self.outbound: list[bytes] = []
        self.trailers: bytes | None = None  # the encoded trailer block, once decided
        self.headers_sent = False
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None


class _Connection(asyncio.Protocol):
    """One client connection: its frames, its flow-control windows and its calls."""

    def __init__(self, server: Http2GrpcServer) -> None:
        self._server = server
        # Request headers are read by _on_request alone: a block with uppercase names,
        # connection headers or a repeated pseudo-header gets UNIMPLEMENTED for a wrong
        # or missing :path, and any other name is plain metadata, which the service
        # checks (a missing client id is refused with its status).
        self._decoder = hpack.Decoder()
        self._calls: dict[int, _Call] = {}
        # The calls with bytes or trailers not yet framed (each pump looks at these
        # only, not at every open call: thousands of long polls may wait on a connection).
        self._sending: dict[int, _Call] = {}
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._flush_scheduled = False
        self._closed = False
        self._going_away = False
        self._out: list[bytes] = []
        self._inbound = bytearray()
        self._preface_seen = False
        self._last_stream_id = 0
        self._block = bytearray()  # a header block being received, CONTINUATION frames apart
        self._block_stream = 0
        self._block_flags = 0
        # Flow control. Ours: received bytes not yet given back by a WINDOW_UPDATE.
        self._unacked = 0
        # The client's: what we may still send on the connection, a new stream's
        # window, and the largest frame it takes.
        self._send_window = http2.DEFAULT_WINDOW
        self._stream_window = http2.DEFAULT_WINDOW
        self._frame_bytes = http2.DEFAULT_FRAME_BYTES
        self.drained = asyncio.Event()  # set while no call is open
        self.drained.set()

    # -- asyncio.Protocol -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._server._connections.add(self)
        # Lenient from the start: frames up to FRAME_BYTES_MAX and our windows are
        # accepted before the client acknowledges the settings that announce them.
        self._write(
            http2.frame(http2.SETTINGS, 0, 0, _SETTINGS)
            + http2.frame(http2.WINDOW_UPDATE, 0, 0, http2.U32.pack(WINDOW_BYTES - 65_535))
        )
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._server._connections.discard(self)
        for call in list(self._calls.values()):
            self._cancel(call)
        self._calls.clear()
        self._sending.clear()
        self.drained.set()

    def data_received(self, data: bytes) -> None:
        inbound = self._inbound
        inbound += data
        try:
            if not self._preface_seen:
                if len(inbound) < len(http2.PREFACE):
                    if not http2.PREFACE.startswith(bytes(inbound)):
                        raise http2.FrameError(http2.PROTOCOL_ERROR, "not an HTTP/2 preface")
                    return
                if not inbound.startswith(http2.PREFACE):
                    raise http2.FrameError(http2.PROTOCOL_ERROR, "not an HTTP/2 preface")
                del inbound[: len(http2.PREFACE)]
                self._preface_seen = True
            for kind, flags, stream_id, payload in http2.split_frames(inbound, FRAME_BYTES_MAX):
                self._on_frame(kind, flags, stream_id, payload)
        except http2.FrameError as exc:
            self._fail_connection(exc.code, str(exc))
            return
        except hpack.HPACKError as exc:
            self._fail_connection(http2.COMPRESSION_ERROR, f"a header block: {exc}")
            return
        self._pump()
        self._flush()

    def _fail_connection(self, code: int, reason: str) -> None:
        log.info("closing an HTTP/2 connection after a protocol error: %s", reason)
        self._go_away(code, reason)
        self._flush()
        self.close()

    # -- frames ---------------------------------------------------------------------

    def _on_frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._block_stream and kind != http2.CONTINUATION:
            raise http2.FrameError(http2.PROTOCOL_ERROR, "a header block broken off")
        if kind == http2.DATA:
            self._on_data_frame(flags, stream_id, payload)
        elif kind == http2.HEADERS:
            if stream_id == 0:
                raise http2.FrameError(http2.PROTOCOL_ERROR, "HEADERS on stream 0")
            self._block = bytearray(http2.header_fragment(flags, payload))
            self._block_stream = stream_id
            self._block_flags = flags
            if flags & http2.END_HEADERS:
                self._on_header_block()
        elif kind == http2.CONTINUATION:
            if stream_id == 0 or stream_id != self._block_stream:
                raise http2.FrameError(http2.PROTOCOL_ERROR, "a CONTINUATION out of place")
            self._block += payload
            if len(self._block) > HEADER_BLOCK_BYTES_MAX:
                raise http2.FrameError(http2.PROTOCOL_ERROR, "a header block over 1 MiB")
            if flags & http2.END_HEADERS:
                self._on_header_block()
        elif kind == http2.WINDOW_UPDATE:
            self._on_window_update(stream_id, payload)
        elif kind == http2.SETTINGS:
            if stream_id != 0:
                raise http2.FrameError(http2.PROTOCOL_ERROR, "SETTINGS on a stream")
            if not flags & http2.ACK:
                self._on_settings(payload)
                self._write(http2.frame(http2.SETTINGS, http2.ACK, 0))
        elif kind == http2.PING:
            if len(payload) != 8:
                raise http2.FrameError(http2.FRAME_SIZE_ERROR, "a PING payload is 8 bytes")
            if not flags & http2.ACK:
                self._write(http2.frame(http2.PING, http2.ACK, 0, payload))
        elif kind == http2.RST_STREAM:
            call = self._calls.pop(stream_id, None)
            self._sending.pop(stream_id, None)
            if call is not None:
                self._cancel(call)
            if not self._calls:
                self.drained.set()
        elif kind == http2.GOAWAY:
            self.close()
        elif kind == http2.PUSH_PROMISE:
            raise http2.FrameError(http2.PROTOCOL_ERROR, "a client sent PUSH_PROMISE")
        # PRIORITY and unknown frame types are ignored, as RFC 9113 allows.

    def _on_data_frame(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise http2.FrameError(http2.PROTOCOL_ERROR, "DATA on stream 0")
        # Flow control counts the whole payload, padding included. Everything received
        # is consumed at once, so both windows are given back in one update when half
        # the connection's is used: one large request never stalls the other calls.
        self._unacked += len(payload)
        if self._unacked >= WINDOW_BYTES // 2:
            self._write(http2.frame(http2.WINDOW_UPDATE, 0, 0, http2.U32.pack(self._unacked)))
            self._unacked = 0
        call = self._calls.get(stream_id)
        if call is None:
            return  # a stream already answered or reset: dropped
        call.unacked += len(payload)
        if call.unacked >= WINDOW_BYTES // 2 and not flags & http2.END_STREAM:
            update = http2.U32.pack(call.unacked)
            self._write(http2.frame(http2.WINDOW_UPDATE, 0, stream_id, update))
            call.unacked = 0
        data = http2.unpadded(flags, payload)
        if data:
            self._on_data(call, data)
        if flags & http2.END_STREAM and self._calls.get(stream_id) is call:
            self._on_half_close(call)

    def _on_header_block(self) -> None:
        stream_id, flags = self._block_stream, self._block_flags
        block, self._block, self._block_stream = bytes(self._block), bytearray(), 0
        # Every block is decoded, whatever becomes of its stream, to keep the
        # decoder's table in step with the client's encoder.
        headers = self._decoder.decode(block, raw=True)
        call = self._calls.get(stream_id)
        if call is not None:  # trailers from the client end its requests
            if flags & http2.END_STREAM:
                self._on_half_close(call)
            return
        if stream_id <= self._last_stream_id or not stream_id & 1:
            if stream_id & 1:
                return  # a stream already answered or reset
            raise http2.FrameError(http2.PROTOCOL_ERROR, f"a client opened stream {stream_id}")
        self._last_stream_id = stream_id
        if self._going_away:
            return
        if len(self._calls) >= MAX_CONCURRENT_STREAMS:
            self._write(
                http2.frame(http2.RST_STREAM, 0, stream_id, http2.U32.pack(http2.REFUSED_STREAM))
            )
            return
        self._on_request(stream_id, cast(list[tuple[bytes, bytes]], headers))
        call = self._calls.get(stream_id)
        if call is not None and flags & http2.END_STREAM:
            self._on_half_close(call)

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise http2.FrameError(http2.FRAME_SIZE_ERROR, "a WINDOW_UPDATE payload is 4 bytes")
        increment = http2.U32.unpack(payload)[0] & 0x7FFFFFFF
        if stream_id == 0:
            self._send_window += increment
            if self._send_window > http2.WINDOW_MAX:
                raise http2.FrameError(http2.FLOW_CONTROL_ERROR, "connection window overflow")
        elif (call := self._calls.get(stream_id)) is not None:
            call.send_window += increment
        # The pump after this chunk's frames sends what waited for the window.

    def _on_settings(self, payload: bytes) -> None:
        for key, value in http2.parse_settings(payload):
            if key == http2.SETTINGS_INITIAL_WINDOW_SIZE:
                if value > http2.WINDOW_MAX:
                    raise http2.FrameError(http2.FLOW_CONTROL_ERROR, "initial window too large")
                delta = value - self._stream_window
                self._stream_window = value
                for call in self._calls.values():
                    call.send_window += delta
            elif key == http2.SETTINGS_MAX_FRAME_SIZE:
                if not http2.DEFAULT_FRAME_BYTES <= value <= 2**24 - 1:
                    raise http2.FrameError(http2.PROTOCOL_ERROR, f"max frame size {value}")
                self._frame_bytes = value
        # SETTINGS_HEADER_TABLE_SIZE needs nothing: what we send never uses the table.

    def _on_request(self, stream_id: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
        path = ""
        deadline: float | None = None
        metadata: list[tuple[str, str | bytes]] = []
        encoding = ""
        for raw_name, raw_value in headers:
            name = raw_name.decode("ascii", "replace")
            if name == ":path":
                path = raw_value.decode("ascii", "replace")
            elif name == "grpc-timeout":
                deadline = _deadline(raw_value.decode("ascii", "replace"))
            elif name == "grpc-encoding":
                encoding = raw_value.decode("ascii", "replace")
            elif name.startswith(":") or name in _RESERVED:
                continue
            elif name.endswith("-bin"):
                metadata.append((name, _unbase64(raw_value)))
            else:
                metadata.append((name, raw_value.decode("latin-1")))
        if self._server.stopping:
            self._trailers_only(stream_id, grpc.StatusCode.UNAVAILABLE, "the server is stopping")
            return
        handler = self._server.method(path)
        if handler is None:
            self._trailers_only(stream_id, grpc.StatusCode.UNIMPLEMENTED, f"unknown method {path}")
            return
        call = _Call(
            stream_id, handler, CallContext(tuple(metadata), deadline), self._stream_window
        )
        self._calls[stream_id] = call
        self.drained.clear()
        if encoding not in ("", "identity"):
            self._finish(call, grpc.StatusCode.UNIMPLEMENTED, f"grpc-encoding {encoding!r}")
            return
        if deadline is not None:
            call.timer = self._loop.call_at(
                self._loop.time() + max(0.0, deadline - time.monotonic()), self._expire, call
            )
        if handler.request_streaming:
            call.requests = asyncio.Queue()
            call.task = self._loop.create_task(self._run(call, self._request_stream(call)))

    def _on_data(self, call: _Call, data: bytes) -> None:
        buffer = call.inbound
        buffer += data
        limit = self._server.inbound_bytes_max
        while len(buffer) >= _PREFIX.size:
            compressed, length = _PREFIX.unpack_from(buffer)
            if length > limit:
                self._finish(
                    call,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"a request message of {length} bytes is over the limit of {limit}",
                )
                return
            if len(buffer) < _PREFIX.size + length:
                return
            if compressed:
                self._finish(call, grpc.StatusCode.UNIMPLEMENTED, "compressed messages")
                return
            message = bytes(buffer[_PREFIX.size : _PREFIX.size + length])
            del buffer[: _PREFIX.size + length]
            if call.requests is not None:
                call.requests.put_nowait(message)
            else:
                call.messages.append(message)

    def _on_half_close(self, call: _Call) -> None:
        call.half_closed = True
        if call.trailers is not None:  # already answered (an error while receiving)
            return
        if call.inbound:
            self._finish(call, grpc.StatusCode.INTERNAL, "the request ends inside a message")
        elif call.requests is not None:
            call.requests.put_nowait(_END)
        elif call.task is None:
            if len(call.messages) != 1:
                self._finish(
                    call,
                    grpc.StatusCode.INTERNAL,
                    f"a unary call needs one request message, got {len(call.messages)}",
                )
                return
            call.task = self._loop.create_task(self._run(call, call.messages.pop()))

    # -- running a handler ------------------------------------------------------------

    async def _request_stream(self, call: _Call) -> AsyncIterator[Any]:
        """The requests of a streaming call, decoded, until the client half-closes."""
        assert call.requests is not None
        decode = call.handler.request_deserializer
        while True:
            message = await call.requests.get()
            if message is _END:
                return
            assert isinstance(message, bytes)
            yield decode(message) if decode is not None else message

    async def _run(self, call: _Call, request: object) -> None:
        handler = call.handler
        encode = handler.response_serializer or _identity
        try:
            if not handler.request_streaming:
                assert isinstance(request, bytes)
                decode = handler.request_deserializer
                request = decode(request) if decode is not None else request
            if handler.response_streaming:
                behaviour = handler.unary_stream or handler.stream_stream
                responses = behaviour(request, call.context)
                async for response in responses:
                    self._send_message(call, encode(response))
            else:
                behaviour = handler.unary_unary or handler.stream_unary
                response = await behaviour(request, call.context)
                self._send_message(call, encode(response))
        except asyncio.CancelledError:
            if call.stream_id in self._calls and not self._closed:
                self._finish(call, grpc.StatusCode.CANCELLED, "the call was cancelled")
            raise
        except Exception as exc:  # every handler failure is the call's status
            log.exception("a gRPC handler failed")
            self._finish(call, grpc.StatusCode.UNKNOWN, f"{type(exc).__name__}: {exc}")
            return
        self._finish(call, grpc.StatusCode.OK, "")

    def _expire(self, call: _Call) -> None:
        call.timer = None
        if self._calls.get(call.stream_id) is call:
            if call.task is not None:
                call.task.cancel()
                call.task = None
            self._finish(call, grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")

    def _cancel(self, call: _Call) -> None:
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
        if call.task is not None and not call.task.done():
            call.task.cancel()

    # -- sending --------------------------------------------------------------------

    def _send_message(self, call: _Call, message: bytes) -> None:
        """Queue one response message; it leaves with this loop iteration's flush."""
        if call.trailers is not None or self._calls.get(call.stream_id) is not call:
            return
        call.outbound.append(_PREFIX.pack(0, len(message)))
        call.outbound.append(message)
        self._sending[call.stream_id] = call
        self._schedule()

    def _finish(self, call: _Call, code: grpc.StatusCode, message: str) -> None:
        """End the call with ``code`` once its queued messages are sent."""
        if call.trailers is not None:
            return
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
        if code is not grpc.StatusCode.OK and call.task is not None:
            task, call.task = call.task, None
            if task is not asyncio.current_task() and not task.done():
                task.cancel()
        call.trailers = _status_block(code, message)
        if self._calls.get(call.stream_id) is call:
            self._sending[call.stream_id] = call
        self._schedule()

    def _trailers_only(self, stream_id: int, code: grpc.StatusCode, message: str) -> None:
        block = _RESPONSE_HEADERS + _status_block(code, message)
        self._write(http2.header_frames(stream_id, block, True, self._frame_bytes))
        self._schedule()

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._pump_and_flush)

    def _pump_and_flush(self) -> None:
        self._flush_scheduled = False
        self._pump()
        self._flush()

    def _pump(self) -> None:
        """Frame every call's queued bytes as far as the windows allow."""
        if self._closed:
            return
        for call in list(self._sending.values()):
            stream_id = call.stream_id
            if not call.headers_sent:
                self._write(
                    http2.frame(http2.HEADERS, http2.END_HEADERS, stream_id, _RESPONSE_HEADERS)
                )
                call.headers_sent = True
            if call.outbound:
                self._send_data(call)
            if call.outbound:
                continue  # blocked by flow control: stays for the next pump
            del self._sending[stream_id]
            if call.trailers is not None:
                self._write(http2.header_frames(stream_id, call.trailers, True, self._frame_bytes))
                if not call.half_closed:  # the client may stop sending: nothing is read
                    self._write(
                        http2.frame(http2.RST_STREAM, 0, stream_id, http2.U32.pack(http2.NO_ERROR))
                    )
                self._calls.pop(stream_id, None)
        if not self._calls:
            self.drained.set()

    def _send_data(self, call: _Call) -> None:
        data = b"".join(call.outbound) if len(call.outbound) > 1 else call.outbound[0]
        call.outbound.clear()
        view = memoryview(data)
        stream_id = call.stream_id
        while view:
            size = min(self._send_window, call.send_window, self._frame_bytes, len(view))
            if size <= 0:
                call.outbound.append(bytes(view))  # the rest waits for a WINDOW_UPDATE
                return
            self._send_window -= size
            call.send_window -= size
            self._write(http2.frame(http2.DATA, 0, stream_id, view[:size].tobytes()))
            view = view[size:]

    def _write(self, data: bytes) -> None:
        """Queue frames for this loop turn's single write."""
        self._out.append(data)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(out) if len(out) > 1 else out[0])

    # -- closing ----------------------------------------------------------------------

    def _go_away(self, code: int, reason: str = "") -> None:
        if not self._going_away:
            self._going_away = True
            payload = http2.U32.pack(self._last_stream_id) + http2.U32.pack(code)
            self._write(http2.frame(http2.GOAWAY, 0, 0, payload + reason.encode()[:256]))

    def go_away(self) -> None:
        """Tell the client the connection ends; calls it opens after this are not served."""
        self._go_away(http2.NO_ERROR)
        self._flush()

    def close(self) -> None:
        """Drop the connection and cancel its calls."""
        if self._transport is not None:
            self._transport.close()
        for call in list(self._calls.values()):
            self._cancel(call)


def _status_block(code: grpc.StatusCode, message: str) -> bytes:
    """The encoded ``grpc-status`` (and ``grpc-message``) header fields."""
    if code is grpc.StatusCode.OK:
        return _STATUS_OK
    block = http2.literal(b"grpc-status", str(code.value[0]).encode())
    # A field value must not begin or end with whitespace (RFC 9113 8.2.1).
    text = _percent_encoded(message).strip(b" \t")
    if text:
        block += http2.literal(b"grpc-message", text)
    return block


def _identity(value: Any) -> Any:
    return value


def _deadline(timeout: str) -> float | None:
    """The monotonic deadline of a ``grpc-timeout`` value (digits then a unit), or None."""
    unit = _TIMEOUT_UNITS_S.get(timeout[-1:])
    if unit is None or not timeout[:-1].isdigit():
        return None
    return time.monotonic() + int(timeout[:-1]) * unit


def _unbase64(value: bytes) -> bytes:
    padded = value + b"=" * (-len(value) % 4)
    try:
        return base64.b64decode(padded)
    except ValueError:
        return value


def _percent_encoded(message: str) -> bytes:
    """``grpc-message`` form: UTF-8, percent-encoding what is outside printable ASCII and %."""
    return urllib.parse.quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~").encode("ascii")


__all__ = ["CallContext", "Http2GrpcServer"]
