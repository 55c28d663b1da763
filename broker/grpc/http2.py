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
"The broker's own HTTP/2 server"). HTTP/2 itself (frames, stream states,
flow control, HPACK decoding) is ``protocol.http2_connection``, a sans-IO
connection made for this cost; this module is its asyncio shell and the
gRPC layer above it: request headers to a handler and a context, gRPC
messages in and out of DATA, statuses in trailers.

What it serves: the standard gRPC wire protocol over cleartext HTTP/2
(prior knowledge, as the official clients connect), for the handlers that
grpc's generated ``add_*Servicer_to_server`` registers (it calls
:meth:`Http2GrpcServer.add_generic_rpc_handlers` and
:meth:`Http2GrpcServer.add_registered_method_handlers`): unary and streaming
requests and responses, handlers written for grpc.aio (coroutines and async
generators taking ``(request, context)``). The context offers what the
broker uses, ``invocation_metadata()`` and ``time_remaining()``.

Contracts:

- Statuses: an unknown method gets UNIMPLEMENTED, request headers over
  ``METADATA_BYTES_MAX`` RESOURCE_EXHAUSTED, a ``grpc-encoding`` other than
  identity UNIMPLEMENTED, a message flagged compressed anyway INTERNAL (as
  grpcio), a message over ``inbound_bytes_max`` RESOURCE_EXHAUSTED, a unary
  call without exactly one request message or a request ending inside a
  message INTERNAL (grpcio answers none of these three, or OK for two
  messages: a deliberate difference), a handler's ``context.abort(code, details)``
  that status (nothing logged), an exception escaping a handler UNKNOWN with
  its text, a call past its ``grpc-timeout`` DEADLINE_EXCEEDED (the handler
  is cancelled). A call ended before any message is answered trailers-only
  (one HEADERS block). The connection keeps serving its other calls.
- Stopping: every connection hears a graceful GOAWAY at once; a call that
  crosses it gets UNAVAILABLE; the calls in flight get the grace period,
  then a final GOAWAY names the last stream and the connection closes.
- A stream the client resets cancels its handler; nothing more is sent on it.
- A client's GOAWAY (grpc-js sends one when its channel closes, with calls
  still open) ends no call: the open calls are answered, and the connection
  closes once the last answer went out.
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

SHELL: sockets, the event loop and the clock (HTTP/2 is the pure
``Http2Connection``; each ``data_received`` feeds it, each loop turn writes
what it queued once).
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
from ssl import SSLContext
from typing import Any, NoReturn, cast

import grpc

from protocol import http2
from protocol.hpack_decoder import ENTRY_OVERHEAD_BYTES
from protocol.http2_connection import Http2Connection
from protocol.http2_events import (
    ConnectionTerminated,
    DataReceived,
    RequestReceived,
    StreamReset,
    TrailersReceived,
)

log = logging.getLogger("broker.grpc.http2")

WINDOW_BYTES = 16 * 1024 * 1024
"""Inbound flow-control window of the connection and of each stream."""

MAX_CONCURRENT_STREAMS = 4096

FRAME_BYTES_MAX = 1024 * 1024
"""Largest frame the client may send (HTTP/2's default is 16 KiB): a batch of sends
arrives in one frame, parsed once."""

HEADER_BLOCK_BYTES_MAX = 1024 * 1024
"""Largest request header block (CONTINUATION frames joined) a connection takes; also
the largest decoded header list before the connection fails (what a block may cost)."""

METADATA_BYTES_MAX = 16 * 1024
"""Largest request header list a call takes (fields counted as HPACK counts them: name,
value and 32 bytes each), as grpcio's default hard limit: beyond it the call gets
RESOURCE_EXHAUSTED and the connection serves on."""

_PREFIX = struct.Struct(">BI")  # a gRPC message: compressed flag, length
# ":status: 200" is entry 8 of HPACK's static table, "content-type" entry 31.
_RESPONSE_HEADERS = b"\x88" + http2.literal_indexed_name(31, b"application/grpc")
_STATUS_OK = http2.literal(b"grpc-status", b"0")
_RESERVED = frozenset(  # request headers that are not the call's metadata
    {
        b"content-type",
        b"te",
        b"grpc-timeout",
        b"grpc-encoding",
        b"grpc-accept-encoding",
        b"user-agent",
    }
)
_TIMEOUT_UNITS_S = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_END = object()  # the end of a request stream


