"""``rip5 bench timer``: lateness and throughput of timed (DELAY) messages.

Three ``rip5 storage`` processes on 127.0.0.1 (fsync on) replicate
``groups`` raft groups; topic ``timer`` has ``queues`` queues over them.
Each run starts a fresh cluster and:

1. loads ``messages`` timed messages (``message_bytes`` bodies, ``batch`` per
   append, ``in_flight`` appends at once), due uniformly over
   ``[T0, T0 + spread]`` where T0 is ``lead`` seconds after the load starts:
   all of them are pending when the first is due (the run says so if the
   load was slower than the lead);
2. releases: the group leaders release each message when its time comes
   (a Tick through the group's log, see ``storage_node/service.py``): it is
   queued, visible to consumers, with the leader's clock at the Tick as its
   store time. One reader per queue reads the queue from the first due time
   on (leader reads, no log entries), every 10 ms while nothing new is there,
   and notes when each message became visible to it.

Reported per run and as medians [min-max] over the runs:

- lateness = seen by the reader - due time (ms): p50, p99, max (includes
  the Tick's raft commit and up to 10 ms of read polling; what a consumer
  adds beyond that is its receive path: ``rip5 bench storage``);
- release stamp = store time (the leader's clock when it proposed the Tick)
  - due time: p50, p99. No message may be stamped before it is due (the run
  fails if one is);
- timer throughput = messages / (last seen - first due time): with
  ``--spread 0`` (every message due at the same instant) how fast the
  cluster drains a burst of due timers; with a spread it cannot exceed
  messages / spread.

The clocks are the same machine's wall clock (time.time()).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from operator import methodcaller
from pathlib import Path

import uvloop

from protocol.storage_api import AppendRequest, Message, ReadRequest
from protocol.vocabulary import MessageType
from rip5 import stats
from rip5.bench import harness
from rip5.bench.storage_cluster import LocalStorageCluster

TOPIC = "timer"
POLL_MS = 10
GROUP = "timer-bench"


@dataclass
class RunResult:
    """One run's figures (ms unless named otherwise)."""

    load_s: float
    pending_at_first_due: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    stamp_p50_ms: float
    stamp_p99_ms: float
    early: int
    messages_per_s: float


def _now_ms() -> float:
    return time.time() * 1000


async def _load(
    cluster: LocalStorageCluster, args: argparse.Namespace, first_due_ms: int
) -> dict[int, int]:
    """Append every timed message; returns how many went to each queue."""
    body = os.urandom(args.message_bytes)
    spread_ms = int(args.spread * 1000)
    per_queue: dict[int, int] = {}
    next_serial = 0
    groups = {q: cluster.group_of(TOPIC, q) for q in range(args.queues)}

    async def worker() -> None:
        nonlocal next_serial
        while next_serial < args.messages:
            first = next_serial
            count = min(args.batch, args.messages - first)
            next_serial += count
            queue_id = (first // args.batch) % args.queues
            messages = [
                Message(
                    TOPIC,
                    queue_id,
                    f"timer-{serial}",
                    body,
                    delivery_timestamp_ms=first_due_ms + serial * spread_ms // args.messages,
                    message_type=int(MessageType.DELAY),
                )
                for serial in range(first, first + count)
            ]
            request = AppendRequest(TOPIC, queue_id, messages)
            await cluster.call(methodcaller("append", request), group=groups[queue_id])
            per_queue[queue_id] = per_queue.get(queue_id, 0) + count

    await asyncio.gather(*(worker() for _ in range(args.in_flight)))
    return per_queue


async def _watch_releases(
    cluster: LocalStorageCluster, per_queue: dict[int, int], first_due_ms: int, deadline_s: float
) -> list[tuple[int, int, float]]:
    """(due ms, release stamp ms, seen ms) of every timed message: one reader per queue
    reads from the first due time on (leader reads, no log entries), every
    ``POLL_MS`` while nothing new is there."""
    released: list[tuple[int, int, float]] = []
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, (first_due_ms - _now_ms()) / 1000))
    deadline = loop.time() + deadline_s

    async def reader(queue_id: int, expected: int) -> None:
        offset = 0
        group = cluster.group_of(TOPIC, queue_id)
        while offset < expected:
            if loop.time() > deadline:
                raise TimeoutError(f"queue {queue_id}: {offset} of {expected} timed messages came")
            request = ReadRequest(TOPIC, queue_id, offset, count_max=1024)
            read = await cluster.call(methodcaller("read", request), group=group)
            seen_ms = _now_ms()
            for stored in read.messages:
                due_ms = stored.message.delivery_timestamp_ms
                released.append((due_ms, stored.store_timestamp_ms, seen_ms))
            offset += len(read.messages)
            if not read.messages:
                await asyncio.sleep(POLL_MS / 1000)  # nothing released yet: look again

    await asyncio.gather(*(reader(q, n) for q, n in sorted(per_queue.items())))
    return released


