"""Three real raft host processes, 64 groups: SIGKILL a leader, lose no acknowledged entry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from angelia_rpc import AngeliaError
from rip5.bench.raft_cluster import HostSpec, LocalCluster
from tests.waiting import async_wait_until

pytestmark = pytest.mark.integration

GROUPS = 64


async def _writer(
    cluster: LocalCluster,
    group: int,
    leaders: dict[int, int],
    acked: list[bytes],
    stop: asyncio.Event,
) -> None:
    """Propose batches to ``group``'s leader until stopped, recording what was acknowledged."""
    seq = 0
    while not stop.is_set():
        items = [b"g%03d-%06d" % (group, seq + i) for i in range(8)]
        seq += 8
        lead = leaders.get(group, 0)
        if lead == 0 or lead not in cluster.processes:
            await asyncio.sleep(0.02)
            continue
        try:
            await cluster.propose(lead, group, items)
        except AngeliaError as exc:
            if exc.leader_hint.isdigit() and int(exc.leader_hint) in cluster.processes:
                leaders[group] = int(exc.leader_hint)
            else:
                await asyncio.sleep(0.02)
            continue
        acked.extend(items)


async def test_sigkill_the_leader_loses_no_acknowledged_entry(tmp_path: Path) -> None:
    spec = HostSpec(
        groups=GROUPS,
        keep_values=True,
        snapshot_entries=200,
        keep_entries=50,
        extra_args=["--segment-mb", "4"],
    )
    cluster = LocalCluster(tmp_path, spec)
    await cluster.start()
    try:
        leaders = await cluster.wait_all_led()
        target = 1
        victim = leaders[target]
        watched = [target, *[g for g in range(2, GROUPS + 1) if leaders[g] == victim][:3]]
        watched += [g for g in range(2, GROUPS + 1) if leaders[g] != victim][:2]
        acked: dict[int, list[bytes]] = {g: [] for g in watched}
        stop = asyncio.Event()
        writers = [
            asyncio.create_task(_writer(cluster, g, leaders, acked[g], stop)) for g in watched
        ]
        await async_wait_until(
            lambda: all(len(v) >= 300 for v in acked.values()),
            timeout_s=60,
            what="every writer acknowledged entries (with snapshots taken)",
        )

        cluster.kill(victim)
        killed_at = time.monotonic()
        survivors = [n for n in sorted(cluster.addresses) if n != victim]

        async def new_leader() -> int:
            agreed = await cluster.leaders(survivors)
            return agreed.get(target, 0)

        lead = 0
        while lead == 0:
            assert time.monotonic() - killed_at < 30, "no new leader within 30 s"
            lead = await new_leader()
            await asyncio.sleep(0.02)
        assert lead != victim
        leaders[target] = lead
        for g in watched:
            if leaders[g] == victim:
                leaders[g] = 0
        # Writers keep going through the new leaders; then stop them.
        before = {g: len(v) for g, v in acked.items()}
        all_led = await cluster.wait_all_led(survivors, timeout_s=60)
        leaders.update({g: all_led[g] for g in watched})
        await async_wait_until(
            lambda: all(len(acked[g]) > before[g] for g in watched),
            timeout_s=60,
            what="writes acknowledged after the failover",
        )
        stop.set()
        await asyncio.gather(*writers)

        for g in watched:
            await wait_for_async(
                _holds(cluster, survivors, g, acked[g]),
                timeout_s=30,
                what=f"group {g}: every acknowledged entry on both survivors",
            )
            first, second = [(await cluster.read(n, g, with_values=True)).values for n in survivors]
            shorter = min(len(first), len(second))
            assert first[:shorter] == second[:shorter], f"group {g}: the survivors diverged"

        # The killed node comes back from its torn WAL and catches up.
        await cluster.start_node(victim)
        reference = await cluster.read(lead, target)
        await wait_for_async(
            lambda: _applied_at_least(cluster, victim, target, reference.count),
            timeout_s=60,
            what="the restarted node catches up",
        )
        restarted = await cluster.read(victim, target, with_values=True)
        survivor = await cluster.read(lead, target, with_values=True)
        assert restarted.values[: reference.count] == survivor.values[: reference.count]
    finally:
        await cluster.stop()


async def _applied_at_least(cluster: LocalCluster, node: int, group: int, count: int) -> bool:
    try:
        return (await cluster.read(node, group)).count >= count
    except AngeliaError:
        return False


def _holds(
    cluster: LocalCluster, nodes: list[int], group: int, want: list[bytes]
) -> Callable[[], Awaitable[bool]]:
    """A condition: every node in ``nodes`` applied every value of ``want``."""

    async def check() -> bool:
        reads = [await cluster.read(n, group, with_values=True) for n in nodes]
        return all(set(want) <= set(r.values) for r in reads)

    return check


async def wait_for_async(
    condition: Callable[[], Awaitable[bool]], timeout_s: float, what: str
) -> None:
    """Wait for an async condition with a deadline."""
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)
