"""The client side: a :class:`Channel` is one peer, reused by every call to it.

A channel holds at most one connection. The first call connects (HELLO ->
WELCOME); a lost connection fails its open calls with UNAVAILABLE and the
next call reconnects, retrying with a doubling backoff within its own
deadline. Calls in flight on one connection are bounded by
``in_flight_max``; a call beyond it waits for a slot within its deadline.

A stub made with ``wait_for_ready=False`` (as gRPC's default) does not wait
for an unreachable peer: while the channel has no connection its calls get
the outcome of one connect attempt, and UNAVAILABLE at once while the channel
backs off after a failed one. Callers that can try another replica use it.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

from angelia_rpc.codec import codec_named
from angelia_rpc.codec.base import Codec, Decoder, Encoder
from angelia_rpc.config import RECONNECT_JITTER_MAX, RpcConfig
from angelia_rpc.connection import Connection, StreamState, message_frame
from angelia_rpc.errors import (
    AngeliaError,
    LocalUsageError,
    cancelled,
    deadline_exceeded,
    unavailable,
)
from angelia_rpc.framing import (
    BIDI,
    CANCEL,
    ERROR,
    HEADER,
    HEADER_BYTES,
    REQUEST,
    RESPONSE,
    SERVER_STREAM,
    TIMEOUT_MS_MAX,
    UNARY,
    WELCOME,
    Frame,
    decode_json,
    encode_frame,
    hello,
    violation,
)
from angelia_rpc.service import Method, Service
from angelia_rpc.transport import transport_for
from angelia_rpc.transport.base import Transport, fail_future
from protocol import errors

_HEADER_PACK = HEADER.pack


class ClientConnection(Connection):
    """The client end of one connection."""

    def __init__(self, config: RpcConfig, codec: Codec, transport_name: str) -> None:
        super().__init__(codec, config.frame_bytes_max, transport_name)
        self.config = config
        self.unary: dict[int, asyncio.Future[bytes]] = {}
        self.welcome: asyncio.Future[None] = self._loop.create_future()
        self._call_ids = itertools.count(1)
        self.in_flight = 0
        self._slot_waiters: deque[asyncio.Future[None]] = deque()

    def on_frame(self, frame: Frame) -> None:
        """Route a frame to its call."""
        kind = frame.kind
        if kind == RESPONSE:
            future = self.unary.get(frame.call_id)
            if future is not None and not future.done():
                future.set_result(frame.payload)
            return
        if frame.call_id == 0:
            self._on_connection_frame(frame)
            return
        stream = self.streams.get(frame.call_id)
        if kind == ERROR:
            try:
                error = self.decode_error(frame)
            except AngeliaError as exc:
                self.protocol_failed(exc)
                return
            future = self.unary.get(frame.call_id)
            if future is not None and not future.done():
                future.set_exception(error)
            elif stream is not None:
                stream.fail(error)
                self.streams.pop(frame.call_id, None)
            return
        if stream is not None:
            stream.on_frame(frame)
        # frames of calls that ended here already (timed out, cancelled) are dropped

    def _on_connection_frame(self, frame: Frame) -> None:
        if frame.kind == WELCOME:
            document = decode_json(frame)
            peer_max = document.get("frame_bytes_max")
            if isinstance(peer_max, int) and peer_max > 0:
                self.send_bytes_max = min(self.frame_bytes_max, peer_max)
            if not self.welcome.done():
                self.welcome.set_result(None)
        elif frame.kind == ERROR:
            document = decode_json(frame)
            code = errors.by_number(int(document.get("code", errors.INTERNAL.number)))
            error = AngeliaError(
                code, f"{self.peer} refused the connection: {document.get('message')}"
            )
            self.close(error.message)
            self.failed(error)
        else:
            self.protocol_failed(violation(f"unexpected connection frame kind {frame.kind}"))

    def failed(self, error: AngeliaError) -> None:
        """Fail the handshake, every unary call and every stream."""
        if not self.welcome.done():
            if error.code is errors.UNAVAILABLE and self.decoder.buffered_bytes:
                # The peer answered HELLO with bytes that are not a frame, then hung
                # up: it speaks something else. Retrying cannot help.
                error = violation(
                    f"{self.peer} answered the handshake with bytes that are not Angelia "
                    f"frames and closed the connection: it is not an Angelia "
                    f"{self.transport_name} server (is it configured with another transport?)"
                )
            fail_future(self.welcome, error)
        unary, self.unary = self.unary, {}
        for future in unary.values():
            fail_future(future, error)
        waiters, self._slot_waiters = self._slot_waiters, deque()
        for waiter in waiters:
            fail_future(waiter, error)
        super().failed(error)

    def next_call_id(self) -> int:
        """A correlation id unique on this connection."""
        return next(self._call_ids)

    async def acquire_slot(self, deadline: float) -> None:
        """Wait (until ``deadline``) for room under ``in_flight_max``."""
        while self.in_flight >= self.config.in_flight_max:
            if self.closed:
                raise unavailable(f"connection to {self.peer} lost: {self.close_reason}")
            waiter = self._loop.create_future()
            self._slot_waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except TimeoutError:
                raise deadline_exceeded(
                    f"no call slot to {self.peer} within the deadline "
                    f"({self.config.in_flight_max} calls in flight)"
                ) from None
        self.in_flight += 1

    def release_slot(self) -> None:
        """A call finished."""
        self.in_flight -= 1
        while self._slot_waiters:  # empty unless in_flight_max was reached
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def call_unary(
        self,
        method: bytes,
        name: str,
        encode: Encoder,
        decode: Decoder,
        request: Any,
        deadline: float,
    ) -> Any:
        """Send a REQUEST and wait for its RESPONSE until ``deadline``; the decoded response."""
        # The hot path of the whole system (raft appends, storage calls): keep it flat.
        loop = self._loop
        payload = encode(request)
        if self.in_flight >= self.config.in_flight_max:
            await self.acquire_slot(deadline)
        else:
            self.in_flight += 1
        try:
            if self.closed:
                raise unavailable(f"connection to {self.peer} lost: {self.close_reason}")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise deadline_exceeded(
                    f"{name} to {self.peer}: the deadline passed before sending"
                )
            size = HEADER_BYTES + len(method) + len(payload)
            if size > self.send_bytes_max:
                encode_frame(
                    REQUEST, 0, payload, method=method, frame_bytes_max=self.send_bytes_max
                )
            call_id = next(self._call_ids)
            timeout_ms = int(remaining * 1000) + 1
            self.send_raw(
                b"".join(
                    (
                        _HEADER_PACK(
                            size - 4,
                            REQUEST,
                            UNARY,
                            self.codec_id,
                            len(method),
                            call_id,
                            timeout_ms if timeout_ms < TIMEOUT_MS_MAX else TIMEOUT_MS_MAX,
                        ),
                        method,
                        payload,
                    )
                )
            )
            future: asyncio.Future[bytes] = loop.create_future()
            self.unary[call_id] = future
            timer = loop.call_at(deadline, _expire, future, name, self.peer)
            try:
                response = await future
            except asyncio.CancelledError:
                self._cancel(call_id)
                raise
            except AngeliaError as exc:
                if exc.code is errors.DEADLINE_EXCEEDED:
                    self._cancel(call_id)
                raise
            finally:
                timer.cancel()
                self.unary.pop(call_id, None)
        finally:
            self.release_slot()
        return decode(response)

    def _cancel(self, call_id: int) -> None:
        if not self.closed:
            self.send_raw(encode_frame(CANCEL, call_id, frame_bytes_max=self.send_bytes_max))

    def open_stream(self, method: bytes, kind: int, payload: bytes, timeout_ms: int) -> StreamState:
        """Send the REQUEST that opens a stream call."""
        if self.closed:
            raise unavailable(f"connection to {self.peer} lost: {self.close_reason}")
        call_id = next(self._call_ids)
        state = StreamState(self, call_id, end_closes_call=True)
        self.streams[call_id] = state
        self.send_raw(
            encode_frame(
                REQUEST,
                call_id,
                payload,
                flags=kind,
                codec_id=self.codec_id,
                timeout_ms=timeout_ms,
                method=method,
                frame_bytes_max=self.send_bytes_max,
            )
        )
        return state


def _retrieve(task: asyncio.Task[ClientConnection]) -> None:
    # A connection attempt may fail after every caller waiting for it gave up.
    if not task.cancelled():
        task.exception()


def _expire(future: asyncio.Future[bytes], name: str, peer: str) -> None:
    if not future.done():
        future.set_exception(
            deadline_exceeded(f"{name} to {peer}: no response within the deadline")
        )


class Channel:
    """Calls to one peer over one reused connection; reconnects with backoff.

    ``address`` is ``host:port`` (a memory network name for the memory
    transport). ``transport`` overrides the one named by ``config`` (the
    memory transport needs its :class:`MemoryNetwork`).
    """

    def __init__(
        self, address: str, config: RpcConfig | None = None, *, transport: Transport | None = None
    ) -> None:
        self.address = address
        self.config = config or RpcConfig()
        self.codec = codec_named(self.config.codec)
        self.transport = transport or transport_for(self.config)
        if self.transport.name != self.config.transport:
            raise LocalUsageError(
                errors.BAD_REQUEST,
                f"transport {self.transport.name!r} given for a {self.config.transport!r} config",
            )
        self._connection: ClientConnection | None = None
        self._connecting: asyncio.Task[ClientConnection] | None = None
        self._backoff_s = self.config.reconnect_backoff_min_ms / 1000
        self._next_attempt = 0.0
        self._last_error = ""
        # Resolved when the connect attempt under way (or the next one) ends, either way.
        self._attempt_ended: asyncio.Future[None] | None = None
        self._random = random.Random()
        self._closed = False

    # -- connection management --------------------------------------------------------
    async def connection(self, deadline: float, *, wait_for_ready: bool = True) -> ClientConnection:
        """The open connection, connecting (and retrying with backoff) until ``deadline``;
        without ``wait_for_ready``, UNAVAILABLE as soon as one connect attempt fails."""
        connection = self._connection
        if connection is not None and not connection.closed:
            return connection
        if self._closed:
            raise LocalUsageError(errors.BAD_REQUEST, f"channel to {self.address} is closed")
        if not wait_for_ready:
            return await self._connect_once(deadline)
        while True:
            task = self._connecting_task(deadline)
            try:
                async with asyncio.timeout_at(deadline):
                    return await asyncio.shield(task)
            except TimeoutError:
                raise self._late("the connection attempt is still running") from None
            except AngeliaError as exc:
                if task is self._connecting:
                    self._connecting = None
                if exc.code is errors.UNAVAILABLE and asyncio.get_running_loop().time() < deadline:
                    continue  # another caller's shorter deadline ended that attempt
                raise

    def _connecting_task(self, deadline: float) -> asyncio.Task[ClientConnection]:
        """The connect task under way, or a new one retrying until ``deadline``."""
        task = self._connecting
        if task is None or task.done():
            task = self._connecting = asyncio.ensure_future(self._connect_until(deadline))
            task.add_done_callback(_retrieve)
        return task

    async def _connect_once(self, deadline: float) -> ClientConnection:
        """The connection if the next connect attempt (shared with other callers) makes
        it; UNAVAILABLE if that attempt fails, and at once while backing off after one."""
        loop = asyncio.get_running_loop()
        if self._last_error and loop.time() < self._next_attempt:
            raise self._unreachable("backing off")
        ended = self._attempt_ended
        if ended is None or ended.done():
            ended = self._attempt_ended = loop.create_future()
        task = self._connecting_task(deadline)
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.wait((task, ended), return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            raise self._late("the connection attempt is still running") from None
        connection = self._connection
        if connection is not None and not connection.closed:
            return connection
        if task.done() and not task.cancelled():
            refusal = task.exception()
            if isinstance(refusal, AngeliaError) and refusal.code is not errors.UNAVAILABLE:
                raise refusal
        raise self._unreachable("the connection attempt failed")

    def _late(self, otherwise: str) -> AngeliaError:
        """UNAVAILABLE: not connected by the deadline (last connect error, or ``otherwise``)."""
        return unavailable(
            f"cannot connect to {self.address} ({self.config.transport}) within the "
            f"deadline: {self._last_error or otherwise}"
        )

    def _unreachable(self, otherwise: str) -> AngeliaError:
        """UNAVAILABLE: a connect attempt failed (its error, else ``otherwise``)."""
        return unavailable(
            f"{self.address} is unreachable ({self.config.transport}): "
            f"{self._last_error or otherwise}"
        )

    def _attempt_over(self) -> None:
        ended = self._attempt_ended
        if ended is not None and not ended.done():
            ended.set_result(None)

    async def _connect_until(self, deadline: float) -> ClientConnection:
        try:
            return await self._connect_attempts(deadline)
        finally:
            self._attempt_over()  # no attempt follows: fail-fast callers stop waiting

    async def _connect_attempts(self, deadline: float) -> ClientConnection:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            if now >= deadline:
                raise self._late("no attempt finished in time")
            if now < self._next_attempt:
                await asyncio.sleep(min(self._next_attempt, deadline) - now)
                continue
            connection = ClientConnection(self.config, self.codec, self.transport.name)
            try:
                async with asyncio.timeout_at(deadline):
                    await self.transport.connect(self.address, connection, deadline - now)
                    connection.send_raw(
                        hello(
                            self.codec.name,
                            self.codec.codec_id,
                            self.transport.name,
                            self.config.frame_bytes_max,
                        )
                    )
                    await connection.welcome
            except (OSError, TimeoutError, AngeliaError) as exc:
                connection.close("connect failed")
                if isinstance(exc, AngeliaError) and exc.code is not errors.UNAVAILABLE:
                    raise  # refused by the peer (codec or protocol mismatch): retrying cannot help
                self._last_error = (
                    f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                )
                jitter = 1 + self._random.random() * RECONNECT_JITTER_MAX
                self._next_attempt = loop.time() + self._backoff_s * jitter
                self._backoff_s = min(
                    self._backoff_s * 2, self.config.reconnect_backoff_max_ms / 1000
                )
                self._attempt_over()
                continue
            self._backoff_s = self.config.reconnect_backoff_min_ms / 1000
            self._next_attempt = 0.0
            self._connection = connection
            return connection

    async def close(self) -> None:
        """Close the connection; open calls fail with UNAVAILABLE."""
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._connection is not None:
            self._connection.close("the channel was closed")
            self._connection.link_lost("the channel was closed")

    async def _connect_and_call(
        self,
        wire_name: bytes,
        name: str,
        encode: Encoder,
        decode: Decoder,
        request: Any,
        deadline: float,
        wait_for_ready: bool,
    ) -> Any:
        connection = await self.connection(deadline, wait_for_ready=wait_for_ready)
        return await connection.call_unary(wire_name, name, encode, decode, request, deadline)

    # -- stubs ------------------------------------------------------------------------
    def bind(self, method: Method[Any, Any], *, wait_for_ready: bool = True) -> Callable[..., Any]:
        """The client callable for ``method`` (see :mod:`angelia_rpc.service`); see the
        module docstring for ``wait_for_ready``."""
        wire_name = method.full_name.encode()
        encode = self.codec.encoder(method.request)
        decode = self.codec.decoder(method.response)
        default_timeout_s = self.config.call_timeout_ms / 1000
        if method.kind == UNARY:
            name = method.full_name

            def unary(request: Any, *, timeout_ms: int | None = None) -> Awaitable[Any]:
                deadline = asyncio.get_running_loop().time() + (
                    default_timeout_s if timeout_ms is None else timeout_ms / 1000
                )
                connection = self._connection
                if connection is None or connection.closed:
                    return self._connect_and_call(
                        wire_name, name, encode, decode, request, deadline, wait_for_ready
                    )
                return connection.call_unary(wire_name, name, encode, decode, request, deadline)

            return unary
        if method.kind == SERVER_STREAM:

            def server_stream(request: Any, *, timeout_ms: int | None = None) -> ClientStream:
                return ClientStream(
                    self, method, wire_name, encode, decode, request, timeout_ms, wait_for_ready
                )

            return server_stream

        def bidi(*, timeout_ms: int | None = None) -> ClientStream:
            return ClientStream(
                self, method, wire_name, encode, decode, None, timeout_ms, wait_for_ready
            )

        return bidi


class ClientStream:
    """An open server-streaming or bidirectional call (opened on first use)."""

    def __init__(
        self,
        channel: Channel,
        method: Method[Any, Any],
        wire_name: bytes,
        encode: Encoder,
        decode: Decoder,
        request: Any,
        timeout_ms: int | None,
        wait_for_ready: bool = True,
    ) -> None:
        self._channel = channel
        self._wait_for_ready = wait_for_ready
        self._method = method
        self._wire_name = wire_name
        self._encode = encode
        self._decode = decode
        self._request = request
        self._timeout_ms = timeout_ms
        self._state: StreamState | None = None
        self._opening: asyncio.Task[StreamState] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._end_requested = False
        self._cancelled = False

    async def _open(self) -> StreamState:
        if self._state is not None:
            return self._state
        if self._cancelled:
            raise cancelled(f"{self._method.full_name}: the stream was cancelled")
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._do_open())
        return await asyncio.shield(self._opening)

    async def _do_open(self) -> StreamState:
        loop = asyncio.get_running_loop()
        timeout_s = (
            self._channel.config.call_timeout_ms / 1000
            if self._timeout_ms is None
            else self._timeout_ms / 1000
        )
        deadline = loop.time() + timeout_s
        connection = await self._channel.connection(deadline, wait_for_ready=self._wait_for_ready)
        payload = b"" if self._method.kind == BIDI else self._encode(self._request)
        state = connection.open_stream(
            self._wire_name, self._method.kind, payload, self._timeout_ms or 0
        )
        if self._timeout_ms is not None:
            self._timer = loop.call_at(deadline, self._expire, state)
        self._state = state
        if self._end_requested:
            state.end()
        return state

    def _expire(self, state: StreamState) -> None:
        if state.error is None and not (state.inbound_ended and state.outbound_ended):
            state.cancel(
                deadline_exceeded(
                    f"{self._method.full_name} to {self._channel.address}: "
                    "the stream's deadline passed"
                )
            )

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        state = await self._open()
        try:
            payload = await state.next_payload()
        except asyncio.CancelledError:
            self.cancel()
            raise
        if payload is None:
            self._finish(state)
            raise StopAsyncIteration
        return self._decode(payload)

    async def send(self, message: Any) -> None:
        """Send one message (bidirectional calls)."""
        if self._method.kind != BIDI:
            raise LocalUsageError(errors.BAD_REQUEST, f"{self._method.full_name} takes no messages")
        state = self._state
        if state is None:
            state = await self._open()
        connection = state.connection
        frame = message_frame(
            state.call_id, self._encode(message), connection.codec_id, connection.send_bytes_max
        )
        if state.may_send_now():
            connection.send_raw(frame)  # the common case: credit left, link writable
        else:
            await state.send_payload(frame)

    def try_send_nowait(self, message: Any) -> bool:
        """Send one message now if that needs no waiting; False (nothing sent) otherwise.

        Nothing is sent unless the stream is open, has credit and its link is
        writable: a caller that gets False sends it with :meth:`send`. A
        message sent here is ordered after every message already sent.
        """
        state = self._state
        if state is None or self._method.kind != BIDI:
            return False
        connection = state.connection
        frame = message_frame(
            state.call_id, self._encode(message), connection.codec_id, connection.send_bytes_max
        )
        if not state.may_send_now():
            return False
        connection.send_raw(frame)
        return True

    def done_sending(self) -> None:
        """End this side (bidirectional calls)."""
        self._end_requested = True
        if self._state is not None:
            self._state.end()

    def cancel(self) -> None:
        """Abandon the call; the server's handler is cancelled."""
        self._cancelled = True
        if self._timer is not None:
            self._timer.cancel()
        if self._state is not None:
            self._state.cancel()
        elif self._opening is not None:
            self._opening.cancel()

    def _finish(self, state: StreamState) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._method.kind != BIDI or state.outbound_ended:
            state.connection.streams.pop(state.call_id, None)

    async def __aenter__(self) -> ClientStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        state = self._state
        if state is None or state.error is not None or not state.inbound_ended:
            self.cancel()


