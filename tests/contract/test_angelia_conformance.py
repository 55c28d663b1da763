"""One conformance suite for every Angelia transport x codec pair.

Real sockets on 127.0.0.1 (port 0) for tcp, grpc and http2; the memory
transport runs in-process. Each test states one behaviour every pair must
have.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest

from angelia_rpc import AngeliaError, LocalUsageError, Peers, RemoteError, RpcConfig
from angelia_rpc.codec import codec_named
from angelia_rpc.framing import ERROR, HEADER_BYTES, FrameDecoder, decode_json, encode_frame
from protocol import errors
from tests.contract.angelia_rig import Conformance, Narrow, Req, Resp, Rig
from tests.waiting import async_wait_until

TRANSPORTS = ("tcp", "grpc", "http2", "memory")
CODECS = ("msgpack", "avro", "json")
PAIRS = [(t, c) for t in TRANSPORTS for c in CODECS]
FRAME_BYTES_MAX = 64 * 1024


def config_for(transport: str, codec: str, **changes: object) -> RpcConfig:
    config = RpcConfig(
        transport=transport,
        codec=codec,
        frame_bytes_max=FRAME_BYTES_MAX,
        call_timeout_ms=5_000,
        reconnect_backoff_min_ms=5,
        reconnect_backoff_max_ms=50,
    )
    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]


@pytest.fixture(params=PAIRS, ids=[f"{t}-{c}" for t, c in PAIRS])
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    transport, codec = request.param
    rig = Rig(config_for(transport, codec))
    try:
        yield rig
    finally:
        await rig.close()


async def stub(rig: Rig) -> tuple[Conformance, str]:
    server = await rig.serve()
    return Conformance(rig.channel(server.address)), server.address


async def test_unary_round_trip(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    response = await conformance.echo(Req(41, b"\x00\xffbody", "text é"), timeout_ms=2_000)
    assert response == Resp(41, b"\x00\xffbody")


async def test_server_streaming(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    # more than two flow-control windows, so credit must be granted along the way
    received = [r async for r in conformance.count(Req(700, b"b"), timeout_ms=10_000)]
    assert received == [Resp(i, b"b") for i in range(700)]
    assert [r async for r in conformance.count(Req(0))] == []


async def test_bidirectional_streaming_both_ways(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    call = conformance.double()

    async def produce() -> None:
        for i in range(600):
            await call.send(Req(i))
        call.done_sending()

    producer = asyncio.ensure_future(produce())
    received = [r.n async for r in call]
    await producer
    assert received == [2 * i for i in range(600)]


async def test_bidirectional_interleaved_request_response(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    call = conformance.double(timeout_ms=5_000)
    replies = aiter(call)
    for i in range(5):
        await call.send(Req(i, b"x" * i))
        assert await anext(replies) == Resp(2 * i, b"x" * i)
    call.done_sending()
    assert [r async for r in call] == []


async def test_unary_deadline_expires_and_cancels_the_handler(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    with pytest.raises(AngeliaError) as caught:
        await conformance.hang(Req(0), timeout_ms=100)
    assert caught.value.code is errors.DEADLINE_EXCEEDED
    assert caught.value.retriable
    await async_wait_until(lambda: "hang" in rig.impl.cancelled, 10, "the handler cancelled")
    assert (await conformance.echo(Req(1))).n == 1


async def test_stream_deadline_expires(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    stream = conformance.forever(Req(0), timeout_ms=200)
    with pytest.raises(AngeliaError) as caught:
        async for _ in stream:
            pass
    assert caught.value.code is errors.DEADLINE_EXCEEDED
    await async_wait_until(lambda: "forever" in rig.impl.cancelled, 10, "the stream cancelled")


async def test_cancelling_the_caller_cancels_the_handler(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    call = asyncio.ensure_future(conformance.hang(Req(0), timeout_ms=10_000))
    await async_wait_until(rig.impl.started.is_set, 10, "the handler started")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await async_wait_until(lambda: "hang" in rig.impl.cancelled, 10, "the handler cancelled")
    assert (await conformance.echo(Req(2))).n == 2


async def test_cancelling_a_stream_cancels_the_handler(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    stream = conformance.forever(Req(0))
    assert await anext(aiter(stream)) == Resp(0)
    await async_wait_until(rig.impl.started.is_set, 10, "the stream started")
    stream.cancel()
    await async_wait_until(lambda: "forever" in rig.impl.cancelled, 10, "the stream cancelled")
    with pytest.raises(AngeliaError) as caught:
        await anext(aiter(stream))
    assert caught.value.code is errors.CANCELLED


def largest_body(rig: Rig) -> int:
    """The largest ``body`` whose echo request frame fits in the limit exactly."""
    encode = codec_named(rig.config.codec).encoder(Req)
    overhead = HEADER_BYTES + len(b"conformance.echo")
    low, high = 0, FRAME_BYTES_MAX
    while low < high:
        middle = (low + high + 1) // 2
        if overhead + len(encode(Req(0, b"\x01" * middle))) <= FRAME_BYTES_MAX:
            low = middle
        else:
            high = middle - 1
    return low


async def test_payload_up_to_the_limit_and_one_byte_over(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    body_bytes = largest_body(rig)
    assert body_bytes > FRAME_BYTES_MAX // 2
    response = await conformance.echo(Req(0, b"\x01" * body_bytes))
    assert response.body == b"\x01" * body_bytes
    with pytest.raises(LocalUsageError) as caught:
        await conformance.echo(Req(0, b"\x01" * (body_bytes + 1)))
    assert caught.value.code is errors.FRAME_TOO_LARGE
    assert str(FRAME_BYTES_MAX) in caught.value.message
    # an oversized response is refused by the server, which says so
    with pytest.raises(RemoteError) as remote:
        await conformance.grow(Req(FRAME_BYTES_MAX))
    assert remote.value.code is errors.FRAME_TOO_LARGE
    assert (await conformance.echo(Req(3))).n == 3  # the connection survived both


async def test_many_concurrent_calls_on_one_connection(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    responses = await asyncio.gather(
        *(conformance.echo(Req(i, bytes([i % 256]))) for i in range(300))
    )
    assert [r.n for r in responses] == list(range(300))
    assert all(r.body == bytes([r.n % 256]) for r in responses)


async def test_in_flight_bound_applies_backpressure(rig: Rig) -> None:
    server = await rig.serve(config=dataclasses.replace(rig.config, in_flight_max=3))
    channel = rig.channel(server.address, dataclasses.replace(rig.config, in_flight_max=2))
    conformance = Conformance(channel)
    responses = await asyncio.gather(*(conformance.echo(Req(i)) for i in range(50)))
    assert [r.n for r in responses] == list(range(50))
    connection = await channel.connection(asyncio.get_running_loop().time() + 1)
    assert connection.in_flight == 0


async def test_server_errors_cross_the_wire(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    with pytest.raises(RemoteError) as caught:
        await conformance.fail(Req(1))
    assert caught.value.code is errors.NOT_LEADER
    assert caught.value.retriable
    assert caught.value.refresh_route
    assert caught.value.leader_hint == "127.0.0.9:7702"
    assert "not the leader of group 7" in caught.value.message
    with pytest.raises(RemoteError) as internal:
        await conformance.fail(Req(2))
    assert internal.value.code is errors.INTERNAL
    assert "ValueError: bad n 2" in internal.value.message
    assert not internal.value.retriable
    call = conformance.double()
    await call.send(Req(-1))
    with pytest.raises(RemoteError) as streamed:
        async for _ in call:
            pass
    assert streamed.value.code is errors.NOT_LEADER
    assert streamed.value.leader_hint == "elsewhere:1"
    with pytest.raises(RemoteError) as unknown:
        await Narrow(rig.channels[0]).missing(Req(0))
    assert unknown.value.code is errors.UNKNOWN_METHOD
    assert (await conformance.echo(Req(4))).n == 4


async def test_peer_restart_fails_calls_then_reconnects(rig: Rig) -> None:
    server = await rig.serve()
    address = server.address
    conformance = Conformance(rig.channel(address))
    assert (await conformance.echo(Req(1))).n == 1
    stream = conformance.forever(Req(0))
    assert await anext(aiter(stream)) == Resp(0)
    await server.stop()
    with pytest.raises(AngeliaError) as lost:
        await anext(aiter(stream))
    assert lost.value.code is errors.UNAVAILABLE
    with pytest.raises(AngeliaError) as down:
        await conformance.echo(Req(2), timeout_ms=300)
    assert down.value.code is errors.UNAVAILABLE
    assert down.value.retriable
    await rig.serve(address)
    assert (await conformance.echo(Req(3), timeout_ms=5_000)).n == 3


class RawPeer:
    """A client that writes arbitrary bytes through the transport and records what comes back."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.lost: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.link: object = None

    def link_made(self, link: object) -> None:
        self.link = link

    def data_received(self, data: bytes) -> None:
        self.received += data

    def link_lost(self, reason: str) -> None:
        if not self.lost.done():
            self.lost.set_result(reason)

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass


