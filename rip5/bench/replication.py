"""``rip5 bench replication``: controller mode with 2 replicas vs raft with 3.

For each mode a fresh cluster: one nameserver and the storage nodes (2 in
controller mode, every group on both, a master and a slave; 3 in raft mode,
every group on all three), fsync on. The nameserver places the groups; the
phases start once every group has a leader (controller mode: a master with
both nodes in its SyncStateSet). Then:

1. publish: ``in_flight`` workers append batches of ``batch`` messages of
   ``message_bytes`` to the queues of topic ``bench`` round robin, each on
   its group's leader (following leader hints), for ``seconds``: messages/s;
   server CPU seconds (storage nodes and nameserver) and bytes the storage
   nodes wrote to disk (``/proc/<pid>/io`` write_bytes: WAL records, its
   fdatasyncs' metadata and spare segments), each per message.
2. failover, ``kills`` times: while one prober appends to a queue every
   10 ms, the node leading that queue's group is SIGKILLed; the time from
   the kill to the prober's next acknowledged append. The node is then
   restarted and the cluster left to settle (every group led again, and in
   controller mode back to a full SyncStateSet) before the next kill.
   Median and [min-max].

Appends go straight to the storage nodes (no broker): this compares the
replication, not the client path. On a shared machine the figures are
indicative only.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import uvloop

from angelia_rpc import AngeliaError
from angelia_rpc.cluster_services import ControlService, StorageService
from angelia_rpc.nameserver_client import NameserverClient
from protocol import control_api as ctl
from protocol.nameserver_api import CreateTopicRequest
from protocol.records import MessageRecord, pack_records
from protocol.storage_api import AppendRequest, AppendResponse
from rip5.bench import harness
from rip5.bench.nameserver import CLUSTER, LocalNameservers
from rip5.bench.storage_cluster import LocalStorageCluster

TOPIC = "bench"
METRICS = (
    harness.Metric("messages_per_s", "msgs/s"),
    harness.Metric("cpu_us_per_message", "CPU us/msg", ".1f"),
    harness.Metric("disk_bytes_per_message", "disk B/msg", ",.0f"),
    harness.Metric("failover_ms", "failover ms (median)", ",.0f"),
)


@dataclass
class ModeResult:
    """What one mode measured."""

    messages_per_s: float
    cpu_us_per_message: float
    disk_bytes_per_message: float
    failovers_ms: list[float]


def _written_bytes(pid: int) -> int:
    """Bytes the process caused to be written to storage so far (0 if unreadable)."""
    try:
        with open(f"/proc/{pid}/io") as io:
            for line in io:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


def _records(queue_id: int, serial: int, count: int, size: int) -> bytes:
    body = b"m" * size
    return pack_records(
        [MessageRecord(TOPIC, queue_id, f"b{queue_id}-{serial}-{i}", body) for i in range(count)]
    )


class Cluster:
    """A nameserver and storage nodes in one replication mode."""

    def __init__(self, root: Path, mode: str, groups: int, queues: int) -> None:
        self.mode = mode
        self.queues = queues
        self.nodes = 2 if mode == "controller" else 3
        flags = ("--replication", mode)
        self.nameservers = LocalNameservers(
            root, 1, groups=groups, flags=(*flags, "--replication-factor", str(self.nodes))
        )
        self.storage: LocalStorageCluster | None = None
        self.root = root
        self.groups = groups
        self.flags = flags

    async def start(self) -> LocalStorageCluster:
        await self.nameservers.start()
        self.storage = LocalStorageCluster(
            self.root,
            nodes=self.nodes,
            groups=self.groups,
            nameserver=self.nameservers.leader,
            static=False,
            flags=self.flags,
        )
        await self.storage.start()
        await self.settle()
        # Listed at the nameserver, or the group leaders' retention rounds drop its data.
        request = CreateTopicRequest(TOPIC, CLUSTER, self.queues)
        await self.nameservers.stub().create_topic(request, timeout_ms=10_000)
        return self.storage

    async def settle(self, timeout_s: float = 120) -> None:
        """Until every group is led (and, in controller mode, fully in sync)."""
        assert self.storage is not None
        deadline = time.monotonic() + timeout_s
        while True:
            leaders = await self.storage.leaders()
            if len(leaders) == self.groups and await self._in_sync():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the {self.mode} cluster did not settle in {timeout_s} s")
            await asyncio.sleep(0.1)

    async def _in_sync(self) -> bool:
        if self.mode != "controller":
            return True
        client = NameserverClient([self.nameservers.leader])
        try:
            response = await client.call_service(
                ControlService, lambda s: s.replica_sets(ctl.ReplicaSetsRequest(), timeout_ms=2000)
            )
        except AngeliaError:
            return False
        finally:
            await client.close()
        full = [g for g in response.groups if len(g.sync_state_set) == self.nodes]
        return len(full) == self.groups

    def server_pids(self) -> list[int]:
        assert self.storage is not None
        return [
            p.pid for p in [*self.storage.processes.values(), *self.nameservers.processes.values()]
        ]

    async def stop(self) -> None:
        if self.storage is not None:
            await self.storage.stop()
        await self.nameservers.stop()


def append_of(
    request: AppendRequest,
) -> Callable[[StorageService], Awaitable[AppendResponse]]:
    """The call appending ``request`` on a stub."""
    return lambda stub: stub.append(request)


async def _publish(storage: LocalStorageCluster, args: argparse.Namespace) -> int:
    """Append for ``args.seconds``; the messages acknowledged."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.seconds
    acked = 0
    serial = 0

    async def worker(first: int) -> None:
        nonlocal acked, serial
        queue_id = first
        while loop.time() < deadline:
            serial += 1
            request = AppendRequest(
                TOPIC,
                queue_id,
                records=_records(queue_id, serial, args.batch, args.message_bytes),
            )
            await storage.call(append_of(request), group=storage.group_of(TOPIC, queue_id))
            acked += args.batch
            queue_id = (queue_id + args.in_flight) % args.queues

    await asyncio.gather(*(worker(i % args.queues) for i in range(args.in_flight)))
    return acked


