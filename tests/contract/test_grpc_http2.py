"""The broker's gRPC server (broker.grpc.http2) against grpc's own client (grpc.aio, C core).

Methods are registered as grpc's generated code registers them (generic
handlers of bytes in, bytes out), so these tests speak the gRPC wire
protocol exactly as the official clients do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import pytest

from broker.grpc import http2
from broker.grpc.http2 import Http2GrpcServer

LIMIT = 8 * 1024 * 1024
BIG = 40 * 1024 * 1024  # beyond every flow-control window, both ways


class Handlers:
    """Echo-like methods, and what happened to the calls."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()
        self.started = asyncio.Event()
        self.port = 0  # where the server listens

    async def echo(self, request: bytes, context: Any) -> bytes:
        metadata = dict(context.invocation_metadata())
        remaining = context.time_remaining()
        return b"|".join(
            [
                request,
                str(metadata.get("x-mq-client-id")).encode(),
                metadata.get("trace-bin", b"-"),
                b"deadline" if remaining is not None and 0 < remaining <= 30 else b"none",
            ]
        )

    async def count(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        for i in range(int(request)):
            yield b"%d" % i

    async def chunks(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        size, count = (int(v) for v in request.split(b"x"))
        for i in range(count):
            yield bytes([i % 256]) * size

    async def size(self, request: bytes, context: Any) -> bytes:
        return b"%d" % len(request)

    async def chat(self, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request.upper()

    async def fail(self, request: bytes, context: Any) -> bytes:
        raise ValueError("the handler broke")

    async def hang(self, request: bytes, context: Any) -> bytes:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return b""

    async def hang_stream(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        yield b"first"
        await self.hang(request, context)


@pytest.fixture
async def served() -> AsyncIterator[tuple[Handlers, grpc.aio.Channel]]:
    handlers = Handlers()
    server = Http2GrpcServer(inbound_bytes_max=LIMIT)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "t.S",
                {
                    "Echo": grpc.unary_unary_rpc_method_handler(handlers.echo),
                    "Fail": grpc.unary_unary_rpc_method_handler(handlers.fail),
                    "Hang": grpc.unary_unary_rpc_method_handler(handlers.hang),
                    "Size": grpc.unary_unary_rpc_method_handler(handlers.size),
                    "Count": grpc.unary_stream_rpc_method_handler(handlers.count),
                    "HangStream": grpc.unary_stream_rpc_method_handler(handlers.hang_stream),
                    "Chat": grpc.stream_stream_rpc_method_handler(handlers.chat),
                },
            ),
        )
    )
    server.add_registered_method_handlers(
        "t.R", {"Chunks": grpc.unary_stream_rpc_method_handler(handlers.chunks)}
    )
    port = handlers.port = await server.start("127.0.0.1", 0)
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options)
    try:
        yield handlers, channel
    finally:
        await channel.close()
        await server.stop(1.0)


async def test_a_unary_call_sees_its_metadata_and_deadline(served: Any) -> None:
    _handlers, channel = served
    echo = channel.unary_unary("/t.S/Echo")
    metadata = (("x-mq-client-id", "client-1"), ("trace-bin", b"\x00\xff"))
    assert await echo(b"hi", metadata=metadata, timeout=10) == b"hi|client-1|\x00\xff|deadline"
    assert await echo(b"", metadata=metadata) == b"|client-1|\x00\xff|none"