async def test_garbage_frame_gets_a_clear_error_and_only_that_connection_closes(rig: Rig) -> None:
    conformance, address = await stub(rig)
    assert (await conformance.echo(Req(1))).n == 1  # a healthy connection first
    transport = rig.channels[0].transport
    raw = RawPeer()
    await transport.connect(address, raw, 5)
    raw.link.write(b"\x00\x00\x00\x20" + b"\xee" * 32)  # type: ignore[attr-defined]
    reason = await asyncio.wait_for(raw.lost, 10)
    assert reason
    frames = FrameDecoder(FRAME_BYTES_MAX).feed(bytes(raw.received))
    assert [f.kind for f in frames] == [ERROR]
    document = decode_json(frames[0])
    assert document["code"] == errors.PROTOCOL_VIOLATION.number
    assert "HELLO" in document["message"] or "kind" in document["message"]
    assert (await conformance.echo(Req(2))).n == 2  # the server still serves others


async def test_oversized_frame_from_a_peer_is_refused(rig: Rig) -> None:
    conformance, address = await stub(rig)
    raw = RawPeer()
    await rig.channels[0].transport.connect(address, raw, 5)
    raw.link.write((FRAME_BYTES_MAX + 1).to_bytes(4, "big") + b"\x03" * 64)  # type: ignore[attr-defined]
    await asyncio.wait_for(raw.lost, 10)
    (frame,) = FrameDecoder(FRAME_BYTES_MAX).feed(bytes(raw.received))
    document = decode_json(frame)
    assert document["code"] == errors.FRAME_TOO_LARGE.number
    assert str(FRAME_BYTES_MAX) in document["message"]
    assert (await conformance.echo(Req(5))).n == 5


