"""HTTP/2 and gRPC conformance: the broker's server (``h2``) and grpc.aio (``grpcio``) pass
the same cases, with grpcio's behaviour as the reference.

Each case runs against both servers, serving the same handlers (those of
``test_grpc_http2``, plus a few below), with the clients the official SDKs sit
on: grpcio (Python, C core) and @grpc/grpc-js (Node, via
``tests/clients/node/grpc_conformance.js``); a raw HTTP/2 client (the h2
library) checks what the gRPC clients hide: PING answers, trailers-only
responses, GOAWAY.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import pytest

from broker.grpc.http2 import Http2GrpcServer
from broker.grpc.server import SERVERS
from protocol import http2
from tests.contract.node_clients import run_node
from tests.contract.test_grpc_http2 import LIMIT, Handlers

MIB = 1024 * 1024
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


class Gated(Handlers):
    """The echo handlers, and calls that wait for the test."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.drained: list[int] = []  # request counts of the Drain calls that ended

    async def gate(self, request: bytes, context: Any) -> bytes:
        """Answers once the test releases it."""
        self.started.set()
        await self.release.wait()
        return b"released"

    async def drain(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        """Reads until the client half-closes, then answers once (a Telemetry stream's
        life: the client ends it, the server completes it)."""
        count = 0
        async for _request in requests:
            count += 1
        self.drained.append(count)
        yield b"%d" % count

    async def refuse(self, request: bytes, context: Any) -> bytes:
        """Ends the call with a status before any message (a trailers-only response)."""
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "refused: " + request.decode())
        raise AssertionError("abort returned")


def _handlers(handlers: Gated) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        "t.S",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(handlers.echo),
            "Fail": grpc.unary_unary_rpc_method_handler(handlers.fail),
            "Hang": grpc.unary_unary_rpc_method_handler(handlers.hang),
            "Size": grpc.unary_unary_rpc_method_handler(handlers.size),
            "Gate": grpc.unary_unary_rpc_method_handler(handlers.gate),
            "Refuse": grpc.unary_unary_rpc_method_handler(handlers.refuse),
            "Count": grpc.unary_stream_rpc_method_handler(handlers.count),
            "Chunks": grpc.unary_stream_rpc_method_handler(handlers.chunks),
            "HangStream": grpc.unary_stream_rpc_method_handler(handlers.hang_stream),
            "Chat": grpc.stream_stream_rpc_method_handler(handlers.chat),
            "Drain": grpc.stream_stream_rpc_method_handler(handlers.drain),
        },
    )


