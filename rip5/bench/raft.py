"""``rip5 bench raft``: committed entries/s, commit latency and failover time of the raft host.

Three ``rip5.bench.raft_host`` processes on 127.0.0.1 (fsync on: every round's
WAL batch is fdatasync'ed before anything is sent or acknowledged) host G
groups, each replicated on all three. One client process (uvloop) keeps
``in_flight`` propose calls open; each call carries ``batch`` entries of
``entry_bytes`` for one group (groups taken round robin) to that group's
leader and returns once they are committed and applied there. For each G:

- committed entries/s over the measured window (after a warm-up);
- p50/p99 commit latency: the latency of a propose call (each of its
  entries commits in the same round);

then, with the groups idle, ``failovers`` times: SIGKILL the leader of group
1, and measure until a proposal to group 1 succeeds on a new leader (the
killed node is restarted between kills). Medians and [min-max] over the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import uvloop

from angelia_rpc import AngeliaError
from rip5 import stats
from rip5.bench import harness
from rip5.bench.raft_cluster import HostSpec, LocalCluster

METRICS = (
    harness.Metric("entries_per_s", "committed entries/s"),
    harness.Metric("p50_ms", "p50 ms", ".1f"),
    harness.Metric("p99_ms", "p99 ms", ".1f"),
    harness.Metric("errors", "errors"),
    harness.Metric("failover_ms", "failover ms"),
)


@dataclass
class LoadResult:
    """One measured run."""

    entries_per_s: float
    p50_ms: float
    p99_ms: float
    calls: int
    errors: int


async def _load(
    cluster: LocalCluster,
    leaders: dict[int, int],
    groups: int,
    *,
    seconds: float,
    warmup_s: float,
    in_flight: int,
    batch: int,
    entry_bytes: int,
) -> LoadResult:
    loop = asyncio.get_running_loop()
    start = loop.time()
    measure_from = start + warmup_s
    end = measure_from + seconds
    latencies: list[float] = []
    entries = 0
    errors = 0
    error_names: dict[str, int] = {}
    next_group = 0
    body = os.urandom(entry_bytes - 16)

    async def worker(worker_id: int) -> None:
        nonlocal entries, errors, next_group
        seq = 0
        while True:
            now = loop.time()
            if now >= end:
                return
            group = next_group % groups + 1
            next_group += 1
            items = [b"%08d%08d" % (worker_id, seq + i) + body for i in range(batch)]
            seq += batch
            sent = loop.time()
            try:
                await cluster.propose(leaders[group], group, items)
            except AngeliaError as exc:
                errors += 1
                error_names[exc.code.name] = error_names.get(exc.code.name, 0) + 1
                if exc.leader_hint.isdigit():
                    leaders[group] = int(exc.leader_hint)
                await asyncio.sleep(0.01)
                continue
            done = loop.time()
            if sent >= measure_from and done <= end:
                latencies.append((done - sent) * 1000)
                entries += batch

    await asyncio.gather(*(worker(i) for i in range(in_flight)))
    if error_names:
        print(f"    errors: {error_names}", flush=True)
    return LoadResult(
        entries / seconds,
        stats.percentile(latencies, 0.50),
        stats.percentile(latencies, 0.99),
        len(latencies),
        errors,
    )


async def _failover(cluster: LocalCluster, nodes: list[int]) -> float:
    """SIGKILL group 1's leader; seconds until a proposal to group 1 succeeds elsewhere."""
    leaders = await cluster.wait_all_led()
    victim = leaders[1]
    cluster.kill(victim)
    killed_at = time.monotonic()
    survivors = [n for n in nodes if n != victim]
    while True:
        for node in survivors:
            try:
                await cluster.propose(node, 1, [b"failover-probe"])
            except AngeliaError:
                continue
            elapsed = time.monotonic() - killed_at
            await cluster.start_node(victim)
            return elapsed
        if time.monotonic() - killed_at > 60:
            raise TimeoutError("no new leader for group 1 within 60 s")
        await asyncio.sleep(0.01)


