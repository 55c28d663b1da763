"""A standalone raft host: one node of a cluster hosting many groups, for tests and benches.

Run one per node::

    python -m rip5.bench.raft_host --id 1 \\
        --peers 1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103 \\
        --groups 64 --data-dir ./data/n1

Every group is replicated on every node in ``--peers``. Each group's state
machine is an append-only log (:class:`AppendLog`). The node serves, on its
one Angelia address, the raft streams of its peers and :class:`RaftHostService`
for clients: ``propose`` (a batch of entries to one group, answered once all
are applied on this node, the group's leader), ``read`` and ``status``.

The process prints ``READY <address>`` once it serves, and stops cleanly on
SIGTERM or SIGINT. SIGKILL is what the failover tests use.

SHELL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import crc32c
import msgpack
import uvloop

from angelia_rpc import CallContext, RpcConfig, Server, Service, Unary
from raft.errors import RaftError
from raft.host.angelia_transport import AngeliaTransport
from raft.host.driver import Driver, DriverOptions
from raft.types import Entry, Snapshot
from raft.wal.logstore import LogStore


@dataclass(frozen=True, slots=True)
class ProposeRequest:
    """Entries to append to one group, each its own raft entry."""

    group: int
    items: list[bytes]


@dataclass(frozen=True, slots=True)
class ProposeResponse:
    """The log index of each item, in order."""

    indices: list[int]


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """What this node has applied for ``group``; ``values`` only if kept."""

    group: int
    with_values: bool = False


@dataclass(frozen=True, slots=True)
class ReadResponse:
    """``count`` entries applied, their running CRC32C, and the values when asked and kept."""

    count: int
    digest: int
    values: list[bytes]


@dataclass(frozen=True, slots=True)
class StatusRequest:
    """Ask for the node's view of every group."""

    verbose: bool = False


@dataclass(frozen=True, slots=True)
class StatusResponse:
    """``leaders[i]`` is the leader this node knows for group i + 1 (0: none); ``led`` the
    groups this node leads."""

    node_id: int
    leaders: list[int]
    led: list[int]
    rounds: int
    syncs: int


class RaftHostService(Service, name="raft_host"):
    """The client API of a raft host process."""

    propose = Unary(ProposeRequest, ProposeResponse)
    read = Unary(ReadRequest, ReadResponse)
    status = Unary(StatusRequest, StatusResponse)


class AppendLog:
    """A group's state machine: the count and running CRC32C of the data applied.

    With ``keep_values`` it also keeps every value (for tests that check them).
    """

    def __init__(self, keep_values: bool) -> None:
        """An empty log."""
        self.keep_values = keep_values
        self.count = 0
        self.digest = 0
        self.values: list[bytes] = []

    def apply(self, entry: Entry) -> object:
        """Append one entry; the proposer gets its index."""
        self.count += 1
        self.digest = crc32c.crc32c(entry.data, self.digest)
        if self.keep_values:
            self.values.append(entry.data)
        return entry.index

    def restore(self, snapshot: Snapshot) -> None:
        """Take the snapshot's state."""
        self.count, self.digest, values = msgpack.unpackb(snapshot.data)
        self.values = list(values)

    def snapshot_data(self) -> bytes:
        """The state as msgpack [count, digest, values]."""
        packed: bytes = msgpack.packb([self.count, self.digest, self.values])
        return packed


class _HostImpl:
    def __init__(self, driver: Driver, machines: dict[int, AppendLog], groups: int) -> None:
        self.driver = driver
        self.machines = machines
        self.groups = groups

    async def propose(self, request: ProposeRequest, context: CallContext) -> ProposeResponse:
        results = await self.driver.propose_many_nowait(request.group, request.items)
        return ProposeResponse(cast(list[int], results))

    async def read(self, request: ReadRequest, context: CallContext) -> ReadResponse:
        machine = self.machines.get(request.group)
        if machine is None:
            raise RaftError(f"group {request.group} is not hosted here")
        values = machine.values if request.with_values else []
        return ReadResponse(machine.count, machine.digest, values)

    async def status(self, request: StatusRequest, context: CallContext) -> StatusResponse:
        leaders = [self.driver.leader_of(g) for g in range(1, self.groups + 1)]
        led = [g for g in range(1, self.groups + 1) if self.driver.host.node(g).is_leader()]
        return StatusResponse(
            self.driver.node_id, leaders, led, self.driver.rounds, self.driver.syncs
        )