class Served:
    """One server of a kind, serving :class:`Gated` on 127.0.0.1."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.handlers = Gated()
        self.server: Http2GrpcServer | grpc.aio.Server
        self.port = 0

    async def start(self) -> None:
        if self.kind == "h2":
            h2_server = Http2GrpcServer(inbound_bytes_max=LIMIT)
            h2_server.add_generic_rpc_handlers((_handlers(self.handlers),))
            self.port = await h2_server.start("127.0.0.1", 0)
            self.server = h2_server
        else:
            aio_server = grpc.aio.server(
                options=[
                    ("grpc.max_receive_message_length", LIMIT),
                    ("grpc.max_send_message_length", -1),
                    ("grpc.so_reuseport", 0),
                ]
            )
            aio_server.add_generic_rpc_handlers((_handlers(self.handlers),))
            self.port = aio_server.add_insecure_port("127.0.0.1:0")
            await aio_server.start()
            self.server = aio_server
        self.handlers.port = self.port

    async def stop(self, grace_s: float) -> None:
        await self.server.stop(grace_s)

    def channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(f"127.0.0.1:{self.port}", options=CHANNEL_OPTIONS)


@pytest.fixture(params=SERVERS)
async def served(request: pytest.FixtureRequest) -> AsyncIterator[Served]:
    """Each server in turn, stopped after the test."""
    server = Served(request.param)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(1.0)


@pytest.fixture
async def channel(served: Served) -> AsyncIterator[grpc.aio.Channel]:
    """A grpcio channel to the served server."""
    async with served.channel() as opened:
        yield opened


# -- the grpcio (Python) client --------------------------------------------------------


async def test_half_close_ends_the_requests_and_the_call_completes_ok(
    served: Served, channel: grpc.aio.Channel
) -> None:
    call = channel.stream_stream("/t.S/Drain")()
    for _ in range(3):
        await call.write(b"r")
    await call.done_writing()
    assert [r async for r in call] == [b"3"]
    assert await call.code() is grpc.StatusCode.OK
    assert served.handlers.drained == [3]


async def test_a_cancelled_call_resets_its_stream_and_cancels_its_handler(
    served: Served, channel: grpc.aio.Channel
) -> None:
    call = channel.unary_stream("/t.S/HangStream")(b"")
    assert await call.read() == b"first"
    await asyncio.wait_for(served.handlers.started.wait(), 10)
    assert call.cancel()
    await asyncio.wait_for(served.handlers.cancelled.wait(), 10)
    assert await call.code() is grpc.StatusCode.CANCELLED
    assert await channel.unary_unary("/t.S/Size")(b"ab", timeout=10) == b"2"


async def test_a_call_past_its_grpc_timeout_gets_deadline_exceeded_and_is_cancelled(
    served: Served, channel: grpc.aio.Channel
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await channel.unary_unary("/t.S/Hang")(b"", timeout=0.3)
    assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.wait_for(served.handlers.cancelled.wait(), 10)


async def test_four_mib_messages_pass_the_flow_control_windows_both_ways(
    channel: grpc.aio.Channel,
) -> None:
    size = channel.unary_unary("/t.S/Size")
    assert await size(b"x" * (4 * MIB), timeout=30) == b"%d" % (4 * MIB)
    chunks = channel.unary_stream("/t.S/Chunks")
    got = [r async for r in chunks(b"%dx4" % (4 * MIB), timeout=60)]
    assert [(len(r), r[0]) for r in got] == [(4 * MIB, i) for i in range(4)]
    chat = channel.stream_stream("/t.S/Chat")(timeout=60)

    async def write() -> None:
        for i in range(4):
            await chat.write(bytes([97 + i]) * (4 * MIB))
        await chat.done_writing()

    # Read while writing: each answer is as large as the windows, so a client that
    # only reads after its last write can stall the server's writes (and so its reads).
    writing = asyncio.ensure_future(write())
    answers = [r async for r in chat]
    await writing
    assert [(len(r), r[:1]) for r in answers] == [(4 * MIB, bytes([65 + i])) for i in range(4)]


async def test_many_concurrent_streams_on_one_connection_all_complete(
    channel: grpc.aio.Channel,
) -> None:
    gate = channel.unary_unary("/t.S/Size")
    sizes = await asyncio.gather(*(gate(b"x" * n, timeout=60) for n in range(1000)))
    assert sizes == [b"%d" % n for n in range(1000)]


@pytest.mark.parametrize("value_bytes", [1024, 7 * 1024])
async def test_header_lists_within_grpcs_limit_reach_the_handler(
    channel: grpc.aio.Channel, value_bytes: int
) -> None:
    echo = channel.unary_unary("/t.S/Echo")
    metadata = (("x-mq-client-id", "c" * value_bytes),)
    answer = await echo(b"hi", metadata=metadata, timeout=10)
    assert answer.split(b"|")[1] == b"c" * value_bytes


async def test_an_error_before_any_message_is_a_status_and_the_connection_serves_on(
    channel: grpc.aio.Channel,
) -> None:
    for path, code in [
        ("/t.S/Refuse", grpc.StatusCode.FAILED_PRECONDITION),
        ("/t.S/Nope", grpc.StatusCode.UNIMPLEMENTED),
        ("/t.S/Fail", grpc.StatusCode.UNKNOWN),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await channel.unary_unary(path)(b"why", timeout=10)
        assert caught.value.code() is code, path
        if code is grpc.StatusCode.FAILED_PRECONDITION:
            assert caught.value.details() == "refused: why"
    assert await channel.unary_unary("/t.S/Size")(b"abc", timeout=10) == b"3"


async def test_stop_drains_the_calls_in_flight_then_closes(
    served: Served, channel: grpc.aio.Channel
) -> None:
    call = asyncio.ensure_future(channel.unary_unary("/t.S/Gate")(b"", timeout=30))
    await asyncio.wait_for(served.handlers.started.wait(), 10)
    stopping = asyncio.ensure_future(served.stop(30))
    # The call in flight finishes inside the grace period; stop waits for it.
    await asyncio.sleep(0)
    assert not stopping.done()
    served.handlers.release.set()
    assert await call == b"released"
    await asyncio.wait_for(stopping, 30)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await channel.unary_unary("/t.S/Size")(b"", timeout=5)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE


# -- a raw HTTP/2 client (the h2 library): what gRPC clients do not show ------------------


class RawClient:
    """One HTTP/2 connection driven by hand; events are gathered by stream."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.events: list[h2.events.Event] = []
        self.after_goaway: list[int] = []  # the kinds of the frames after the first GOAWAY
        self.late_headers: dict[int, dict[bytes, bytes]] = {}  # header blocks among them
        self._inbound = bytearray()
        self.closed = False
        self._reader: asyncio.StreamReader
        self._writer: asyncio.StreamWriter

    async def open(self) -> None:
        self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.h2.initiate_connection()
        self.flush()

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self._writer.is_closing():
            self._writer.write(data)

    def request(self, path: str, message: bytes | None, *, end: bool = True) -> int:
        """Open a stream calling ``path`` (with one message, if given); its id."""
        stream_id = self.h2.get_next_available_stream_id()
        headers = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":authority", b"127.0.0.1"),
            (b":path", path.encode()),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
        self.h2.send_headers(stream_id, headers, end_stream=message is None and end)
        if message is not None:
            framed = b"\0" + len(message).to_bytes(4, "big") + message
            self.h2.send_data(stream_id, framed, end_stream=end)
        self.flush()
        return stream_id

    async def until(self, done: Any, timeout_s: float = 10.0) -> None:
        """Read until ``done(self)`` holds (or the server closes the connection)."""
        async with asyncio.timeout(timeout_s):
            while not done(self):
                data = await self._reader.read(65536)
                if not data:
                    self.closed = True
                    return
                self._inbound += data
                for kind, flags, stream_id, payload in http2.split_frames(
                    self._inbound, http2.FRAME_BYTES_LIMIT
                ):
                    # Frame by frame: the h2 library takes no frame after a GOAWAY (a
                    # server draining sends PINGs and a final GOAWAY after its first).
                    if self.of(h2.events.ConnectionTerminated):
                        self.after_goaway.append(kind)
                        if kind == http2.HEADERS:  # END_HEADERS, unpadded: what servers send
                            block = dict(self.h2.decoder.decode(payload, raw=True))
                            self.late_headers[stream_id] = block
                        elif kind == http2.PING and not flags & http2.ACK:
                            self.write(http2.frame(http2.PING, http2.ACK, 0, payload))
                        continue
                    raw = http2.frame(kind, flags, stream_id, payload)
                    for event in self.h2.receive_data(raw):
                        self.events.append(event)
                        if isinstance(event, h2.events.DataReceived):
                            self.h2.acknowledge_received_data(
                                event.flow_controlled_length, event.stream_id
                            )
                self.flush()

    def of(self, kind: type, stream_id: int | None = None) -> list[Any]:
        """The events of ``kind`` so far (on ``stream_id``, if given)."""
        found: list[Any] = [e for e in self.events if isinstance(e, kind)]
        if stream_id is None:
            return found
        return [e for e in found if e.stream_id == stream_id]

    def status(self, stream_id: int) -> bytes | None:
        """The stream's grpc-status, once it came (in trailers or a trailers-only block)."""
        for event in self.of(h2.events.TrailersReceived, stream_id) + self.of(
            h2.events.ResponseReceived, stream_id
        ):
            found = dict(event.headers).get(b"grpc-status")
            if found is not None:
                return bytes(found)
        return None

    def write(self, data: bytes) -> None:
        """Bytes to the socket as they are, past the h2 library."""
        self._writer.write(data)

    def close(self) -> None:
        self._writer.close()


