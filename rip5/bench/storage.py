"""``rip5 bench storage``: append and receive+ack throughput of three storage nodes.

Three ``rip5 storage`` processes on 127.0.0.1 (fsync on: an append is
acknowledged once a majority has it fdatasync'ed) replicate ``groups``
groups; topic ``bench`` has ``queues`` queues spread over them. One client
process (uvloop) then runs two phases per run:

1. append: ``in_flight`` workers each keep one append call open to the leader
   of a queue's group (queues taken round robin), ``batch`` messages of
   ``message_bytes`` per call, packed as records (``AppendRequest.records``,
   as the broker sends them); messages/s over ``seconds`` (after
   ``warmup``), and p50/p99 latency of an append call;
2. receive + ack: ``in_flight`` workers receive up to ``batch`` messages of a
   queue for one consumer group (packed answers, decoded, as the broker
   asks for them) and ack them in one call, until every message appended in
   phase 1 is consumed; messages/s (receive+ack of a message counts once)
   and p99 of a receive+ack pair.

The default ``batch`` (64) is about the size of a broker's storage appends, not a
client's sends: the broker coalesces concurrent sends to a queue into one
append (``broker.processor.coalescer``), and under ``rip5 bench e2e``'s load
(64 sends of 32 in flight, the same 2,048 messages in flight as 32 appends
of 64 here) its appends carried 49-59 messages on average (per 500
appends; medians 32-64, 90th percentile 96).
``--batch 16`` measures smaller calls.

Each run starts a fresh cluster. With ``--leaders balanced`` (the default)
it has a nameserver, as a deployed cluster does, and the phases start once
its leader balance has each node leading about G/3 groups: a node leading
most groups does most of the leaders' work, so runs whose elections fell
unevenly measure that node (``--leaders elected`` keeps them as they fell).
The topic is created at that nameserver first: a group leader drops the data
of a topic its nameserver does not list (``storage_node.retention``), so an
unlisted topic would lose its queues mid-run. The nameserver's CPU counts as
server CPU. Medians and [min-max] over the runs.

A receive+ack phase that delivers nothing for ``STALL_S`` while messages are
still to come fails, naming the queues and how many each still owes, instead
of asking forever.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import methodcaller
from pathlib import Path

import uvloop

from protocol.nameserver_api import CreateTopicRequest
from protocol.records import MessageRecord, pack_records, unpack_records
from protocol.storage_api import AckRequest, AppendRequest, ReceiptHandle, ReceiveRequest
from rip5 import stats
from rip5.bench import harness
from rip5.bench.nameserver import CLUSTER, LocalNameservers
from rip5.bench.storage_cluster import LocalStorageCluster

TOPIC = "bench"
METRICS = (
    harness.Metric("messages_per_s", "msgs/s"),
    harness.Metric("p50_ms", "p50 ms", ".1f"),
    harness.Metric("p99_ms", "p99 ms", ".1f"),
    harness.Metric("calls", "calls"),
)
INVISIBLE_MS = 60_000
"""How long a received message stays invisible to the bench's consumer group."""
STALL_S = INVISIBLE_MS / 1000 + 30
"""Seconds without a delivery after which the receive+ack phase fails: longer than a
message stays invisible, so messages whose ack was refused (they come back once
their invisibility ends) are waited for."""


@dataclass
class PhaseResult:
    """One measured phase of one run."""

    messages_per_s: float
    p50_ms: float
    p99_ms: float
    calls: int


def _split(leaders: Mapping[int, int], nodes: Iterable[int]) -> str:
    """How many groups each node led when the run started, e.g. ``6/5/5``.

    The runs of one command spread mostly with this: a node leading most
    groups does most of the leaders' work (elections place leaders at random).
    """
    led = list(leaders.values())
    return "/".join(str(led.count(node)) for node in sorted(nodes))


def _server_pids(
    cluster: LocalStorageCluster, nameservers: LocalNameservers
) -> Callable[[], list[int]]:
    """The storage nodes' and the nameserver's pids (the nameserver's CPU counts too)."""
    return lambda: [p.pid for p in (*cluster.processes.values(), *nameservers.processes.values())]