async def _debug(driver: Driver) -> None:
    last = (0, 0, 0.0)
    t = time.perf_counter()
    while True:
        await asyncio.sleep(1)
        now = time.perf_counter()
        cur = (driver.rounds, driver.syncs, driver.sync_s)
        print(
            f"node {driver.node_id}: rounds/s {cur[0] - last[0]} syncs/s {cur[1] - last[1]} "
            f"sync busy {(cur[2] - last[2]) / (now - t):.0%} "
            f"segments {len(driver.store.segment_seqs())} compactions {driver.compactions}",
            file=sys.stderr,
            flush=True,
        )
        last, t = cur, now


def parse_peers(text: str) -> dict[int, str]:
    """``1=host:port,2=host:port`` -> {1: "host:port", 2: ...}."""
    peers: dict[int, str] = {}
    for part in text.split(","):
        node, sep, address = part.partition("=")
        if not sep or not node.strip().isdigit() or ":" not in address:
            raise ValueError(f"--peers: {part!r} is not ID=HOST:PORT")
        peers[int(node)] = address.strip()
    return peers


async def serve(args: argparse.Namespace) -> None:
    """Run one host until SIGTERM/SIGINT."""
    peers = parse_peers(args.peers)
    if args.id not in peers:
        raise ValueError(f"--id {args.id} is not in --peers")
    store = LogStore.open(
        args.data_dir,
        segment_bytes=args.segment_mb << 20,
        cache_bytes_per_group=args.cache_kb_per_group << 10,
        cache_bytes_total=args.cache_mb << 20,
        spare_segments_max=args.spare_segments,
    )
    transport = AngeliaTransport(args.id, {n: a for n, a in peers.items() if n != args.id})
    options = DriverOptions(
        tick_ms=args.tick_ms,
        election_tick=args.election_tick,
        heartbeat_tick=args.heartbeat_tick,
        snapshot_entries=args.snapshot_entries,
        keep_entries=args.keep_entries,
        wal_retain_bytes=args.wal_retain_mb << 20,
        wal_keep_segments=args.wal_keep_segments,
        sync_in_thread=not args.sync_inline,
        send_before_sync=args.early_send,
    )
    driver = Driver(args.id, store, transport, options)
    machines: dict[int, AppendLog] = {}
    node_ids = sorted(peers)
    for group_id in range(1, args.groups + 1):
        machines[group_id] = AppendLog(args.keep_values)
        driver.add_group(group_id, node_ids, machines[group_id])
    impl = _HostImpl(driver, machines, args.groups)
    server = Server([transport.binding(), RaftHostService.bind(impl)], RpcConfig())
    address = await server.start(peers[args.id])
    await driver.start()
    print(f"READY {address}", flush=True)
    if os.environ.get("RIP5_RAFT_DEBUG"):
        asyncio.get_running_loop().create_task(_debug(driver))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop()
    await driver.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and serve."""
    parser = argparse.ArgumentParser(prog="python -m rip5.bench.raft_host", description=__doc__)
    parser.add_argument("--id", type=int, required=True, help="this node's id")
    parser.add_argument("--peers", required=True, help="ID=HOST:PORT of every node, this one too")
    parser.add_argument("--groups", type=int, default=64, help="raft groups, each on every node")
    parser.add_argument("--data-dir", required=True, help="where the WAL and snapshots live")
    parser.add_argument("--tick-ms", type=int, default=50)
    parser.add_argument("--election-tick", type=int, default=10)
    parser.add_argument("--heartbeat-tick", type=int, default=2)
    parser.add_argument("--snapshot-entries", type=int, default=10_000)
    parser.add_argument("--keep-entries", type=int, default=2_000)
    parser.add_argument("--segment-mb", type=int, default=64)
    parser.add_argument(
        "--wal-retain-mb",
        type=int,
        default=256,
        help="compact the groups pinning old segments when the WAL holds more (0: off)",
    )
    parser.add_argument(
        "--wal-keep-segments", type=int, default=2, help="newest segments a compaction keeps"
    )
    parser.add_argument(
        "--spare-segments", type=int, default=4, help="collected segments kept for reuse"
    )
    parser.add_argument("--cache-kb-per-group", type=int, default=512)
    parser.add_argument(
        "--cache-mb", type=int, default=64, help="recent entries cached in memory, all groups"
    )
    parser.add_argument(
        "--sync-inline", action="store_true", help="fdatasync on the event loop, not a thread"
    )
    parser.add_argument(
        "--early-send",
        action="store_true",
        help="a leader sends appends during its own fdatasync (experimental: see DriverOptions)",
    )
    parser.add_argument(
        "--keep-values", action="store_true", help="keep applied values for reads (tests)"
    )
    args = parser.parse_args(argv)
    # As in every rip5 role process (rip5.shell.tune_gc): full cyclic collections
    # over a big heap paused the loop for 100+ ms, long enough to cost elections.
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        uvloop.run(serve(args))
    except ValueError as exc:
        print(f"rip5.bench.raft_host: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