async def _run(cluster: LocalStorageCluster, args: argparse.Namespace) -> RunResult:
    load_start_ms = _now_ms()
    first_due_ms = int(load_start_ms + args.lead * 1000)
    per_queue = await _load(cluster, args, first_due_ms)
    load_s = (_now_ms() - load_start_ms) / 1000
    pending = args.messages if _now_ms() < first_due_ms else 0
    released = await _watch_releases(cluster, per_queue, first_due_ms, args.spread + 120)
    lateness = [seen_ms - due_ms for due_ms, _, seen_ms in released]
    stamped = [float(stamp_ms - due_ms) for due_ms, stamp_ms, _ in released]
    last_seen_ms = max(seen_ms for _, _, seen_ms in released)
    drain_s = max(0.001, (last_seen_ms - first_due_ms) / 1000)
    return RunResult(
        load_s,
        pending,
        stats.percentile(lateness, 0.5),
        stats.percentile(lateness, 0.99),
        max(lateness),
        stats.percentile(stamped, 0.5),
        stats.percentile(stamped, 0.99),
        sum(1 for value in stamped if value < 0),
        len(released) / drain_s,
    )


METRICS = (
    harness.Metric("lateness_p50_ms", "lateness p50 ms", ".1f"),
    harness.Metric("lateness_p99_ms", "lateness p99 ms", ".1f"),
    harness.Metric("lateness_max_ms", "lateness max ms", ".1f"),
    harness.Metric("stamp_p99_ms", "release stamp p99 ms", ".1f"),
    harness.Metric("timers_per_s", "timers/s"),
    harness.Metric("early", "early", ".0f"),
)


async def _bench(args: argparse.Namespace, report: harness.BenchReport) -> int:
    failed = False
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="rip5-bench-timer-", dir=args.dir) as root:
            cluster = LocalStorageCluster(Path(root), nodes=3, groups=args.groups)
            await cluster.start()
            try:
                await cluster.wait_all_led(timeout_s=120)
                meter = harness.CpuMeter(harness.pids_of(cluster.processes))
                report.stage(f"run {run + 1}: load and release")
                meter.start()
                result = await _run(cluster, args)
                report.record(
                    "timers",
                    {
                        "lateness_p50_ms": result.p50_ms,
                        "lateness_p99_ms": result.p99_ms,
                        "lateness_max_ms": result.max_ms,
                        "stamp_p99_ms": result.stamp_p99_ms,
                        "timers_per_s": result.messages_per_s,
                        "early": float(result.early),
                    },
                    meter.stop(),
                )
            finally:
                await cluster.stop()
        failed |= result.early > 0 or result.pending_at_first_due < args.messages
        report.say(
            f"  run {run + 1}: loaded {args.messages:,} in {result.load_s:.1f} s "
            f"(pending at first due: {result.pending_at_first_due:,}); lateness p50 "
            f"{result.p50_ms:.1f} ms p99 {result.p99_ms:.1f} ms max {result.max_ms:.1f} ms; "
            f"release stamp p50 {result.stamp_p50_ms:.1f} ms p99 {result.stamp_p99_ms:.1f} ms; "
            f"early {result.early}; {result.messages_per_s:,.0f} timers/s"
        )
    if failed:
        report.note("FAILED: a message came early, or the load outlasted the lead")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and run the benchmark."""
    parser = argparse.ArgumentParser(prog="rip5 bench timer", description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000, help="timed messages per run")
    parser.add_argument("--spread", type=float, default=10.0, help="due times span (s)")
    parser.add_argument("--lead", type=float, default=30.0, help="first due after load start (s)")
    parser.add_argument("--groups", type=int, default=16, help="raft groups (every node)")
    parser.add_argument("--queues", type=int, default=32, help="queues of the bench topic")
    parser.add_argument("--message-bytes", type=int, default=256, help="body size")
    parser.add_argument("--batch", type=int, default=256, help="messages per append")
    parser.add_argument("--in-flight", type=int, default=16, help="concurrent appends")
    parser.add_argument("--runs", type=int, default=3, help="fresh clusters, one after another")
    parser.add_argument("--dir", default=None, help="where the clusters' data folders go")
    harness.add_arguments(parser)
    args = parser.parse_args(argv)
    for name in ("messages", "groups", "queues", "message_bytes", "batch", "in_flight", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.spread < 0 or args.lead <= 0:
        parser.error("--spread must be >= 0 and --lead > 0")
    params = {k: v for k, v in vars(args).items() if k not in ("json", "no_progress")}
    params["nodes"] = 3
    report = harness.BenchReport(
        "timer",
        list(argv or []),
        METRICS,
        params=params,
        json_path=args.json,
        show_progress=not args.no_progress,
    )
    with report.progress(args.runs):
        code = uvloop.run(_bench(args, report))
    report.finish()
    return code