S = TypeVar("S", bound=Service)


class _FailFast:
    """A channel's binder whose calls do not wait for an unreachable peer."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel

    def bind(self, method: Method[Any, Any]) -> Callable[..., Any]:
        return self._channel.bind(method, wait_for_ready=False)


class Peers:
    """One :class:`Channel` per peer address, shared by every caller (connection reuse)."""

    def __init__(
        self, config: RpcConfig | None = None, *, transport: Transport | None = None
    ) -> None:
        self.config = config or RpcConfig()
        self.transport = transport or transport_for(self.config)
        self._channels: dict[str, Channel] = {}
        self._stubs: dict[tuple[type[Service], str, bool], Service] = {}

    def stub(self, service: type[S], address: str, *, wait_for_ready: bool = True) -> S:
        """The client stub of ``service`` on the channel to ``address``, made once: a
        stub compiles its methods' codecs on first use, so callers keep no stubs.
        ``wait_for_ready=False``: calls fail fast while the peer is unreachable
        (see the module docstring)."""
        key = (service, address, wait_for_ready)
        stub = self._stubs.get(key)
        if stub is None:
            channel = self.channel(address)
            stub = self._stubs[key] = service(channel if wait_for_ready else _FailFast(channel))
        return cast(S, stub)  # keyed by its own type

    def channel(self, address: str) -> Channel:
        """The channel to ``address`` (made on first use)."""
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = Channel(
                address, self.config, transport=self.transport
            )
        return channel

    async def close(self) -> None:
        """Close every channel."""
        channels, self._channels = self._channels, {}
        self._stubs.clear()
        for channel in channels.values():
            await channel.close()
