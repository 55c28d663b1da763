"""Random and mutated HTTP/2 frame sequences to the broker's own gRPC server over TCP
(seeded, counted).

Each input goes on its own connection after the client preface (seven times in
eight), then the client half-closes. Whatever the bytes: the server closes that
connection; when the bytes break HTTP/2 (the pure connection fed the same bytes
raises ``FrameError``) and the server answered, a GOAWAY carrying that error code is
among its frames; a healthy channel is served throughout; no task or file descriptor
stays behind. ``RIP5_FUZZ_EXAMPLES`` sets the number of inputs (``make fuzz``).
"""

from __future__ import annotations

import asyncio
import os
import random

import grpc
import pytest

from broker.grpc import http2 as server_http2
from broker.grpc.server import GrpcEndpoint
from protocol import http2
from protocol.http2_connection import Http2Connection
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from tests.contract import test_bad_requests as bad_requests
from tests.fuzzing import _http2_seeds, exchange, inputs, open_fds, settled

FUZZ_INPUTS = int(os.environ.get("RIP5_FUZZ_EXAMPLES", "200"))
ROUTE = spb.QueryRouteRequest(topic=pb.Resource(name="normal")).SerializeToString()

# The bad-requests suite's endpoint (in-memory ports, topic ``normal``), on the own server.
endpoint = bad_requests.endpoint


@pytest.fixture
def server_kind() -> str:
    return "h2"


def _goaway_code(data: bytes) -> int | None:
    """The error code the server must send for ``data`` (after the preface), or None
    when the bytes keep to HTTP/2."""
    connection = Http2Connection(
        client_side=False,
        window_bytes=server_http2.WINDOW_BYTES,
        frame_bytes_max=server_http2.FRAME_BYTES_MAX,
        max_concurrent_streams=server_http2.MAX_CONCURRENT_STREAMS,
        header_block_bytes_max=server_http2.HEADER_BLOCK_BYTES_MAX,
        header_list_bytes_max=server_http2.HEADER_BLOCK_BYTES_MAX,
    )
    connection.initiate()
    try:
        connection.receive_data(data)
    except http2.FrameError as error:
        return error.code
    return None


async def test_bad_frames_get_a_goaway_or_a_close_and_the_server_serves_on(
    endpoint: GrpcEndpoint,
) -> None:
    assert endpoint.port is not None
    async with grpc.aio.insecure_channel(f"127.0.0.1:{endpoint.port}") as channel:
        route = channel.unary_unary(f"/{bad_requests.SERVICE}/QueryRoute")

        async def serves() -> None:
            answer = spb.QueryRouteResponse.FromString(
                await route(ROUTE, metadata=bad_requests.CLIENT, timeout=10)
            )
            assert answer.status.code == pb.OK

        await serves()  # the healthy channel is up
        tasks_before = len(asyncio.all_tasks())
        fds_before = open_fds()
        rng = random.Random("grpc-http2:1")
        seeds = _http2_seeds()
        refused = 0
        for index in range(FUZZ_INPUTS):
            data = inputs(seeds, rng)
            if rng.randrange(8):
                data = http2.PREFACE + data
            answer = await exchange(endpoint.port, data)
            code = _goaway_code(data)
            if code is not None and answer:
                buffer = bytearray(answer)
                frames = http2.split_frames(buffer, http2.FRAME_BYTES_LIMIT)
                goaways = [f for f in frames if f[0] == http2.GOAWAY]
                assert goaways, (index, data.hex(), frames)
                assert http2.U32.unpack_from(goaways[-1][3], 4)[0] == code, (index, data.hex())
                refused += 1
            if index % 20 == 19:
                await serves()
        await serves()  # the server serves on
        assert refused > FUZZ_INPUTS // 10  # the inputs reached the protocol errors
        await settled(tasks_before, fds_before)
