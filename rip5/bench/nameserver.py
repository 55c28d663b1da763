"""``rip5 bench nameserver``: route lookups/s, metadata writes/s and memory of real nameservers.

``nodes`` ``rip5 nameserver`` processes (1: dev; 3: production, one raft
group over three WALs, fsync on) on 127.0.0.1; one client process (uvloop)
calls them over Angelia (tcp, msgpack), always at the leader. Per run, on a
fresh cluster, after a warm-up of each phase:

1. writes: ``in_flight`` workers create topics of ``queues`` queues (each a
   raft write: replicated, fsynced, applied) for ``seconds``: writes/s and
   p50/p99 latency of a create;
2. route lookups: ``in_flight`` workers ask the route of topics created in
   phase 1 (seeded choice; a linearizable read through ReadIndex) for
   ``seconds``: lookups/s and p50/p99.

Then once (``--memory-topics``, 0 to skip): a fresh single nameserver is
filled with ``memory_topics`` topics of ``queues`` queues, and its resident
set size (VmRSS) is read before and after; the increase per topic is
reported too. Client and server CPU are recorded separately for every phase.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import uvloop

from angelia_rpc import AngeliaError, Peers, RpcConfig
from angelia_rpc.cluster_services import NameserverService
from protocol import errors
from protocol import nameserver_api as api
from rip5 import stats
from rip5.bench import harness
from rip5.bench.storage_cluster import free_port
from rip5.shell import READY_FD_ENV
from rip5.supervisor import DIE_WITH_PARENT, terminate_all

CLUSTER = "DefaultCluster"
METRICS = (
    harness.Metric("ops_per_s", "ops/s"),
    harness.Metric("p50_ms", "p50 ms", ".2f"),
    harness.Metric("p99_ms", "p99 ms", ".2f"),
    harness.Metric("errors", "errors"),
    harness.Metric("topics", "topics"),
    harness.Metric("rss_mib", "RSS MiB", ",.1f"),
    harness.Metric("rss_growth_mib", "RSS growth MiB", ",.1f"),
    harness.Metric("bytes_per_topic", "bytes/topic"),
    harness.Metric("fill_s", "fill s", ".1f"),
)


class LocalNameservers:
    """``count`` nameserver processes under ``root``, on ports free when planned."""

    def __init__(
        self, root: Path, count: int, groups: int = 16, flags: tuple[str, ...] = ()
    ) -> None:
        """Choose ports; nothing starts until :meth:`start`. ``flags``: more options of
        every node (``--replication controller``)."""
        self.root = root
        self.flags = flags
        self.groups = groups
        self.addresses = {n: f"127.0.0.1:{free_port()}" for n in range(1, count + 1)}
        self.processes: dict[int, asyncio.subprocess.Process] = {}
        self._peers = Peers(RpcConfig(call_timeout_ms=10_000))
        self.leader = self.addresses[1]

    async def start(self, timeout_s: float = 60.0) -> None:
        """Start every node, wait until each is ready and one leads."""
        await asyncio.gather(*(self._start_node(n, timeout_s) for n in self.addresses))
        await self.wait_leader(timeout_s)

    async def _start_node(self, node_id: int, timeout_s: float) -> None:
        read_fd, write_fd = os.pipe()
        args = [
            sys.executable, "-m", "rip5", "nameserver",
            "--data-dir", str(self.root / f"ns{node_id}"),
            "--log-level", "warning",
            "--listen", self.addresses[node_id],
            "--node-id", str(node_id),
            "--groups", str(self.groups),
            # Each node its own metrics port: the default one is taken by the first.
            "--metrics-listen", f"127.0.0.1:{free_port()}",
        ]  # fmt: skip
        if len(self.addresses) > 1:
            args += ["--peers", ",".join(f"{n}={a}" for n, a in sorted(self.addresses.items()))]
        args += self.flags
        try:
            process = await asyncio.create_subprocess_exec(
                *args,
                env={**os.environ, READY_FD_ENV: str(write_fd)},
                pass_fds=(write_fd,),
                preexec_fn=DIE_WITH_PARENT,  # a killed bench leaves no nameserver running
            )
        finally:
            os.close(write_fd)
        self.processes[node_id] = process
        loop = asyncio.get_running_loop()
        try:
            line = await asyncio.wait_for(
                loop.run_in_executor(None, _read_line, read_fd), timeout_s
            )
        finally:
            os.close(read_fd)
        if not line.startswith("ready"):
            raise RuntimeError(f"nameserver {node_id} did not start (exit {process.returncode})")

    def stub(self, address: str | None = None) -> NameserverService:
        """The client of one replica (the leader by default)."""
        return self._peers.stub(NameserverService, address or self.leader)

    async def wait_leader(self, timeout_s: float) -> str:
        """Wait until a replica serves a linearizable read of the cluster; it is the leader."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            for address in self.addresses.values():
                try:
                    await self.stub(address).cluster_status(
                        api.NameRequest(CLUSTER), timeout_ms=1000
                    )
                except AngeliaError:
                    continue
                self.leader = address
                return address
            if loop.time() > deadline:
                raise TimeoutError(f"no nameserver leader within {timeout_s} s")
            await asyncio.sleep(0.05)

    def pid(self, node_id: int) -> int:
        """The process id of one node."""
        return self.processes[node_id].pid

    async def stop(self) -> None:
        """SIGTERM every node, wait; close the client channels."""
        await terminate_all(self.processes.values(), 30)
        self.processes.clear()
        await self._peers.close()