async def _bench(args: argparse.Namespace, report: harness.BenchReport) -> int:
    print(
        f"# rip5 bench raft  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC  "
        f"cores={os.cpu_count()}  nodes=3  fsync=on  entry={args.entry_bytes} B  "
        f"batch={args.batch}  in_flight={args.in_flight}  runs={args.runs} x {args.seconds} s",
        flush=True,
    )
    for groups in args.groups:
        results: list[LoadResult] = []
        failovers: list[float] = []
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="rip5-bench-raft-", dir=args.dir) as root:
                spec = HostSpec(
                    groups=groups,
                    tick_ms=args.tick_ms,
                    election_tick=args.election_tick,
                    snapshot_entries=args.snapshot_entries,
                    keep_entries=args.keep_entries,
                    extra_args=[
                        *("--segment-mb", str(args.segment_mb)),
                        *("--wal-retain-mb", str(args.wal_retain_mb)),
                        *(["--early-send"] if args.early_send else []),
                    ],
                )
                cluster = LocalCluster(Path(root), spec)
                await cluster.start()
                try:
                    leaders = await cluster.wait_all_led(timeout_s=120)
                    meter = harness.CpuMeter(harness.pids_of(cluster.processes))
                    report.stage(f"groups={groups} run {run + 1}")
                    meter.start()
                    result = await _load(
                        cluster,
                        dict(leaders),
                        groups,
                        seconds=args.seconds,
                        warmup_s=args.warmup,
                        in_flight=args.in_flight,
                        batch=args.batch,
                        entry_bytes=args.entry_bytes,
                    )
                    report.record(
                        f"groups={groups}",
                        {
                            "entries_per_s": result.entries_per_s,
                            "p50_ms": result.p50_ms,
                            "p99_ms": result.p99_ms,
                            "errors": result.errors,
                        },
                        meter.stop(),
                    )
                    results.append(result)
                    print(
                        f"  groups={groups} run={run + 1}: {result.entries_per_s:,.0f} entries/s "
                        f"p50 {result.p50_ms:.1f} ms p99 {result.p99_ms:.1f} ms "
                        f"({result.calls} calls, {result.errors} errors)",
                        flush=True,
                    )
                    if groups == args.failover_groups:
                        for _ in range(args.failovers):
                            seconds = await _failover(cluster, sorted(cluster.addresses))
                            failovers.append(seconds)
                            report.record(
                                f"failover groups={groups}", {"failover_ms": seconds * 1000}
                            )
                            print(f"  failover: {seconds * 1000:.0f} ms", flush=True)
                finally:
                    await cluster.stop()
        print(
            f"groups={groups}: entries/s "
            + harness.median_range([r.entries_per_s for r in results], ",.0f")
            + "  p50 ms "
            + harness.median_range([r.p50_ms for r in results], ".1f")
            + "  p99 ms "
            + harness.median_range([r.p99_ms for r in results], ".1f"),
            flush=True,
        )
        if failovers:
            print(
                f"failover after SIGKILL (groups={groups}, {len(failovers)} kills): ms "
                + harness.median_range([f * 1000 for f in failovers], ".0f"),
                flush=True,
            )
    return 0


def main(argv: list[str]) -> int:
    """Parse the options and run the benchmark."""
    parser = argparse.ArgumentParser(prog="rip5 bench raft", description=__doc__)
    parser.add_argument(
        "--groups",
        type=lambda text: [int(g) for g in text.split(",")],
        default=[1, 64, 1024],
        help="comma-separated group counts (default 1,64,1024)",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--in-flight", type=int, default=32, help="concurrent propose calls")
    parser.add_argument("--batch", type=int, default=64, help="entries per propose call")
    parser.add_argument("--entry-bytes", type=int, default=1024)
    parser.add_argument("--tick-ms", type=int, default=50)
    parser.add_argument("--election-tick", type=int, default=16, help="ticks; 0.8-1.6 s at 50 ms")
    parser.add_argument(
        "--snapshot-entries",
        type=int,
        default=0,
        help="also snapshot a group every N entries (0: only by --wal-retain-mb)",
    )
    parser.add_argument("--keep-entries", type=int, default=5_000)
    parser.add_argument("--failovers", type=int, default=3, help="SIGKILLs per run")
    parser.add_argument("--failover-groups", type=int, default=64)
    parser.add_argument("--segment-mb", type=int, default=64, help="WAL segment size")
    parser.add_argument(
        "--wal-retain-mb",
        type=int,
        default=256,
        help="per node: compact the groups that pin old WAL segments beyond this (0: off)",
    )
    parser.add_argument(
        "--early-send",
        action="store_true",
        help="leaders send appends during their own fdatasync (experimental, unsafe: see docs)",
    )
    parser.add_argument("--dir", default=None, help="where the data folders go (default: temp)")
    harness.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.entry_bytes < 16:
        parser.error("--entry-bytes must be at least 16")
    params = {k: v for k, v in vars(args).items() if k not in ("json", "no_progress")}
    report = harness.BenchReport(
        "raft",
        argv,
        METRICS,
        params=params,
        json_path=args.json,
        show_progress=not args.no_progress,
    )
    kills = args.failovers * args.runs if args.failover_groups in args.groups else 0
    with report.progress(len(args.groups) * args.runs + kills):
        code = uvloop.run(_bench(args, report))
    report.finish()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
