"""The server side: accepts connections, dispatches calls to service implementations.

Per connection, at most ``in_flight_max`` calls run at once; beyond that the
server stops reading from that connection until one finishes (backpressure
reaches the client through the transport). A handler's exception becomes an
ERROR frame carrying (code, message, retriable, leader hint); a deadline
cancels the handler and answers DEADLINE_EXCEEDED; a client's CANCEL cancels
it silently. A peer that breaks the framing protocol gets a connection ERROR
and is disconnected; every other connection keeps being served.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from angelia_rpc.codec import codec_named
from angelia_rpc.codec.base import Codec, Decoder, Encoder
from angelia_rpc.config import RpcConfig
from angelia_rpc.connection import Connection, StreamState, message_frame
from angelia_rpc.errors import AngeliaError, deadline_exceeded, from_exception
from angelia_rpc.framing import (
    CANCEL,
    CREDIT,
    END,
    ERROR,
    HEADER,
    HEADER_BYTES,
    MESSAGE,
    REQUEST,
    RESPONSE,
    SERVER_STREAM,
    UNARY,
    WELCOME,
    Frame,
    check_hello,
    encode_frame,
    encode_json,
    violation,
)
from angelia_rpc.service import KIND_LABELS, Handler
from angelia_rpc.transport import transport_for
from angelia_rpc.transport.base import Listener, Transport
from protocol import errors

log = logging.getLogger("angelia_rpc.server")
SWEEP_S = 0.05
_HEADER_PACK = HEADER.pack


@dataclass(slots=True)
class CallContext:
    """What a handler knows about its call."""

    method: str
    peer: str
    deadline: float | None  # event-loop time, None for streams without a deadline

    def remaining_ms(self) -> int | None:
        """Milliseconds left until the deadline (None: no deadline)."""
        if self.deadline is None:
            return None
        return max(0, int((self.deadline - asyncio.get_running_loop().time()) * 1000))


@dataclass(frozen=True, slots=True)
class _Route:
    handler: Handler
    kind: int
    decode: Decoder
    encode: Encoder


class ServerConnection(Connection):
    """The server end of one connection."""

    def __init__(self, server: Server) -> None:
        super().__init__(server.codec, server.config.frame_bytes_max, server.transport.name)
        self.server = server
        self.greeted = False
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.deadlines: dict[int, float] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._reading_paused = False

    def link_made(self, link: Any) -> None:
        """Track the connection so the server can close it."""
        super().link_made(link)
        self.server.connections.add(self)

    def link_lost(self, reason: str) -> None:
        """Cancel every running handler of this connection."""
        super().link_lost(reason)
        self.server.connections.discard(self)
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        tasks, self.tasks = self.tasks, {}
        for task in tasks.values():
            task.cancel()

    def on_frame(self, frame: Frame) -> None:
        """Dispatch one frame from the client."""
        kind = frame.kind
        if kind == REQUEST and self.greeted:
            self._on_request(frame)
        elif not self.greeted:
            self._on_hello(frame)
        elif kind == CANCEL:
            task = self.tasks.pop(frame.call_id, None)
            if task is not None:
                task.cancel()
            stream = self.streams.pop(frame.call_id, None)
            if stream is not None:
                stream.fail(AngeliaError(errors.CANCELLED, "the client cancelled the call"))
        elif kind in (MESSAGE, END, CREDIT):
            stream = self.streams.get(frame.call_id)
            if stream is not None:
                stream.on_frame(frame)
        elif kind == ERROR:
            log.warning("client %s sent an error frame: %r", self.peer, frame.payload[:200])
        else:
            self.protocol_failed(violation(f"a client may not send frame kind {kind}"))

    def _on_hello(self, frame: Frame) -> None:
        try:
            _, refusal = check_hello(frame, self.codec.name, self.transport_name)
        except AngeliaError as exc:
            self.protocol_failed(exc)
            return
        if refusal is not None:
            log.warning("refused %s: %s", self.peer, refusal.message)
            self.protocol_failed(refusal)
            return
        self.greeted = True
        self.send_raw(
            encode_json(
                WELCOME,
                0,
                {"frame_bytes_max": self.frame_bytes_max, "codec": self.codec.name},
                self.frame_bytes_max,
            )
        )

    def _on_request(self, frame: Frame) -> None:
        call_id = frame.call_id
        route = self.server.routes.get(frame.method)
        if route is None:
            self.send_error(
                call_id,
                AngeliaError(errors.UNKNOWN_METHOD, f"this server does not serve {frame.method!r}"),
            )
            return
        if frame.codec_id != self.codec_id:
            self.send_error(
                call_id,
                AngeliaError(
                    errors.CODEC_MISMATCH,
                    f"request encoded with codec id {frame.codec_id}, this server uses "
                    f"{self.codec.name} (id {self.codec_id})",
                ),
            )
            return
        if frame.flags != route.kind:
            self.send_error(
                call_id,
                AngeliaError(
                    errors.BAD_REQUEST,
                    f"{frame.method} is {KIND_LABELS[route.kind]}, called as "
                    f"{KIND_LABELS.get(frame.flags, frame.flags)}",
                ),
            )
            return
        loop = self._loop
        deadline = loop.time() + frame.timeout_ms / 1000 if frame.timeout_ms else None
        context = CallContext(frame.method, self.peer, deadline)
        if route.kind == UNARY:
            coro = self._run_unary(call_id, route, frame.payload, context)
        else:
            stream = StreamState(self, call_id)
            self.streams[call_id] = stream
            coro = self._run_stream(call_id, route, frame.payload, context, stream)
        task = loop.create_task(coro)
        self.tasks[call_id] = task
        if deadline is not None:
            self.deadlines[call_id] = deadline
            if self._sweeper is None:
                self._sweeper = loop.call_later(SWEEP_S, self._sweep)
        if len(self.tasks) >= self.server.config.in_flight_max and not self._reading_paused:
            self._reading_paused = True
            if self.link is not None:
                self.link.pause_reading()

    def _sweep(self) -> None:
        # Server-side deadlines are a backstop, checked every SWEEP_S: the
        # client enforces its deadline exactly and sends CANCEL when it passes.
        self._sweeper = None
        now = self._loop.time()
        for call_id, deadline in list(self.deadlines.items()):
            if deadline <= now:
                del self.deadlines[call_id]
                task = self.tasks.get(call_id)
                if task is not None:
                    task.cancel()
        if self.deadlines and not self.closed:
            self._sweeper = self._loop.call_later(SWEEP_S, self._sweep)

    def _finished(self, call_id: int) -> None:
        self.tasks.pop(call_id, None)
        self.deadlines.pop(call_id, None)
        if self._reading_paused and len(self.tasks) < self.server.config.in_flight_max:
            self._reading_paused = False
            if self.link is not None and not self.closed:
                self.link.resume_reading()

    def _expired_or_cancelled(self, call_id: int, context: CallContext) -> None:
        # A deadline cancels the task; a client's CANCEL removed it from tasks first.
        if call_id in self.tasks and not self.closed:
            self.send_error(
                call_id, deadline_exceeded(f"{context.method}: the deadline passed on the server")
            )

    async def _run_unary(
        self, call_id: int, route: _Route, payload: bytes, context: CallContext
    ) -> None:
        try:
            request = route.decode(payload)
            response = await route.handler.call(request, context)
            encoded = route.encode(response)
            size = HEADER_BYTES + len(encoded)
            if size > self.send_bytes_max:
                encode_frame(RESPONSE, call_id, encoded, frame_bytes_max=self.send_bytes_max)
            frame = _HEADER_PACK(size - 4, RESPONSE, 0, self.codec_id, 0, call_id, 0) + encoded
        except asyncio.CancelledError:
            self._expired_or_cancelled(call_id, context)
        except Exception as exc:  # noqa: BLE001 - any handler failure goes to the caller
            if not self.closed:
                self.send_error(call_id, self._report(exc, context))
        else:
            if not self.closed:
                self.send_raw(frame)
        finally:
            self._finished(call_id)

    async def _run_stream(
        self,
        call_id: int,
        route: _Route,
        payload: bytes,
        context: CallContext,
        stream: StreamState,
    ) -> None:
        try:
            if route.kind == SERVER_STREAM:
                responses = route.handler.call(route.decode(payload), context)
            else:
                responses = route.handler.call(_requests(stream, route.decode), context)
            try:
                async for response in responses:
                    frame = message_frame(
                        call_id, route.encode(response), self.codec_id, self.send_bytes_max
                    )
                    if stream.may_send_now():
                        self.send_raw(frame)
                    else:
                        await stream.send_payload(frame)
            finally:
                await responses.aclose()
            stream.end()
        except asyncio.CancelledError:
            self._expired_or_cancelled(call_id, context)
        except Exception as exc:  # noqa: BLE001 - any handler failure goes to the caller
            if not self.closed and stream.error is None:
                self.send_error(call_id, self._report(exc, context))
        finally:
            self.streams.pop(call_id, None)
            self._finished(call_id)

    def _report(self, exc: Exception, context: CallContext) -> AngeliaError:
        error = from_exception(exc)
        if error.code is errors.INTERNAL:
            log.error("%s from %s failed", context.method, self.peer, exc_info=exc)
        return error


async def _requests(stream: StreamState, decode: Decoder) -> AsyncIterator[Any]:
    while True:
        payload = await stream.next_payload()
        if payload is None:
            return
        yield decode(payload)


class Server:
    """Serves service implementations on one address.

    ``bindings`` are dispatch tables from ``SomeService.bind(impl)``.
    """

    def __init__(
        self,
        bindings: list[Mapping[str, Handler]],
        config: RpcConfig | None = None,
        *,
        transport: Transport | None = None,
    ) -> None:
        self.config = config or RpcConfig()
        self.codec: Codec = codec_named(self.config.codec)
        self.transport = transport or transport_for(self.config)
        self.routes: dict[str, _Route] = {}
        for table in bindings:
            for name, handler in table.items():
                method = handler.method
                self.routes[name] = _Route(
                    handler,
                    method.kind,
                    self.codec.decoder(method.request),
                    self.codec.encoder(method.response),
                )
        self.connections: set[ServerConnection] = set()
        self.listener: Listener | None = None
        self.address = ""

    async def start(self, address: str = "127.0.0.1:0") -> str:
        """Listen on ``address``; returns the bound address (the port filled in)."""
        self.listener = await self.transport.listen(address, lambda: ServerConnection(self))
        self.address = self.listener.address
        return self.address

    async def stop(self) -> None:
        """Stop accepting, close every connection and cancel every running handler."""
        if self.listener is not None:
            await self.listener.close()
            self.listener = None
        for connection in list(self.connections):
            connection.close("the server is stopping")
            connection.link_lost("the server is stopping")
        self.connections.clear()

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