def _read_line(fd: int) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 256)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


@dataclass
class PhaseResult:
    """One measured phase."""

    ops_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int

    def values(self) -> dict[str, float]:
        """The figures by metric key."""
        return {
            "ops_per_s": self.ops_per_s,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "errors": self.errors,
        }


async def _drive(
    call: Callable[[int, int], Awaitable[object]],
    *,
    in_flight: int,
    seconds: float,
    warmup_s: float,
) -> PhaseResult:
    """``in_flight`` workers call ``call(worker, seq)`` back to back; measured after warm-up.

    A call that fails with a retriable error is counted as an error and the
    worker goes on; any other error stops the bench.
    """
    clock = time.perf_counter  # the loop's clock has millisecond resolution under uvloop
    measure_from = clock() + warmup_s
    end = measure_from + seconds
    latencies: list[float] = []
    errors_seen = 0

    async def worker(worker_id: int) -> None:
        nonlocal errors_seen
        seq = 0
        while True:
            sent = clock()
            if sent >= end:
                return
            try:
                await call(worker_id, seq)
            except AngeliaError as exc:
                if not exc.retriable:
                    raise
                errors_seen += 1
                await asyncio.sleep(0.01)
                continue
            finally:
                seq += 1
            done = clock()
            if sent >= measure_from and done <= end:
                latencies.append((done - sent) * 1000)

    await asyncio.gather(*(worker(i) for i in range(in_flight)))
    return PhaseResult(
        len(latencies) / seconds,
        stats.percentile(latencies, 0.5),
        stats.percentile(latencies, 0.99),
        errors_seen,
    )


async def _one_run(
    args: argparse.Namespace, report: harness.BenchReport, run: int, root: Path
) -> None:
    cluster = LocalNameservers(root, args.nodes)
    await cluster.start()
    try:
        meter = harness.CpuMeter(harness.pids_of(cluster.processes))
        created: list[str] = []

        async def create(worker: int, seq: int) -> None:
            name = f"bench-r{run}-w{worker}-{seq}"
            request = api.CreateTopicRequest(name, CLUSTER, args.queues)
            try:
                await cluster.stub().create_topic(request, timeout_ms=10_000)
            except AngeliaError as exc:
                if exc.code is not errors.ALREADY_EXISTS:  # a retried create that committed
                    raise
            created.append(name)

        report.stage(f"run {run + 1}: writes")
        meter.start()
        writes = await _drive(
            create, in_flight=args.in_flight, seconds=args.seconds, warmup_s=args.warmup
        )
        report.record("metadata writes (create topic)", writes.values(), meter.stop())
        report.say(
            f"  run {run + 1}: writes {writes.ops_per_s:,.0f}/s p50 {writes.p50_ms:.2f} ms "
            f"p99 {writes.p99_ms:.2f} ms ({len(created)} topics)"
        )

        chooser = random.Random(args.seed + run)

        async def lookup(worker: int, seq: int) -> None:
            name = created[chooser.randrange(len(created))]
            response = await cluster.stub().route(api.NameRequest(name), timeout_ms=10_000)
            if len(response.queues) != args.queues:
                raise RuntimeError(f"route of {name} has {len(response.queues)} queues")

        report.stage(f"run {run + 1}: route lookups")
        meter.start()
        routes = await _drive(
            lookup, in_flight=args.in_flight, seconds=args.seconds, warmup_s=args.warmup
        )
        report.record("route lookups", routes.values(), meter.stop())
        report.say(
            f"  run {run + 1}: route lookups {routes.ops_per_s:,.0f}/s "
            f"p50 {routes.p50_ms:.2f} ms p99 {routes.p99_ms:.2f} ms"
        )
    finally:
        await cluster.stop()


