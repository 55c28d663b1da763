"""Fault injection between real processes: a server process, a FaultProxy, a client here."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import pytest

from angelia_rpc import AngeliaError, Channel, Peers, RpcConfig
from angelia_rpc.transport.faults import FaultProxy
from protocol import errors
from tests.contract.angelia_rig import Conformance, Req, Resp

pytestmark = pytest.mark.integration


async def start_server(
    transport: str, address: str = "127.0.0.1:0"
) -> tuple[asyncio.subprocess.Process, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.angelia_server", transport, "msgpack", address,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    assert line, "the server process did not start"
    return process, line.decode().strip()


async def stop_server(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
        await process.wait()


@pytest.fixture(params=["tcp", "grpc", "http2"])
async def through_proxy(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[Conformance, FaultProxy]]:
    process, address = await start_server(request.param)
    proxy = FaultProxy(address, seed=3)
    channel = Channel(
        await proxy.start(),
        RpcConfig(transport=request.param, reconnect_backoff_min_ms=5, reconnect_backoff_max_ms=50),
    )
    try:
        yield Conformance(channel), proxy
    finally:
        await channel.close()
        await proxy.stop()
        await stop_server(process)


async def test_blackhole_times_calls_out_until_lifted(
    through_proxy: tuple[Conformance, FaultProxy],
) -> None:
    conformance, proxy = through_proxy
    assert await conformance.echo(Req(1)) == Resp(1)
    proxy.blackhole()
    with pytest.raises(AngeliaError) as caught:
        await conformance.echo(Req(2), timeout_ms=300)
    assert caught.value.code is errors.DEADLINE_EXCEEDED
    proxy.blackhole(False)
    assert await conformance.echo(Req(3), timeout_ms=5_000) == Resp(3)


async def test_delay_beyond_the_deadline_fails_within_it_succeeds(
    through_proxy: tuple[Conformance, FaultProxy],
) -> None:
    conformance, proxy = through_proxy
    assert await conformance.echo(Req(1)) == Resp(1)
    proxy.delay(200)
    with pytest.raises(AngeliaError) as caught:
        await conformance.echo(Req(2), timeout_ms=100)
    assert caught.value.code is errors.DEADLINE_EXCEEDED
    assert await conformance.echo(Req(3), timeout_ms=5_000) == Resp(3)


async def test_cut_fails_open_calls_refuses_new_ones_and_heals(
    through_proxy: tuple[Conformance, FaultProxy],
) -> None:
    conformance, proxy = through_proxy
    stream = conformance.forever(Req(0))
    assert await anext(aiter(stream)) == Resp(0)
    proxy.cut()
    with pytest.raises(AngeliaError) as lost:
        await anext(aiter(stream))
    assert lost.value.code is errors.UNAVAILABLE
    with pytest.raises(AngeliaError) as refused:
        await conformance.echo(Req(1), timeout_ms=300)
    assert refused.value.code is errors.UNAVAILABLE
    proxy.heal()
    assert await conformance.echo(Req(2), timeout_ms=5_000) == Resp(2)


async def test_a_killed_server_process_is_reconnected_after_restart() -> None:
    process, address = await start_server("tcp")
    channel = Channel(address, RpcConfig(reconnect_backoff_min_ms=5, reconnect_backoff_max_ms=50))
    conformance = Conformance(channel)
    try:
        assert await conformance.echo(Req(1)) == Resp(1)
        await stop_server(process)
        with pytest.raises(AngeliaError) as caught:
            await conformance.echo(Req(2), timeout_ms=300)
        assert caught.value.code is errors.UNAVAILABLE
        process, _ = await start_server("tcp", address)
        assert await conformance.echo(Req(3), timeout_ms=10_000) == Resp(3)
    finally:
        await channel.close()
        await stop_server(process)


@pytest.mark.parametrize("transport", ["tcp", "grpc", "http2"])
async def test_a_stub_not_waiting_for_ready_fails_at_once_while_the_peer_is_down(
    transport: str,
) -> None:
    process, address = await start_server(transport)
    peers = Peers(RpcConfig(transport=transport, reconnect_backoff_min_ms=5))
    waits = peers.stub(Conformance, address)
    fails_fast = peers.stub(Conformance, address, wait_for_ready=False)
    try:
        assert await fails_fast.echo(Req(1)) == Resp(1)
        await stop_server(process)
        # The deadlines are far beyond the test's bounds: only failing fast meets them.
        for _ in range(3):  # the first connect attempt, then while backing off
            with pytest.raises(AngeliaError) as down:
                await asyncio.wait_for(fails_fast.echo(Req(2), timeout_ms=600_000), 30)
            assert down.value.code is errors.UNAVAILABLE
            assert address in down.value.message
        with pytest.raises(AngeliaError) as stream_down:
            await asyncio.wait_for(anext(aiter(fails_fast.forever(Req(0), timeout_ms=600_000))), 30)
        assert stream_down.value.code is errors.UNAVAILABLE
        waiting = asyncio.ensure_future(waits.echo(Req(3), timeout_ms=600_000))
        process, _ = await start_server(transport, address)
        assert await asyncio.wait_for(waiting, 30) == Resp(3)  # it waited for the restart
        assert await fails_fast.echo(Req(4)) == Resp(4)
    finally:
        await peers.close()
        await stop_server(process)