async def _append_phase(
    cluster: LocalStorageCluster, args: argparse.Namespace, appended: dict[int, int]
) -> PhaseResult:
    loop = asyncio.get_running_loop()
    measure_from = loop.time() + args.warmup
    end = measure_from + args.seconds
    body = os.urandom(args.message_bytes)
    latencies: list[float] = []
    measured = 0
    next_queue = 0
    groups = {q: cluster.group_of(TOPIC, q) for q in range(args.queues)}

    async def worker(worker_id: int) -> None:
        nonlocal measured, next_queue
        serial = 0
        while loop.time() < end:
            queue_id = next_queue % args.queues
            next_queue += 1
            records = [
                MessageRecord(TOPIC, queue_id, f"w{worker_id}-{serial + i}", body)
                for i in range(args.batch)
            ]
            serial += args.batch
            request = AppendRequest(TOPIC, queue_id, records=pack_records(records))
            sent = loop.time()
            response = await cluster.call(methodcaller("append", request), group=groups[queue_id])
            done = loop.time()
            answered = len(response.queued_ids or response.listed)
            if answered != args.batch:
                raise RuntimeError(f"an append of {args.batch} got {answered} outcomes")
            appended[queue_id] = appended.get(queue_id, 0) + args.batch
            if sent >= measure_from and done <= end:
                latencies.append((done - sent) * 1000)
                measured += args.batch

    await asyncio.gather(*(worker(i) for i in range(args.in_flight)))
    return PhaseResult(
        measured / args.seconds,
        stats.percentile(latencies, 0.5),
        stats.percentile(latencies, 0.99),
        len(latencies),
    )


async def _consume_phase(
    cluster: LocalStorageCluster, args: argparse.Namespace, appended: dict[int, int]
) -> PhaseResult:
    loop = asyncio.get_running_loop()
    remaining = dict(appended)
    pending = sorted(remaining)
    latencies: list[float] = []
    consumed = 0
    refused = 0
    last_delivery = loop.time()
    stalled = ""
    groups = {q: cluster.group_of(TOPIC, q) for q in range(args.queues)}

    async def worker() -> None:
        nonlocal consumed, refused, last_delivery, stalled
        while pending and not stalled:
            queue_id = pending.pop(0)
            request = ReceiveRequest(
                "bench-group", TOPIC, queue_id, args.batch, INVISIBLE_MS, packed=True
            )
            sent = loop.time()
            received = await cluster.call(methodcaller("receive", request), group=groups[queue_id])
            deliveries = received.deliveries
            if not deliveries and sent - last_delivery > STALL_S:
                owed = {q: n for q, n in sorted(remaining.items()) if n > 0}
                stalled = (
                    f"receive+ack stalled: no delivery for {STALL_S:.0f} s while queues "
                    f"{owed} (queue: messages) still owe {sum(owed.values())} of the "
                    f"{sum(appended.values())} appended; {refused} acked messages were refused"
                )
            if deliveries:
                last_delivery = sent
                # As the broker does: the records decoded, one per delivery.
                if len(unpack_records(received.records).records) != len(deliveries):
                    raise RuntimeError("a packed receive answer lacks records")
                ack = AckRequest(
                    "bench-group",
                    TOPIC,
                    queue_id,
                    [ReceiptHandle(*delivery[:4]) for delivery in deliveries],
                )
                answer = await cluster.call(methodcaller("ack", ack), group=groups[queue_id])
                refused += sum(1 for outcome in answer.outcomes if outcome.error_code)
                latencies.append((loop.time() - sent) * 1000)
                consumed += len(deliveries)
                remaining[queue_id] -= len(deliveries)
            if remaining[queue_id] > 0:
                pending.append(queue_id)

    start = loop.time()
    await asyncio.gather(*(worker() for _ in range(min(args.in_flight, len(pending)))))
    if stalled:
        raise RuntimeError(stalled)
    elapsed = loop.time() - start
    return PhaseResult(
        consumed / elapsed if elapsed > 0 else 0.0,
        stats.percentile(latencies, 0.5),
        stats.percentile(latencies, 0.99),
        len(latencies),
    )


def _values(phase: PhaseResult) -> dict[str, float]:
    return {
        "messages_per_s": phase.messages_per_s,
        "p50_ms": phase.p50_ms,
        "p99_ms": phase.p99_ms,
        "calls": phase.calls,
    }