@pytest.fixture
async def raw(served: Served) -> AsyncIterator[RawClient]:
    """A raw HTTP/2 connection to the served server, its SETTINGS exchanged."""
    client = RawClient(served.port)
    await client.open()
    await client.until(lambda c: c.of(h2.events.SettingsAcknowledged))
    try:
        yield client
    finally:
        client.close()


async def test_a_ping_is_answered_with_its_payload(raw: RawClient) -> None:
    raw.h2.ping(b"12345678")
    raw.flush()
    await raw.until(lambda c: c.of(h2.events.PingAckReceived))
    assert [e.ping_data for e in raw.of(h2.events.PingAckReceived)] == [b"12345678"]


async def test_an_error_before_any_message_is_one_trailers_only_block(raw: RawClient) -> None:
    for path in ("/t.S/Nope", "/t.S/Refuse"):
        stream_id = raw.request(path, b"x")
        await raw.until(lambda c, s=stream_id: c.status(s) is not None)
        (response,) = raw.of(h2.events.ResponseReceived, stream_id)
        headers = dict(response.headers)
        assert headers[b":status"] == b"200"
        assert headers[b"grpc-status"] != b"0"
        assert response.stream_ended is not None, path  # END_STREAM on that block
        assert not raw.of(h2.events.DataReceived, stream_id)