async def test_codec_mismatch_is_refused_at_connect_time(rig: Rig) -> None:
    server = await rig.serve()
    other = next(c for c in CODECS if c != rig.config.codec)
    conformance = Conformance(
        rig.channel(server.address, dataclasses.replace(rig.config, codec=other))
    )
    with pytest.raises(AngeliaError) as caught:
        await conformance.echo(Req(0), timeout_ms=3_000)
    assert caught.value.code is errors.CODEC_MISMATCH
    assert other in caught.value.message
    assert rig.config.codec in caught.value.message


async def test_request_frame_with_a_foreign_codec_id_is_refused(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    channel = rig.channels[0]
    assert (await conformance.echo(Req(1))).n == 1
    connection = await channel.connection(asyncio.get_running_loop().time() + 1)
    foreign = (connection.codec_id % 3) + 1
    future = asyncio.get_running_loop().create_future()
    connection.unary[999_999] = future
    connection.send_raw(
        encode_frame(
            3,
            999_999,
            b"\x90",
            codec_id=foreign,
            method=b"conformance.echo",
            frame_bytes_max=FRAME_BYTES_MAX,
        )
    )
    with pytest.raises(RemoteError) as caught:
        await asyncio.wait_for(future, 10)
    assert caught.value.code is errors.CODEC_MISMATCH


async def test_peers_reuse_one_connection_per_address(rig: Rig) -> None:
    server = await rig.serve()
    peers = Peers(rig.config, transport=rig.transport())
    try:
        channel = peers.channel(server.address)
        assert peers.channel(server.address) is channel
        first, second = Conformance(channel), Conformance(peers.channel(server.address))
        await asyncio.gather(*(s.echo(Req(i)) for i in range(20) for s in (first, second)))
        assert len(server.connections) == 1
    finally:
        await peers.close()


async def test_peers_keep_one_stub_per_service_and_address(rig: Rig) -> None:
    server = await rig.serve()
    other = await rig.serve("other" if rig.network else "")
    peers = Peers(rig.config, transport=rig.transport())
    try:
        stub = peers.stub(Conformance, server.address)
        assert peers.stub(Conformance, server.address) is stub
        assert peers.stub(Narrow, server.address) is not stub
        elsewhere = peers.stub(Conformance, other.address)
        assert elsewhere is not stub
        assert (await stub.echo(Req(1))).n == (await elsewhere.echo(Req(1))).n
        assert len(server.connections) == len(other.connections) == 1
    finally:
        await peers.close()
    assert peers.stub(Conformance, server.address) is not stub  # closing forgets them


async def test_sending_after_the_server_ended_a_bidi_call_fails(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    call = conformance.double()
    await call.send(Req(-1))  # the handler raises: the call is over
    with pytest.raises(RemoteError):
        async for _ in call:
            pass
    with pytest.raises(RemoteError):
        await call.send(Req(1))
    one = conformance.take_one()
    await one.send(Req(5))
    assert [r async for r in one] == [Resp(5)]  # the server's END: its handler returned

    async def keep_sending() -> None:
        for i in range(1_000):  # more than any credit window: must fail, not block
            await one.send(Req(i))

    with pytest.raises(AngeliaError) as caught:
        await asyncio.wait_for(keep_sending(), 10)
    assert caught.value.code is errors.UNAVAILABLE


async def test_leaving_a_stream_context_cancels_the_call(rig: Rig) -> None:
    conformance, _ = await stub(rig)
    async with conformance.forever(Req(0)) as stream:
        assert await anext(aiter(stream)) == Resp(0)
    await async_wait_until(lambda: "forever" in rig.impl.cancelled, 10, "the stream cancelled")
    async with conformance.count(Req(3)) as finished:
        assert [r.n async for r in finished] == [0, 1, 2]


async def test_streams_and_calls_multiplex_on_one_connection(rig: Rig) -> None:
    conformance, _ = await stub(rig)

    async def drain_stream(n: int) -> list[int]:
        return [r.n async for r in conformance.count(Req(n))]

    async def converse(k: int) -> list[int]:
        call = conformance.double()
        replies = aiter(call)
        got = []
        for i in range(20):
            await call.send(Req(k * 100 + i))
            got.append((await anext(replies)).n)
        call.done_sending()
        return got

    streams = asyncio.gather(*(drain_stream(300 + k) for k in range(6)))
    conversations = asyncio.gather(*(converse(k) for k in range(6)))
    calls = asyncio.gather(*(conformance.echo(Req(k)) for k in range(50)))
    drained, conversed, answered = await asyncio.gather(streams, conversations, calls)
    for k in range(6):
        assert drained[k] == list(range(300 + k))
        assert conversed[k] == [2 * (k * 100 + i) for i in range(20)]
    assert [r.n for r in answered] == list(range(50))
    assert len(rig.servers[0].connections) == 1


async def test_calls_in_flight_fail_unavailable_when_the_server_goes(rig: Rig) -> None:
    server = await rig.serve()
    conformance = Conformance(rig.channel(server.address))
    calls = [asyncio.ensure_future(conformance.hang(Req(i), timeout_ms=10_000)) for i in range(20)]
    await async_wait_until(rig.impl.started.is_set, 10, "a handler started")
    await server.stop()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(o, AngeliaError) for o in outcomes), outcomes
    assert {o.code for o in outcomes if isinstance(o, AngeliaError)} == {errors.UNAVAILABLE}
