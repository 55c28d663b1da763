"""The load generators' lean gRPC client against two real servers: the broker's and grpc's own.

grpc's server (C core) opens flow-control windows of 64 KiB and grows them as
it goes; ours opens 16 MiB. Calls large enough to pass both make the client
wait for WINDOW_UPDATE when it sends and top up its own window when it reads.
What neither server sends (CONTINUATION, padding, a tiny window, PING) is fed
to the client's protocol by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import hpack
import pytest
import uvloop

from broker.grpc.http2 import Http2GrpcServer
from loadtest import grpc_lean
from loadtest.client import CallFailed
from loadtest.grpc_lean import LeanChannel
from protocol import http2

LIMIT = 64 * 1024 * 1024
BIG = 20 * 1024 * 1024  # beyond the first window of either server


class Handlers:
    """Methods of bytes in, bytes out, and what the server saw."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    async def echo(self, request: bytes, context: Any) -> bytes:
        metadata = dict(context.invocation_metadata())
        return request + b"|" + str(metadata.get("x-mq-client-id")).encode()

    async def size(self, request: bytes, context: Any) -> bytes:
        return b"%d" % len(request)

    async def chunks(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        size, count = (int(v) for v in request.split(b"x"))
        for i in range(count):
            yield bytes([i % 256]) * size

    async def fail(self, request: bytes, context: Any) -> bytes:
        raise ValueError("not like this: 100% sure")

    async def hang(self, request: bytes, context: Any) -> bytes:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return b""


def _handler(handlers: Handlers) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        "t.S",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(handlers.echo),
            "Size": grpc.unary_unary_rpc_method_handler(handlers.size),
            "Chunks": grpc.unary_stream_rpc_method_handler(handlers.chunks),
            "Fail": grpc.unary_unary_rpc_method_handler(handlers.fail),
            "Hang": grpc.unary_unary_rpc_method_handler(handlers.hang),
        },
    )


@pytest.fixture(params=["h2", "grpcio"])
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Handlers, LeanChannel]]:
    handlers = Handlers()
    if request.param == "h2":
        ours = Http2GrpcServer(inbound_bytes_max=LIMIT)
        ours.add_generic_rpc_handlers((_handler(handlers),))
        port = await ours.start("127.0.0.1", 0)
    else:
        options = [("grpc.max_receive_message_length", LIMIT)]
        theirs = grpc.aio.server(options=options)
        theirs.add_generic_rpc_handlers((_handler(handlers),))
        port = theirs.add_insecure_port("127.0.0.1:0")
        await theirs.start()
    channel = LeanChannel(f"127.0.0.1:{port}")
    try:
        yield handlers, channel
    finally:
        await channel.close()
        if request.param == "h2":
            await ours.stop(1.0)
        else:
            await theirs.stop(1.0)


async def test_a_unary_call_carries_its_metadata(served: Any) -> None:
    _handlers, channel = served
    metadata = (("x-mq-client-id", "client-1"),)
    for _ in range(3):  # the first call indexes its headers, the later ones refer to them
        answer = await channel.unary("/t.S/Echo", b"hi", timeout_s=10, metadata=metadata)
        assert answer == b"hi|client-1"


@pytest.mark.alone  # two 4 MiB calls against a 60 s deadline
async def test_a_request_beyond_the_servers_window_arrives_whole(served: Any) -> None:
    _handlers, channel = served
    try:
        sizes = await asyncio.gather(
            *(channel.unary("/t.S/Size", bytes(BIG), timeout_s=60) for _ in range(2))
        )
    except CallFailed as failed:  # str() is the name only: show what the server said
        pytest.fail(f"{failed.name}: {failed.detail}")
    assert sizes == [b"%d" % BIG] * 2


async def test_a_stream_arrives_whole_and_in_order(served: Any) -> None:
    _handlers, channel = served
    size, count = 64 * 1024, 400  # 25 MiB: past the connection window's first top-up
    got = [m async for m in channel.stream("/t.S/Chunks", b"%dx%d" % (size, count), timeout_s=60)]
    assert [len(m) for m in got] == [size] * count
    assert [m[0] for m in got] == [i % 256 for i in range(count)]


async def test_a_whole_stream_comes_from_one_call(served: Any) -> None:
    _handlers, channel = served
    got = await channel.call("/t.S/Chunks", b"%dx%d" % (1024, 300), timeout_s=60)
    assert [(len(m), m[0]) for m in got] == [(1024, i % 256) for i in range(300)]


async def test_a_failed_call_raises_its_status_and_message(served: Any) -> None:
    _handlers, channel = served
    with pytest.raises(CallFailed) as failed:
        await channel.unary("/t.S/Fail", b"", timeout_s=10)
    assert failed.value.name == "UNKNOWN"
    assert "not like this: 100% sure" in failed.value.detail  # percent-decoded
    with pytest.raises(CallFailed) as unknown:
        await channel.unary("/t.S/Nothing", b"", timeout_s=10)
    assert unknown.value.name == "UNIMPLEMENTED"
    assert await channel.unary("/t.S/Echo", b"after", timeout_s=10) == b"after|None"