async def test_a_message_flagged_compressed_without_an_encoding_is_internal(
    raw: RawClient,
) -> None:
    stream_id = raw.request("/t.S/Size", None, end=False)
    raw.h2.send_data(stream_id, b"\1\0\0\0\3abc", end_stream=True)
    raw.flush()
    await raw.until(lambda c: c.status(stream_id) is not None)
    assert raw.status(stream_id) == str(grpc.StatusCode.INTERNAL.value[0]).encode()
    sized = raw.request("/t.S/Size", b"abc")
    await raw.until(lambda c: c.status(sized) is not None)
    assert raw.status(sized) == b"0"


async def test_a_reset_stream_cancels_its_handler_and_the_connection_serves_on(
    served: Served, raw: RawClient
) -> None:
    hung = raw.request("/t.S/Hang", b"")
    await asyncio.wait_for(served.handlers.started.wait(), 10)
    raw.h2.reset_stream(hung, h2.errors.ErrorCodes.CANCEL)
    raw.flush()
    await asyncio.wait_for(served.handlers.cancelled.wait(), 10)
    sized = raw.request("/t.S/Size", b"abcd")
    await raw.until(lambda c: c.status(sized) is not None)
    assert raw.status(sized) == b"0"
    assert raw.of(h2.events.DataReceived, sized)[0].data[5:] == b"4"


async def test_a_client_goaway_still_gets_its_open_calls_answered(raw: RawClient) -> None:
    """grpc-js closes a channel so: half-close, then GOAWAY with the stream open."""
    stream_id = raw.request("/t.S/Drain", b"one", end=False)
    raw.h2.send_data(stream_id, b"\0\0\0\0\3two", end_stream=True)
    raw.flush()
    # GOAWAY(last stream 0, NO_ERROR) written past the h2 library, which would take no
    # frame after sending it.
    raw.write(b"\0\0\x08\x07\0\0\0\0\0" + bytes(8))
    await raw.until(lambda c: c.status(stream_id) is not None)
    assert raw.status(stream_id) == b"0"
    assert raw.of(h2.events.DataReceived, stream_id)[0].data[5:] == b"2"