async def test_a_stream_arrives_whole_in_order_and_in_few_writes(
    served: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _handlers, channel = served
    writes: list[int] = []

    def counted(self: Any) -> None:  # _Connection._flush, counting the socket writes
        out, self._out = self._out, []
        if out:
            data = b"".join(out)
            writes.append(len(data))
            self._transport.write(data)

    monkeypatch.setattr(http2._Connection, "_flush", counted)
    count = channel.unary_stream("/t.S/Count")
    assert [r async for r in count(b"1")] == [b"0"]  # the connection is set up
    writes.clear()
    assert [r async for r in count(b"34")] == [b"%d" % i for i in range(34)]
    # Headers, 34 messages and trailers in one write, not one write each (grpc.aio's
    # way); besides it at most an answer to the client's ping.
    assert len(writes) <= 2, writes
    assert max(writes) > 34 * 5, writes


async def test_large_messages_pass_every_flow_control_window(served: Any) -> None:
    _handlers, channel = served
    chunks = channel.unary_stream("/t.R/Chunks")
    got = [r async for r in chunks(b"%dx4" % (BIG // 4))]
    assert [len(r) for r in got] == [BIG // 4] * 4
    assert [r[0] for r in got] == [0, 1, 2, 3]
    size = channel.unary_unary("/t.S/Size")
    assert await size(b"x" * (LIMIT - 1)) == b"%d" % (LIMIT - 1)


async def test_a_bidirectional_stream_answers_as_it_goes(served: Any) -> None:
    _handlers, channel = served
    call = channel.stream_stream("/t.S/Chat")()
    await call.write(b"one")
    assert await call.read() == b"ONE"  # answered before the client half-closes
    await call.write(b"two")
    await call.done_writing()
    assert await call.read() == b"TWO"
    assert await call.code() is grpc.StatusCode.OK


@pytest.mark.parametrize(
    ("path", "request_bytes", "code", "text"),
    [
        ("/t.S/Nope", b"", grpc.StatusCode.UNIMPLEMENTED, "unknown method /t.S/Nope"),
        ("/t.S/Fail", b"", grpc.StatusCode.UNKNOWN, "ValueError: the handler broke"),
        ("/t.S/Size", b"x" * (LIMIT + 1), grpc.StatusCode.RESOURCE_EXHAUSTED, "over the limit"),
    ],
)
async def test_bad_calls_get_a_status_and_the_connection_serves_on(
    served: Any, path: str, request_bytes: bytes, code: grpc.StatusCode, text: str
) -> None:
    _handlers, channel = served
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await channel.unary_unary(path)(request_bytes, timeout=10)
    assert caught.value.code() is code
    assert text in (caught.value.details() or "")
    assert await channel.unary_unary("/t.S/Size")(b"abc", timeout=10) == b"3"


async def test_a_call_past_its_deadline_is_cancelled(served: Any) -> None:
    handlers, channel = served
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await channel.unary_unary("/t.S/Hang")(b"", timeout=0.3)
    assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.wait_for(handlers.cancelled.wait(), 10)


async def test_a_stream_the_client_cancels_cancels_its_handler(served: Any) -> None:
    handlers, channel = served
    call = channel.unary_stream("/t.S/HangStream")(b"")
    assert await call.read() == b"first"
    await asyncio.wait_for(handlers.started.wait(), 10)
    call.cancel()
    await asyncio.wait_for(handlers.cancelled.wait(), 10)
    assert await channel.unary_unary("/t.S/Size")(b"ab", timeout=10) == b"2"


async def test_many_calls_at_once_on_one_connection_all_complete(served: Any) -> None:
    _handlers, channel = served
    size = channel.unary_unary("/t.S/Size")
    count = channel.unary_stream("/t.S/Count")

    async def streamed(n: int) -> list[bytes]:
        return [r async for r in count(b"%d" % n)]

    sizes = await asyncio.gather(*(size(b"x" * n, timeout=30) for n in range(300)))
    assert sizes == [b"%d" % n for n in range(300)]
    streams = await asyncio.gather(*(streamed(n % 40) for n in range(200)))
    assert [len(s) for s in streams] == [n % 40 for n in range(200)]


async def test_bytes_that_are_not_http2_close_that_connection_only(served: Any) -> None:
    handlers, channel = served
    reader, writer = await asyncio.open_connection("127.0.0.1", handlers.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(64))
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 10) is not None  # the server hangs up
    writer.close()
    assert await channel.unary_unary("/t.S/Size")(b"abcd", timeout=10) == b"4"


async def test_stopping_refuses_new_calls_and_lets_calls_in_flight_finish() -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(request: bytes, context: Any) -> bytes:
        started.set()
        await release.wait()
        return b"done"

    server = Http2GrpcServer(inbound_bytes_max=LIMIT)
    server.add_registered_method_handlers(
        "t.S", {"Slow": grpc.unary_unary_rpc_method_handler(slow)}
    )
    port = await server.start("127.0.0.1", 0)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = asyncio.ensure_future(channel.unary_unary("/t.S/Slow")(b"", timeout=30))
        await asyncio.wait_for(started.wait(), 10)
        stopping = asyncio.ensure_future(server.stop(30))
        await asyncio.sleep(0)
        with pytest.raises(grpc.aio.AioRpcError) as refused:  # no new call while stopping
            await channel.unary_unary("/t.S/Slow")(b"", timeout=30)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        # The stop's GOAWAY reached the client first (it tried a new connection, which
        # nothing accepts), or the call crossed it and was refused naming the stop
        # (test_grpc_conformance makes that crossing happen on purpose).
        details = refused.value.details() or ""
        assert "stopping" in details or "Connection refused" in details, details
        release.set()
        assert await call == b"done"
        await asyncio.wait_for(stopping, 30)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_a_header_block_h2_would_refuse_gets_a_status_and_the_connection_serves_on(
    served: Any,
) -> None:
    """The server reads request headers itself, without HTTP/2's header checks: a
    block that breaks them (h2 would refuse it) gets a gRPC status, not a torn
    connection."""
    handlers, _channel = served
    client = h2.connection.H2Connection(
        h2.config.H2Configuration(
            client_side=True, header_encoding=None, validate_outbound_headers=False
        )
    )
    client.initiate_connection()
    reader, writer = await asyncio.open_connection("127.0.0.1", handlers.port)
    base = [(b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"x")]
    odd = [*base, (b"X-Upper", b"1"), (b"connection", b"keep-alive")]  # no :path
    client.send_headers(1, odd, end_stream=True)
    message = b"abc"
    good = [*base, (b":path", b"/t.S/Size"), (b"content-type", b"application/grpc")]
    client.send_headers(3, good)
    client.send_data(3, b"\0" + len(message).to_bytes(4, "big") + message, end_stream=True)
    writer.write(client.data_to_send())
    statuses: dict[int, bytes] = {}
    answers: dict[int, bytes] = {}
    while len(statuses) < 2:
        data = await asyncio.wait_for(reader.read(65536), 10)
        assert data, "the server closed the connection"
        for event in client.receive_data(data):
            if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                status = dict(event.headers).get(b"grpc-status")
                if status is not None:
                    statuses[event.stream_id] = status
            elif isinstance(event, h2.events.DataReceived):
                answers[event.stream_id] = answers.get(event.stream_id, b"") + event.data
                client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        writer.write(client.data_to_send())
    writer.close()
    assert statuses == {1: str(grpc.StatusCode.UNIMPLEMENTED.value[0]).encode(), 3: b"0"}
    assert answers[3][5:] == b"3"