async def test_a_call_past_its_deadline_fails_and_is_cancelled(served: Any) -> None:
    handlers, channel = served
    with pytest.raises(CallFailed) as failed:
        await channel.unary("/t.S/Hang", b"", timeout_s=0.3)
    assert failed.value.name == "DEADLINE_EXCEEDED"
    await asyncio.wait_for(handlers.cancelled.wait(), 10)
    assert await channel.unary("/t.S/Echo", b"still", timeout_s=10) == b"still|None"


async def test_a_stream_past_its_deadline_fails_and_is_cancelled(served: Any) -> None:
    handlers, channel = served
    with pytest.raises(CallFailed) as failed:
        _ = [m async for m in channel.stream("/t.S/Hang", b"", timeout_s=0.3)]
    assert failed.value.name == "DEADLINE_EXCEEDED"
    await asyncio.wait_for(handlers.cancelled.wait(), 10)


async def test_no_server_is_unavailable() -> None:
    from angelia_rpc.ports import free_port

    channel = LeanChannel(f"127.0.0.1:{free_port()}")
    with pytest.raises(CallFailed) as failed:
        await channel.unary("/t.S/Echo", b"", timeout_s=5)
    assert failed.value.name == "UNAVAILABLE"


def test_calls_run_on_uvloop_too() -> None:
    """The servers' event loop: its transports are not asyncio.Transport subclasses."""

    async def scenario() -> tuple[bytes, bytes]:
        ours = Http2GrpcServer(inbound_bytes_max=LIMIT)
        ours.add_generic_rpc_handlers((_handler(Handlers()),))
        port = await ours.start("127.0.0.1", 0)
        channel = LeanChannel(f"127.0.0.1:{port}")
        try:
            echoed = await channel.unary("/t.S/Echo", b"on uvloop", timeout_s=10)
            chunks = [m async for m in channel.stream("/t.S/Chunks", b"3x2", timeout_s=10)]
            return echoed, b"".join(chunks)
        finally:
            await channel.close()
            await ours.stop(1.0)

    assert uvloop.run(scenario()) == (b"on uvloop|None", b"\x00\x00\x00\x01\x01\x01")


class _Transport(asyncio.Transport):
    """Records what the client writes."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return False


def _frames(data: bytes) -> list[http2.Frame]:
    """The frames in ``data`` (after the preface), all of them whole."""
    buffer = bytearray(data)
    found = http2.split_frames(buffer, 1 << 24)
    assert not buffer
    return found


async def test_frames_the_servers_here_never_send_are_read_too() -> None:
    """CONTINUATION, padding, PING, and a request held back by the stream's window."""
    connection = grpc_lean._Connection()
    transport = _Transport()
    connection.connection_made(transport)
    # The server allows 10 bytes per stream: the 20-byte request waits for its window.
    settings = http2.settings_payload([(http2.SETTINGS_INITIAL_WINDOW_SIZE, 10)])
    connection.data_received(http2.frame(http2.SETTINGS, 0, 0, settings))
    stream_id = connection.start((("x-k", "v"),), bytes(15))
    messages = connection.streams[stream_id].messages
    await asyncio.sleep(0)  # the client's writes go out at the end of the turn
    sent = _frames(bytes(transport.written)[len(http2.PREFACE) :])
    data = [payload for kind, _f, sid, payload in sent if kind == http2.DATA]
    assert [len(d) for d in data] == [10]  # 5-byte prefix + 5 of the 15 bytes
    transport.written.clear()
    update = http2.U32.pack(100)
    connection.data_received(
        http2.frame(http2.WINDOW_UPDATE, 0, stream_id, update)
        + http2.frame(http2.PING, 0, 0, b"12345678")
    )
    await asyncio.sleep(0)
    sent = _frames(bytes(transport.written))
    assert (http2.DATA, http2.END_STREAM, stream_id) in [f[:3] for f in sent]
    assert (http2.PING, http2.ACK, 0, b"12345678") in sent
    # The answer: headers split over a CONTINUATION, a padded DATA frame, trailers.
    encoder = hpack.Encoder()
    head = encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
    trailers = encoder.encode([("grpc-status", "0")])
    message = b"answer"
    body = grpc_lean._GRPC_PREFIX.pack(0, len(message)) + message
    padded = bytes([3]) + body + b"\0\0\0"
    connection.data_received(
        http2.frame(http2.HEADERS, 0, stream_id, head[:3])
        + http2.frame(http2.CONTINUATION, http2.END_HEADERS, stream_id, head[3:])
        + http2.frame(http2.DATA, http2.PADDED, stream_id, padded)
        + http2.frame(http2.HEADERS, http2.END_HEADERS | http2.END_STREAM, stream_id, trailers)
    )
    assert stream_id not in connection.streams
    assert [messages.get_nowait() for _ in range(2)] == [b"answer", None]
