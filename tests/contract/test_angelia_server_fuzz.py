"""Random and mutated frames to a running Angelia server over TCP (seeded, counted).

Each input goes on its own connection, after a valid HELLO (seven times in eight),
then the client half-closes. Whatever the bytes: the server closes that connection
(it treats the half-close as the end); when the bytes break the framing or the
HELLO, an ERROR frame naming the cause (PROTOCOL_VIOLATION, FRAME_TOO_LARGE or a
codec/transport refusal) comes first; the server keeps serving a healthy channel;
no task or file descriptor stays behind. ``RIP5_FUZZ_EXAMPLES`` sets the number of
inputs (a long run: ``make fuzz``).
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator

import pytest

from angelia_rpc import AngeliaError, Channel, RpcConfig, Server
from angelia_rpc.framing import ERROR, FrameDecoder, check_hello, decode_json, hello
from tests.contract.angelia_rig import Conformance, ConformanceImpl, Req
from tests.fuzzing import _angelia_frame_seeds, exchange, inputs, open_fds, settled
from tests.waiting import async_wait_until

FUZZ_INPUTS = int(os.environ.get("RIP5_FUZZ_EXAMPLES", "200"))
FRAME_BYTES_MAX = 4096  # the seeds' limit: a mutated length soon passes it
CONFIG = RpcConfig(transport="tcp", codec="msgpack", frame_bytes_max=FRAME_BYTES_MAX)
HELLO_FRAME = hello("msgpack", 1, "tcp", FRAME_BYTES_MAX)


def _refusal(data: bytes) -> int | None:
    """The error code the server must send for ``data`` as a connection's bytes, or None
    when the framing and the HELLO hold (the calls' own errors are then the service's)."""
    decoder = FrameDecoder(FRAME_BYTES_MAX)
    try:
        frames = decoder.feed(data)
    except AngeliaError as error:
        return error.code.number
    if not frames:
        return None
    try:
        _, refusal = check_hello(frames[0], "msgpack", "tcp")
    except AngeliaError as error:
        return error.code.number
    return refusal.code.number if refusal is not None else None


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, Conformance]]:
    server = Server([Conformance.bind(ConformanceImpl())], CONFIG)
    address = await server.start("127.0.0.1:0")
    channel = Channel(address, CONFIG)
    try:
        yield server, Conformance(channel)
    finally:
        await channel.close()
        await server.stop()


async def test_bad_frames_get_an_error_or_a_close_and_the_server_serves_on(
    served: tuple[Server, Conformance],
) -> None:
    server, conformance = served
    port = int(server.address.rsplit(":", 1)[1])
    assert (await conformance.echo(Req(1))).n == 1  # the healthy channel is up
    tasks_before = len(asyncio.all_tasks())
    fds_before = open_fds()
    rng = random.Random("angelia-server:1")
    seeds = _angelia_frame_seeds()
    refused = 0
    for index in range(FUZZ_INPUTS):
        data = inputs(seeds, rng)
        if rng.randrange(8):
            data = HELLO_FRAME + data
        answer = await exchange(port, data)
        code = _refusal(data)
        if code is not None and answer:
            refused += 1
            frames = FrameDecoder(1 << 20).feed(answer)
            errors_sent = [decode_json(f) for f in frames if f.kind == ERROR]
            assert errors_sent, (index, data.hex(), frames)
            assert errors_sent[-1]["code"] == code, (index, data.hex(), errors_sent)
            assert errors_sent[-1]["message"]
        if index % 20 == 19:
            assert (await conformance.echo(Req(index))).n == index
    assert (await conformance.echo(Req(7))).n == 7  # the server serves on
    assert refused > FUZZ_INPUTS // 10  # the inputs reached the refusals
    await async_wait_until(lambda: not server.connections or len(server.connections) <= 1,
                           what="the fuzzed connections to close")  # fmt: skip
    await settled(tasks_before, fds_before)