async def _memory(args: argparse.Namespace, report: harness.BenchReport, root: Path) -> None:
    """Fill one fresh nameserver with ``memory_topics`` topics; its RSS before and after."""
    cluster = LocalNameservers(root, 1)
    await cluster.start()
    try:
        pid = cluster.pid(1)
        before = harness.rss_bytes_of(pid) or 0
        loop = asyncio.get_running_loop()
        started = loop.time()
        next_topic = 0
        meter = harness.CpuMeter(harness.pids_of(cluster.processes))
        meter.start()

        async def filler() -> None:
            nonlocal next_topic
            while next_topic < args.memory_topics:
                name = f"mem-{next_topic:07d}"
                next_topic += 1
                request = api.CreateTopicRequest(name, CLUSTER, args.queues)
                for _attempt in range(20):
                    try:
                        await cluster.stub().create_topic(request, timeout_ms=30_000)
                    except AngeliaError as exc:
                        if exc.code is errors.ALREADY_EXISTS:
                            break
                        if not exc.retriable:
                            raise
                        await asyncio.sleep(0.05)
                        continue
                    break
                if next_topic % 5000 == 0:
                    report.stage(f"memory: {next_topic:,} topics")

        await asyncio.gather(*(filler() for _ in range(args.in_flight)))
        fill_s = loop.time() - started
        cpu = meter.stop()
        listed = await cluster.stub().route(api.NameRequest("mem-0000000"), timeout_ms=10_000)
        if len(listed.queues) != args.queues:
            raise RuntimeError("the first topic lost its queues")
        after = harness.rss_bytes_of(pid) or 0
        report.record(
            f"memory: {args.memory_topics:,} topics x {args.queues} queues",
            {
                "topics": args.memory_topics,
                "rss_mib": after / 2**20,
                "rss_growth_mib": (after - before) / 2**20,
                "bytes_per_topic": (after - before) / args.memory_topics,
                "fill_s": fill_s,
                "ops_per_s": args.memory_topics / fill_s,
            },
            cpu,
        )
        report.say(
            f"  memory: RSS {before / 2**20:,.1f} MiB empty -> {after / 2**20:,.1f} MiB with "
            f"{args.memory_topics:,} topics x {args.queues} queues (filled in {fill_s:.0f} s)"
        )
    finally:
        await cluster.stop()


async def _bench(args: argparse.Namespace, report: harness.BenchReport) -> int:
    with tempfile.TemporaryDirectory(prefix="rip5-bench-nameserver-", dir=args.dir) as root:
        for run in range(args.runs):
            await _one_run(args, report, run, Path(root) / f"run{run}")
        if args.memory_topics > 0:
            await _memory(args, report, Path(root) / "memory")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and run the benchmark."""
    parser = argparse.ArgumentParser(prog="rip5 bench nameserver", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1, choices=(1, 3), help="nameservers")
    parser.add_argument("--runs", type=int, default=3, help="fresh clusters, one after another")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per phase")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per phase")
    parser.add_argument("--in-flight", type=int, default=32, help="concurrent calls")
    parser.add_argument("--queues", type=int, default=8, help="queues per topic")
    parser.add_argument(
        "--memory-topics", type=int, default=100_000, help="topics for the RSS figure (0: skip)"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the route lookups' choice")
    parser.add_argument("--dir", default=None, help="where the data folders go (default: temp)")
    harness.add_arguments(parser)
    args = parser.parse_args(argv)
    for name in ("runs", "in_flight", "queues"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.seconds <= 0 or args.warmup < 0 or args.memory_topics < 0:
        parser.error("--seconds must be positive; --warmup and --memory-topics not negative")
    params = {k: v for k, v in vars(args).items() if k not in ("json", "no_progress")}
    report = harness.BenchReport(
        "nameserver",
        list(argv or []),
        METRICS,
        params=params,
        json_path=args.json,
        show_progress=not args.no_progress,
    )
    report.note(
        f"{args.nodes} nameserver process(es), fsync on; client: one process, "
        f"{args.in_flight} calls in flight over Angelia tcp/msgpack"
    )
    with report.progress(2 * args.runs + (1 if args.memory_topics else 0)):
        code = uvloop.run(_bench(args, report))
    report.finish()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