async def _failover(cluster: Cluster, storage: LocalStorageCluster, kill: int) -> float:
    """Kill the leader of one queue's group under a prober; ms until it appends again."""
    queue_id = kill % 8
    group = storage.group_of(TOPIC, queue_id)
    leaders = await storage.leaders()
    victim = leaders[group]
    loop = asyncio.get_running_loop()
    serial = 0

    async def probe() -> bool:
        nonlocal serial
        serial += 1
        request = AppendRequest(TOPIC, queue_id, records=_records(queue_id, 10**6 + serial, 1, 64))
        for node in sorted(storage.processes):
            try:
                await storage.stub(node).append(request, timeout_ms=200)
            except AngeliaError:
                continue
            return True
        return False

    assert await probe()
    storage.kill(victim)
    killed_at = loop.time()
    while not await probe():
        await asyncio.sleep(0.01)
        if loop.time() - killed_at > 60:
            raise TimeoutError(f"group {group}: no append within 60 s of the kill")
    gap_ms = (loop.time() - killed_at) * 1000
    await storage.start_node(victim)
    await cluster.settle()
    return gap_ms


async def _run_mode(mode: str, args: argparse.Namespace, report: harness.BenchReport) -> ModeResult:
    with tempfile.TemporaryDirectory(prefix=f"rip5-bench-{mode}-", dir=args.dir) as root:
        cluster = Cluster(Path(root), mode, args.groups, args.queues)
        try:
            storage = await cluster.start()
            report.stage(f"{mode}: publish")
            meter = harness.CpuMeter(cluster.server_pids)
            storage_pids = [p.pid for p in storage.processes.values()]
            written = sum(map(_written_bytes, storage_pids))
            meter.start()
            started = time.monotonic()
            acked = await _publish(storage, args)
            elapsed = time.monotonic() - started
            cpu = meter.stop()
            written = sum(map(_written_bytes, storage_pids)) - written
            report.stage(f"{mode}: failover")
            failovers = [await _failover(cluster, storage, k) for k in range(args.kills)]
        finally:
            await cluster.stop()
    server_cpu_s = cpu.server_pct / 100 * elapsed
    result = ModeResult(
        acked / elapsed,
        server_cpu_s * 1e6 / max(acked, 1),
        written / max(acked, 1),
        failovers,
    )
    report.record(
        f"{mode} ({cluster.nodes} replicas)",
        {
            "messages_per_s": result.messages_per_s,
            "cpu_us_per_message": result.cpu_us_per_message,
            "disk_bytes_per_message": result.disk_bytes_per_message,
            "failover_ms": statistics.median(failovers),
        },
        cpu,
    )
    return result


async def _bench(args: argparse.Namespace, report: harness.BenchReport) -> int:
    print(
        f"# rip5 bench replication  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC  "
        f"cores={os.cpu_count()}  fsync=on  message={args.message_bytes} B  "
        f"batch={args.batch}  in_flight={args.in_flight}  groups={args.groups}  "
        f"queues={args.queues}  {args.seconds} s  kills={args.kills}",
        flush=True,
    )
    for mode in args.modes:
        r = await _run_mode(mode, args, report)
        print(
            f"  {mode}: publish {r.messages_per_s:,.0f} msgs/s, "
            f"server CPU {r.cpu_us_per_message:.1f} us/msg, "
            f"disk {r.disk_bytes_per_message:,.0f} B/msg; failover ms "
            + harness.median_range(r.failovers_ms, ",.0f"),
            flush=True,
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and run the benchmark."""
    parser = argparse.ArgumentParser(prog="rip5 bench replication", description=__doc__)
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=("controller", "raft"),
        default=["controller", "raft"],
        help="which modes, in order",
    )
    parser.add_argument("--groups", type=int, default=8, help="groups of the cluster")
    parser.add_argument("--queues", type=int, default=16, help="queues appended to")
    parser.add_argument("--message-bytes", type=int, default=1024, help="body size")
    parser.add_argument("--batch", type=int, default=64, help="messages per append")
    parser.add_argument("--in-flight", type=int, default=16, help="concurrent appends")
    parser.add_argument("--seconds", type=float, default=10.0, help="publish window")
    parser.add_argument("--kills", type=int, default=5, help="failovers measured per mode")
    parser.add_argument("--dir", default=None, help="where the clusters' data folders go")
    harness.add_arguments(parser)
    args = parser.parse_args(argv)
    for name in ("groups", "queues", "message_bytes", "batch", "in_flight", "kills"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    params = {k: v for k, v in vars(args).items() if k not in ("json", "no_progress")}
    report = harness.BenchReport(
        "replication",
        list(argv or []),
        METRICS,
        params=params,
        json_path=args.json,
        show_progress=not args.no_progress,
    )
    with report.progress(2 * len(args.modes)):
        code = uvloop.run(_bench(args, report))
    report.finish()
    return code
