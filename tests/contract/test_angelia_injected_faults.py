"""Seeded faults inside one process: the memory network and the FaultyTransport wrapper."""

from __future__ import annotations

import asyncio

import pytest

from angelia_rpc import AngeliaError, Channel, RpcConfig, Server
from angelia_rpc.transport.faults import FaultPlan, FaultyTransport
from angelia_rpc.transport.memory import Faults, MemoryNetwork
from angelia_rpc.transport.tcp import TcpTransport
from protocol import errors
from tests.contract.angelia_rig import Conformance, ConformanceImpl, Req, Resp
from tests.waiting import async_wait_until

CONFIG = RpcConfig(transport="memory", reconnect_backoff_min_ms=5, reconnect_backoff_max_ms=20)


async def outcomes_with_drops(seed: int) -> list[bool]:
    network = MemoryNetwork(seed=seed, faults=Faults(drop_rate=0.3))
    server = Server([Conformance.bind(ConformanceImpl())], CONFIG, transport=network.transport("s"))
    await server.start("s")
    network.faults.drop_rate = 0.0
    channel = Channel("s", CONFIG, transport=network.transport("c"))
    conformance = Conformance(channel)
    await conformance.echo(Req(0))  # connect without losses
    network.faults.drop_rate = 0.3
    outcomes = []
    codes = set()
    for i in range(40):
        try:
            outcomes.append(await conformance.echo(Req(i), timeout_ms=30) == Resp(i))
        except AngeliaError as exc:
            codes.add(exc.code)
            outcomes.append(False)
    assert codes <= {errors.DEADLINE_EXCEEDED}
    await channel.close()
    await server.stop()
    return outcomes


async def test_seeded_drops_replay_exactly() -> None:
    first = await outcomes_with_drops(11)
    assert 5 < first.count(False) < 35, first
    assert await outcomes_with_drops(11) == first
    assert await outcomes_with_drops(12) != first


async def test_memory_partition_heal_and_cut() -> None:
    network = MemoryNetwork(seed=1)
    server = Server([Conformance.bind(ConformanceImpl())], CONFIG, transport=network.transport("s"))
    await server.start("s")
    conformance = Conformance(Channel("s", CONFIG, transport=network.transport("c")))
    assert await conformance.echo(Req(1)) == Resp(1)
    network.partition("c", "s")
    with pytest.raises(AngeliaError) as caught:
        await conformance.echo(Req(2), timeout_ms=50)
    assert caught.value.code is errors.DEADLINE_EXCEEDED
    network.heal("c", "s")
    assert await conformance.echo(Req(3)) == Resp(3)
    stream = conformance.forever(Req(0))
    assert await anext(aiter(stream)) == Resp(0)
    network.cut("c", "s")
    with pytest.raises(AngeliaError) as lost:
        await anext(aiter(stream))
    assert lost.value.code is errors.UNAVAILABLE
    assert await conformance.echo(Req(4)) == Resp(4)  # reconnects
    await server.stop()


async def test_memory_delays_keep_order() -> None:
    network = MemoryNetwork(seed=5, faults=Faults(delay_ms_min=0, delay_ms_max=5))
    server = Server([Conformance.bind(ConformanceImpl())], CONFIG, transport=network.transport("s"))
    await server.start("s")
    conformance = Conformance(Channel("s", CONFIG, transport=network.transport("c")))
    assert [r.n async for r in conformance.count(Req(300))] == list(range(300))
    await server.stop()


async def test_faulty_transport_wraps_a_real_transport() -> None:
    plan = FaultPlan(seed=2)
    faulty = FaultyTransport(TcpTransport(), plan)
    server = Server([Conformance.bind(ConformanceImpl())], RpcConfig())
    address = await server.start()
    config = RpcConfig(reconnect_backoff_min_ms=5, reconnect_backoff_max_ms=20)
    conformance = Conformance(Channel(address, config, transport=faulty))
    assert await conformance.echo(Req(1)) == Resp(1)
    plan.drop_rate = 1.0
    with pytest.raises(AngeliaError) as dropped:
        await conformance.echo(Req(2), timeout_ms=50)
    assert dropped.value.code is errors.DEADLINE_EXCEEDED
    plan.drop_rate = 0.0
    plan.delay_ms_min = plan.delay_ms_max = 100
    with pytest.raises(AngeliaError) as delayed:
        await conformance.echo(Req(3), timeout_ms=30)
    assert delayed.value.code is errors.DEADLINE_EXCEEDED
    plan.delay_ms_min = plan.delay_ms_max = 0
    assert await conformance.echo(Req(4), timeout_ms=5_000) == Resp(4)
    plan.refuse_new = True
    faulty.cut()
    await async_wait_until(lambda: not faulty.links, 10, "the cut links to close")
    with pytest.raises(AngeliaError) as refused:
        await conformance.echo(Req(5), timeout_ms=100)
    assert refused.value.code is errors.UNAVAILABLE
    assert "refuses" in refused.value.message
    plan.refuse_new = False
    assert await conformance.echo(Req(6), timeout_ms=5_000) == Resp(6)
    await server.stop()


async def test_a_short_deadline_does_not_wait_for_a_longer_connect_attempt() -> None:
    network = MemoryNetwork(seed=1)
    server = Server([Conformance.bind(ConformanceImpl())], CONFIG, transport=network.transport("s"))
    await server.start("s")
    network.partition("c", "s")
    channel = Channel("s", CONFIG, transport=network.transport("c"))
    conformance = Conformance(channel)
    patient = asyncio.ensure_future(conformance.echo(Req(1), timeout_ms=1_000))
    await async_wait_until(lambda: channel._connecting is not None, 10, "a connect attempt")
    with pytest.raises(AngeliaError) as hasty:
        await conformance.echo(Req(2), timeout_ms=50)
    assert hasty.value.code is errors.UNAVAILABLE
    assert "within the deadline" in hasty.value.message
    assert not patient.done()  # the short call gave up on its own deadline, not the attempt's
    network.heal("c", "s")
    with pytest.raises(AngeliaError) as slow:
        await patient  # its attempt began while partitioned and ran to its deadline
    assert slow.value.code is errors.UNAVAILABLE
    assert await conformance.echo(Req(3)) == Resp(3)
    await server.stop()