async def _bench(args: argparse.Namespace, report: harness.BenchReport) -> int:
    print(
        f"# rip5 bench storage  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC  "
        f"cores={os.cpu_count()}  nodes=3  fsync=on  message={args.message_bytes} B  "
        f"batch={args.batch}  in_flight={args.in_flight}  groups={args.groups}  "
        f"queues={args.queues}  leaders={args.leaders}  runs={args.runs} x {args.seconds} s",
        flush=True,
    )
    appends: list[PhaseResult] = []
    consumes: list[PhaseResult] = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="rip5-bench-storage-", dir=args.dir) as root:
            nameservers = LocalNameservers(Path(root), 1, groups=args.groups)
            if args.leaders == "balanced":
                await nameservers.start()
            cluster = LocalStorageCluster(
                Path(root),
                nodes=3,
                groups=args.groups,
                nameserver=nameservers.leader if args.leaders == "balanced" else "",
            )
            await cluster.start()
            try:
                if args.leaders == "balanced":
                    leaders = await cluster.wait_balanced(timeout_s=120)
                    # Listed at the nameserver, or the group leaders drop its data.
                    request = CreateTopicRequest(TOPIC, CLUSTER, args.queues)
                    await nameservers.stub().create_topic(request, timeout_ms=10_000)
                else:
                    leaders = await cluster.wait_all_led(timeout_s=120)
                split = _split(leaders, cluster.processes)
                meter = harness.CpuMeter(_server_pids(cluster, nameservers))
                appended: dict[int, int] = {}
                report.stage(f"run {run + 1}: append")
                meter.start()
                append = await _append_phase(cluster, args, appended)
                report.record("append", _values(append), meter.stop())
                report.stage(f"run {run + 1}: receive+ack")
                meter.start()
                consume = await _consume_phase(cluster, args, appended)
                report.record("receive+ack", _values(consume), meter.stop())
            finally:
                await cluster.stop()
                await nameservers.stop()
        appends.append(append)
        consumes.append(consume)
        print(
            f"  run {run + 1}: append {append.messages_per_s:,.0f} msgs/s "
            f"p50 {append.p50_ms:.1f} ms p99 {append.p99_ms:.1f} ms ({append.calls} calls); "
            f"receive+ack {consume.messages_per_s:,.0f} msgs/s p99 {consume.p99_ms:.1f} ms "
            f"({consume.calls} pairs); groups led per node {split}",
            flush=True,
        )
    print(
        "append msgs/s "
        + harness.median_range([r.messages_per_s for r in appends], ",.0f")
        + "  p50 ms "
        + harness.median_range([r.p50_ms for r in appends], ".1f")
        + "  p99 ms "
        + harness.median_range([r.p99_ms for r in appends], ".1f"),
        flush=True,
    )
    print(
        "receive+ack msgs/s "
        + harness.median_range([r.messages_per_s for r in consumes], ",.0f")
        + "  p99 ms "
        + harness.median_range([r.p99_ms for r in consumes], ".1f"),
        flush=True,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and run the benchmark."""
    parser = argparse.ArgumentParser(prog="rip5 bench storage", description=__doc__)
    parser.add_argument("--groups", type=int, default=16, help="raft groups (every node)")
    parser.add_argument("--queues", type=int, default=32, help="queues of the bench topic")
    parser.add_argument("--message-bytes", type=int, default=1024, help="body size")
    parser.add_argument(
        "--batch",
        type=int,
        default=64,
        help="messages per append / receive (64: about what a broker's coalesced appends "
        "carry under the e2e bench's load, which keeps as many messages in flight)",
    )
    parser.add_argument("--in-flight", type=int, default=32, help="concurrent calls")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured append window")
    parser.add_argument("--warmup", type=float, default=2.0, help="append warm-up seconds")
    parser.add_argument("--runs", type=int, default=3, help="fresh clusters, one after another")
    parser.add_argument("--dir", default=None, help="where the clusters' data folders go")
    parser.add_argument(
        "--leaders",
        choices=("balanced", "elected"),
        default="balanced",
        help="balanced: a nameserver balances leadership (each node leads about G/3 groups) "
        "before measuring, as in a cluster with a nameserver; elected: as the elections "
        "fell, no nameserver",
    )
    harness.add_arguments(parser)
    args = parser.parse_args(argv)
    for name in ("groups", "queues", "message_bytes", "batch", "in_flight", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    params = {k: v for k, v in vars(args).items() if k not in ("json", "no_progress")}
    report = harness.BenchReport(
        "storage",
        list(argv or []),
        METRICS,
        params=params,
        json_path=args.json,
        show_progress=not args.no_progress,
    )
    with report.progress(2 * args.runs):
        code = uvloop.run(_bench(args, report))
    report.finish()
    return code
