"""The fault injectors: each one starts a fault on a cluster and heals it.

``inject(step)`` begins the fault of a :class:`~rip5.chaos.schedule.FaultStep`
and returns what heals it; the runner heals it ``hold_ms`` later. What
each kind does is in :data:`rip5.chaos.schedule.KINDS`.

SHELL: signals, files, the proxies.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from raft.wal.spares import SEGMENT_SUFFIX, SPARE_PREFIX
from rip5.chaos.cluster import ChaosCluster
from rip5.chaos.schedule import FaultStep, partition_sides

DELAY_MS = (100.0, 50.0)
LOSS_RATE = 0.8
CLOCK_JUMP_MS = 60_000
SYNC_DELAY_MS = 200
CORRUPT_BYTES = 16


@dataclass(frozen=True)
class Injected:
    """A fault that began: on which process(es), with what detail, and how to heal it."""

    target: str
    detail: str
    heal: Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


def _signal(pid: int | None, signum: int) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def sealed_segments(wal_dir: Path) -> list[Path]:
    """The WAL segments of a node that are no longer written (all but the newest)."""
    segments = sorted(
        p
        for p in wal_dir.glob(f"*{SEGMENT_SUFFIX}")
        if p.is_file() and not p.name.startswith(SPARE_PREFIX)
    )
    return segments[:-1]


def flip_bytes(path: Path, seed: int, count: int = CORRUPT_BYTES) -> int:
    """Invert ``count`` bytes in the middle half of ``path``; the offset of the first."""
    size = path.stat().st_size
    offset = size // 4 + (seed * 7919) % max(1, size // 2 - count)
    with open(path, "r+b") as handle:
        handle.seek(offset)
        data = handle.read(count)
        handle.seek(offset)
        handle.write(bytes(b ^ 0xFF for b in data))
        handle.flush()
        os.fsync(handle.fileno())
    return offset


async def inject(cluster: ChaosCluster, step: FaultStep, seed: int) -> Injected:
    """Begin ``step``'s fault on ``cluster``; the returned ``heal`` ends it."""
    target = step.target
    if target == "leader":
        target = await cluster.leader_heavy_storage()
    kind = step.kind
    if kind == "kill":
        _signal(cluster.pid_of(target), signal.SIGKILL)
        return Injected(target, "SIGKILL; the supervisor starts it again", _nothing)
    if kind == "pause":
        pid = cluster.pid_of(target)
        _signal(pid, signal.SIGSTOP)

        async def resume() -> None:
            _signal(pid, signal.SIGCONT)

        return Injected(target, f"SIGSTOP pid {pid}", resume)
    if kind == "partition":
        storage = cluster.storage_nodes
        others = [p for p in cluster.processes if p not in storage]
        pairs = partition_sides(target, storage, others)
        for a, b in pairs:
            cluster.faults.cut(a, b)

        async def rejoin() -> None:
            cluster.faults.heal()

        shown = target if target not in ("one",) else storage[0]
        return Injected(shown, f"{len(pairs)} links cut", rejoin)
    if kind in ("delay", "loss"):
        if kind == "delay":
            cluster.faults.delays_ms[target] = DELAY_MS
        else:
            cluster.faults.loss_rates[target] = LOSS_RATE

        async def clear() -> None:
            cluster.faults.delays_ms.pop(target, None)
            cluster.faults.loss_rates.pop(target, None)

        detail = f"{DELAY_MS[0]:.0f}+-{DELAY_MS[1]:.0f} ms" if kind == "delay" else f"p={LOSS_RATE}"
        return Injected(target, detail, clear)
    if kind in ("clock-jump", "disk-slow", "disk-full"):
        settings: dict[str, object] = {  # what storage_node/fault_injection.py reads
            "clock-jump": {"clock_offset_ms": CLOCK_JUMP_MS},
            "disk-slow": {"wal_sync_delay_ms": SYNC_DELAY_MS},
            "disk-full": {"wal_write_error": "ENOSPC"},
        }[kind]  # type: ignore[assignment]
        cluster.write_fault_file(target, settings)

        async def restore() -> None:
            cluster.write_fault_file(target, {})

        return Injected(target, str(settings), restore)
    if kind == "corrupt":
        return await _corrupt(cluster, target, seed)
    raise ValueError(f"unknown fault kind {kind!r}")


async def _corrupt(cluster: ChaosCluster, target: str, seed: int) -> Injected:
    """Stop ``target`` (SIGSTOP: nothing more reaches its disk), flip bytes in a sealed
    segment, then SIGKILL it; its supervisor starts it again on the damaged WAL."""
    pid = cluster.pid_of(target)
    _signal(pid, signal.SIGSTOP)
    # storage_node/server.py opens its LogStore at <data>/wal, which keeps segments in wal/.
    wal_dir = cluster.data_dir_of(target) / "wal" / "wal"
    sealed = sealed_segments(wal_dir)
    if sealed:
        victim = sealed[seed % len(sealed)]
        offset = flip_bytes(victim, seed)
        detail = f"{CORRUPT_BYTES} bytes flipped at {offset} in sealed segment {victim.name}"
    else:
        detail = "no sealed segment yet: nothing flipped, the node was only restarted"
    _signal(pid, signal.SIGKILL)
    _signal(pid, signal.SIGCONT)
    return Injected(target, detail, _nothing)