@pytest.mark.parametrize("value_bytes", [16 * 1024, 64 * 1024])
async def test_a_header_list_over_the_limit_is_refused_and_the_connection_serves_on(
    raw: RawClient, value_bytes: int
) -> None:
    stream_id = raw.h2.get_next_available_stream_id()
    raw.h2.send_headers(
        stream_id,
        [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":authority", b"127.0.0.1"),
            (b":path", b"/t.S/Size"),
            (b"content-type", b"application/grpc"),
            (b"x-big", b"v" * value_bytes),
        ],
    )
    raw.h2.send_data(stream_id, b"\0\0\0\0\1x", end_stream=True)
    raw.flush()
    await raw.until(
        lambda c: c.status(stream_id) is not None or c.of(h2.events.StreamReset, stream_id)
    )
    assert raw.status(stream_id) == str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]).encode()
    sized = raw.request("/t.S/Size", b"abc")
    await raw.until(lambda c: c.status(sized) is not None)
    assert raw.status(sized) == b"0"


async def test_stop_sends_goaway_first_refuses_crossing_calls_and_drains_the_rest(
    served: Served, channel: grpc.aio.Channel, raw: RawClient
) -> None:
    call = asyncio.ensure_future(channel.unary_unary("/t.S/Gate")(b"", timeout=30))
    await asyncio.wait_for(served.handlers.started.wait(), 10)
    stopping = asyncio.ensure_future(served.stop(30))
    await asyncio.sleep(0)  # the stop task announced GOAWAY; the raw client did not read it
    crossing = raw.request("/t.S/Size", b"abc")
    # Every connection hears GOAWAY (NO_ERROR) while the call is still in flight.
    await raw.until(lambda c: c.of(h2.events.ConnectionTerminated))
    (goaway,) = raw.of(h2.events.ConnectionTerminated)
    assert goaway.error_code == h2.errors.ErrorCodes.NO_ERROR
    assert not call.done()
    served.handlers.release.set()
    assert await call == b"released"
    await asyncio.wait_for(stopping, 30)
    await raw.until(lambda c: c.closed)
    assert raw.closed  # then the server closed the connection
    # The crossing call is refused with a status (one block, after the first GOAWAY).
    # grpcio says CANCELLED; the broker's server says UNAVAILABLE, naming the stop: a
    # code clients retry elsewhere (a deliberate difference).
    answer = raw.late_headers[crossing]
    expected = b"1" if served.kind == "grpcio" else b"14"
    assert answer[b"grpc-status"] == expected, answer
    if served.kind == "h2":
        assert answer[b"grpc-message"] == b"the server is stopping"


# -- the @grpc/grpc-js (Node) client -----------------------------------------------------


async def test_grpc_js_passes_the_same_cases_and_closes_cleanly(
    served: Served, tmp_path: Path
) -> None:
    """tests/clients/node/grpc_conformance.js: every case's outcome, then a channel
    closed with a half-closed stream open (an error after that would kill the Node process)."""
    result = await asyncio.to_thread(
        run_node, "grpc_conformance.js", str(served.port), home=tmp_path
    )
    assert result == {
        "echo": "hi|node-1|\x00\xff|deadline",
        "count": [0, ["0", "1", "2", "3", "4"]],
        "chat": [0, ["ONE", "TWO"]],
        "drain": [0, ["3"]],
        "cancel": grpc.StatusCode.CANCELLED.value[0],
        "deadline": grpc.StatusCode.DEADLINE_EXCEEDED.value[0],
        "refuse": {"code": grpc.StatusCode.FAILED_PRECONDITION.value[0], "details": "refused: why"},
        "nope": grpc.StatusCode.UNIMPLEMENTED.value[0],
        "size_4mib": str(4 * MIB),
        "chunks_4mib": [0, [[4 * MIB, 0], [4 * MIB, 1], [4 * MIB, 2]]],
        "concurrent": True,
        "last": "BYE",
    }