class GrpcCallContext:
    """A gRPC handler's view of its call: the subset of grpc.aio's ServicerContext the
    broker uses. (Angelia's handlers get ``angelia_rpc.CallContext``.)"""

    def __init__(
        self,
        metadata: tuple[tuple[str, str | bytes], ...],
        deadline: float | None,
        peer: str = "",
    ):
        self._metadata = metadata
        self._deadline = deadline
        self._peer = peer

    def peer(self) -> str:
        """The caller's address, ``host:port`` ("" if unknown)."""
        return self._peer

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        """The request's custom headers as (key, value); ``-bin`` values as bytes."""
        return self._metadata

    def time_remaining(self) -> float | None:
        """Seconds until the call's deadline, None without one."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        """End the call with ``code`` and ``details`` (grpc.aio's ``abort``): raises, and
        the call's trailers carry the status; nothing is logged."""
        raise CallAborted(code, details)


class CallAborted(Exception):
    """A handler ended its call with a status (:meth:`GrpcCallContext.abort`)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


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

    async def start(self, host: str | None, port: int, ssl: SSLContext | None = None) -> int:
        """Listen on ``host:port`` (host None: every interface; port 0: any free port),
        over TLS with ``ssl`` (whose ALPN must offer h2); returns the bound port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port, ssl=ssl)
        bound: int = self._server.sockets[0].getsockname()[1]
        return bound

    async def stop(self, grace_s: float) -> None:
        """Stop listening and taking calls: every connection hears a graceful GOAWAY at
        once (clients open new calls elsewhere; one that crossed it gets UNAVAILABLE),
        the calls in flight get ``grace_s`` to finish, then a final GOAWAY and every
        connection closes."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for connection in self._connections:
            connection.announce_going_away()
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
    """One call on its stream: its request bytes in, its response bytes out (the stream's
    windows and state are the HTTP/2 connection's)."""

    __slots__ = (
        "context",
        "handler",
        "headers_sent",
        "inbound",
        "messages",
        "outbound",
        "requests",
        "stream_id",
        "task",
        "timer",
        "trailers",
    )

    def __init__(self, stream_id: int, handler: grpc.RpcMethodHandler, context: GrpcCallContext):
        self.stream_id = stream_id
        self.handler = handler
        self.context = context
        self.inbound = bytearray()
        self.requests: asyncio.Queue[object] | None = None  # streaming requests
        self.messages: list[bytes] = []  # unary request: the messages received
        self.outbound: list[bytes] = []  # response messages not yet handed to the connection
        self.trailers: bytes | None = None  # the encoded trailer block, once decided
        self.headers_sent = False
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None


class _Connection(asyncio.Protocol):
    """One client connection: the socket and the calls over an :class:`Http2Connection`."""

    def __init__(self, server: Http2GrpcServer) -> None:
        self._server = server
        self._h2 = Http2Connection(
            client_side=False,
            window_bytes=WINDOW_BYTES,
            frame_bytes_max=FRAME_BYTES_MAX,
            max_concurrent_streams=MAX_CONCURRENT_STREAMS,
            header_block_bytes_max=HEADER_BLOCK_BYTES_MAX,
            header_list_bytes_max=HEADER_BLOCK_BYTES_MAX,
        )
        self._calls: dict[int, _Call] = {}
        # The calls with bytes or trailers not yet handed to the HTTP/2 connection (each
        # pump looks at these only, not at every open call: thousands of long polls may
        # wait on a connection).
        self._sending: dict[int, _Call] = {}
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._flush_scheduled = False
        self._closed = False
        self._peer_going_away = False  # the client sent GOAWAY
        self._peer = ""  # the client's host:port, for handlers (ACL source addresses)
        self._out: list[bytes] = []  # the HTTP/2 connection's frames, for this turn's write
        self.drained = asyncio.Event()  # set while no call is open and nothing waits to go
        self.drained.set()

    # -- asyncio.Protocol -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peername = transport.get_extra_info("peername")
        if isinstance(peername, tuple) and len(peername) >= 2:
            host = str(peername[0])
            self._peer = f"[{host}]:{peername[1]}" if ":" in host else f"{host}:{peername[1]}"
        self._server._connections.add(self)
        self._h2.initiate()
        self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._server._connections.discard(self)
        for call in list(self._calls.values()):
            self._cancel(call)
        self._calls.clear()
        self._sending.clear()
        self.drained.set()

    def data_received(self, data: bytes) -> None:
        try:
            events = self._h2.receive_data(data)
        except http2.FrameError as exc:  # the GOAWAY naming it is queued
            log.info("closing an HTTP/2 connection after a protocol error: %s", exc)
            self._send()
            self.close()
            return
        calls = self._calls
        for event in events:
            if isinstance(event, DataReceived):
                call = calls.get(event.stream_id)
                if call is None:
                    continue  # a call already answered: its stream is closed
                if event.data:
                    self._on_data(call, event.data)
                if event.end_stream and calls.get(event.stream_id) is call:
                    self._on_half_close(call)
            elif isinstance(event, RequestReceived):
                self._on_request(event.stream_id, event.headers)
                if event.end_stream and (call := calls.get(event.stream_id)) is not None:
                    self._on_half_close(call)
            elif isinstance(event, TrailersReceived):  # the client's trailers end its requests
                if event.end_stream and (call := calls.get(event.stream_id)) is not None:
                    self._on_half_close(call)
            elif isinstance(event, StreamReset):
                call = calls.pop(event.stream_id, None)
                self._sending.pop(event.stream_id, None)
                if call is not None:
                    self._cancel(call)
            elif isinstance(event, ConnectionTerminated):
                # The client opens no more streams (a client closing its channel sends
                # this with calls still open, e.g. a Telemetry stream it just
                # half-closed): its open calls are answered, then the connection ends.
                self._peer_going_away = True
        self._pump()
        self._send()
        self._close_if_peer_done()

    # -- calls ------------------------------------------------------------------------

    def _on_request(self, stream_id: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
        # Request headers are read here alone: a block with uppercase names, connection
        # headers or a repeated pseudo-header gets UNIMPLEMENTED for a wrong or missing
        # :path, and any other name is plain metadata, which the service checks (a
        # missing client id is refused with its status).
        path = ""
        deadline: float | None = None
        metadata: list[tuple[str, str | bytes]] = []
        encoding = ""
        list_bytes = 0
        for raw_name, raw_value in headers:
            list_bytes += len(raw_name) + len(raw_value) + ENTRY_OVERHEAD_BYTES
            if raw_name[:1] == b":":
                if raw_name == b":path":
                    path = raw_value.decode("ascii", "replace")
            elif raw_name in _RESERVED:
                if raw_name == b"grpc-timeout":
                    deadline = _deadline(raw_value.decode("ascii", "replace"))
                elif raw_name == b"grpc-encoding":
                    encoding = raw_value.decode("ascii", "replace")
            else:
                name = raw_name.decode("ascii", "replace")
                if name.endswith("-bin"):
                    metadata.append((name, _unbase64(raw_value)))
                else:
                    metadata.append((name, raw_value.decode("latin-1")))
        if self._server.stopping:
            self._trailers_only(stream_id, grpc.StatusCode.UNAVAILABLE, "the server is stopping")
            return
        if list_bytes > METADATA_BYTES_MAX:
            self._trailers_only(
                stream_id,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"request headers of {list_bytes} bytes are over the limit of {METADATA_BYTES_MAX}",
            )
            return
        handler = self._server.method(path)
        if handler is None:
            self._trailers_only(stream_id, grpc.StatusCode.UNIMPLEMENTED, f"unknown method {path}")
            return
        call = _Call(stream_id, handler, GrpcCallContext(tuple(metadata), deadline, self._peer))
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
            if compressed:  # no grpc-encoding was accepted (an unknown one was refused)
                self._finish(
                    call,
                    grpc.StatusCode.INTERNAL,
                    "a request message is flagged compressed without a grpc-encoding",
                )
                return
            message = bytes(buffer[_PREFIX.size : _PREFIX.size + length])
            del buffer[: _PREFIX.size + length]
            if call.requests is not None:
                call.requests.put_nowait(message)
            else:
                call.messages.append(message)

    def _on_half_close(self, call: _Call) -> None:
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
        except CallAborted as aborted:
            self._finish(call, aborted.code, aborted.details)
            return
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
        self._h2.send_headers(stream_id, block, end_stream=True)
        self._schedule()

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._pump_and_flush)

    def _pump_and_flush(self) -> None:
        self._flush_scheduled = False
        self._pump()
        self._send()
        self._close_if_peer_done()

    def _pump(self) -> None:
        """Hand every call's queued bytes and trailers to the HTTP/2 connection, which
        frames them as far as the windows allow and keeps the rest in order."""
        if self._closed:
            return
        h2 = self._h2
        calls = self._calls
        for stream_id, call in self._sending.items():
            outbound = call.outbound
            if not call.headers_sent:
                if call.trailers is not None and not outbound:
                    # No message at all: one block, trailers-only (as gRPC servers do).
                    h2.send_headers(stream_id, _RESPONSE_HEADERS + call.trailers, end_stream=True)
                    del calls[stream_id]
                    continue
                h2.send_headers(stream_id, _RESPONSE_HEADERS)
                call.headers_sent = True
            if outbound:
                h2.send_data(stream_id, b"".join(outbound) if len(outbound) > 1 else outbound[0])
                outbound.clear()
            if call.trailers is not None:
                h2.send_headers(stream_id, call.trailers, end_stream=True)
                del calls[stream_id]
        self._sending.clear()
        if not calls and not h2.flow_blocked:
            self.drained.set()

    def _send(self) -> None:
        """Take the HTTP/2 connection's frames for this loop turn's single write."""
        data = self._h2.data_to_send()
        if data:
            self._out.append(data)
        self._flush()

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(out) if len(out) > 1 else out[0])

    # -- closing ----------------------------------------------------------------------

    def announce_going_away(self) -> None:
        """Tell the client to open no more calls here; the open ones go on."""
        self._h2.announce_going_away()
        self._send()

    def go_away(self) -> None:
        """Tell the client the connection ends; calls it opens after this are not served."""
        self._h2.close_connection(http2.NO_ERROR)
        self._send()

    def _close_if_peer_done(self) -> None:
        """After the client's GOAWAY: close once its last call's answer went out (its
        bytes and trailers, none left waiting for a window)."""
        if self._peer_going_away and not self._calls and not self._h2.flow_blocked:
            self.close()

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


__all__ = ["CallAborted", "GrpcCallContext", "Http2GrpcServer"]
