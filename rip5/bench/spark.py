"""``rip5 bench spark``: snapshot writing, and Spark reading stored messages.

Three ``rip5 storage`` processes on 127.0.0.1 (fsync on) replicate
``groups`` raft groups; topic ``bench`` (``queues`` queues) is loaded with
``messages`` messages of ``message_bytes`` random bytes each (no two alike),
appended as packed records, ``batch`` per append. Then:

1. snapshot, ``runs`` times: every group's leader exports its queues
   (``storage.export_snapshot``, all groups at once, as ``rip5 admin
   snapshot create`` asks them) into a fresh folder, and the manifest is
   written; the figure is the objects' MB / wall seconds, with the storage
   nodes' CPU;
2. the anchor: the last snapshot's rows are written once as Parquet with
   pyarrow (zstd), read through the data source's own functions, so both
   sides hold the same rows;
3. Spark (``--master``, default ``local[2]``): ``count(*)`` and
   ``sum(length(body))`` over the snapshot (format ``rip5``) read twice,
   all thirteen columns and only ``body`` (``.schema("body binary")``: the
   reader yields only that column), and over the Parquet copy (which reads
   only ``body`` by itself), each run once to warm up, then timed ``runs``
   times.

The issue's goals for 1,000,000 1 KiB messages: the rip5 read in at most
4 s, and at most 3x the Parquet read of the same rows.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import tempfile
import time
from collections.abc import Sequence
from operator import methodcaller
from pathlib import Path
from typing import Any

import uvloop

from protocol.message_objects import GroupPoint, Manifest, QueueManifest
from protocol.object_store import open_location
from protocol.records import MessageRecord, pack_records
from protocol.storage_api import AppendRequest, ExportSnapshotRequest, ExportSnapshotResponse
from rip5.bench import harness
from rip5.bench.storage_cluster import LocalStorageCluster
from rip5.snapshot import block_bytes_max, write_manifest

TOPIC = "bench"
METRICS = (
    harness.Metric("mb_per_s", "MB/s", ".1f"),
    harness.Metric("seconds", "s", ".2f"),
    harness.Metric("messages", "messages"),
    harness.Metric("ratio", "x parquet", ".2f"),
)


async def _load(cluster: LocalStorageCluster, args: argparse.Namespace) -> None:
    """Append the messages, ``in_flight`` appends at a time, queues in turn.

    Every message gets its own random body, as real messages have: with one body
    for all, the Parquet anchor stores a single dictionary value (180 KB for 1 GB of
    rows) and Spark never reads the bodies, which is no anchor for a read of 1 GB."""
    size = args.message_bytes
    batches = [
        (start, min(args.batch, args.messages - start))
        for start in range(0, args.messages, args.batch)
    ]
    pending = iter(enumerate(batches))

    async def worker() -> None:
        for number, (start, count) in pending:
            queue_id = number % args.queues
            bodies = os.urandom(count * size)
            records = [
                MessageRecord(
                    TOPIC,
                    queue_id,
                    f"m{start + i}",
                    bodies[i * size : (i + 1) * size],
                    tag=f"t{i % 4}",
                )
                for i in range(count)
            ]
            request = AppendRequest(TOPIC, queue_id, records=pack_records(records))
            await cluster.call(
                methodcaller("append", request), group=cluster.group_of(TOPIC, queue_id)
            )

    await asyncio.gather(*(worker() for _ in range(args.in_flight)))


async def _export(
    cluster: LocalStorageCluster, url: str, object_bytes: int
) -> list[ExportSnapshotResponse]:
    """Every group's export into ``url``, all at once (leaders followed)."""
    groups = range(1, cluster.groups + 1)

    async def one(group_id: int) -> ExportSnapshotResponse:
        request = ExportSnapshotRequest(
            group_id, url, [TOPIC], object_bytes, block_bytes_max(object_bytes)
        )
        response: ExportSnapshotResponse = await cluster.call(
            lambda stub: stub.export_snapshot(request, timeout_ms=3_600_000), timeout_s=3600
        )
        return response

    return list(await asyncio.gather(*(one(g) for g in groups)))


async def _snapshots(
    args: argparse.Namespace, report: harness.BenchReport, root: Path
) -> tuple[Path, int]:
    """Load the cluster and export it ``runs`` times; the last snapshot and its size."""
    cluster = LocalStorageCluster(root / "cluster", nodes=3, groups=args.groups)
    await cluster.start()
    try:
        await cluster.wait_all_led(timeout_s=120)
        report.stage("load")
        started = time.perf_counter()
        await _load(cluster, args)
        loaded_s = time.perf_counter() - started
        report.say(f"  loaded {args.messages:,} messages in {loaded_s:.1f} s")
        meter = harness.CpuMeter(harness.pids_of(cluster.processes))
        folder = root
        size = 0
        for run in range(args.runs):
            folder = root / f"snapshot-{run + 1}"
            report.stage(f"run {run + 1}: snapshot")
            meter.start()
            started = time.perf_counter()
            responses = await _export(cluster, str(folder), int(args.object_mb * 1e6))
            elapsed = time.perf_counter() - started
            cpu = meter.stop()
            queues: list[QueueManifest] = sorted(
                (q for r in responses for q in r.queues), key=lambda q: q.queue_id
            )
            points = [GroupPoint(r.group_id, r.applied_index) for r in responses]
            messages = sum(q.message_count for q in queues)
            if messages != args.messages:
                raise RuntimeError(f"the snapshot holds {messages} messages, not {args.messages}")
            size = sum(q.size_bytes for q in queues)
            _write_manifest(folder, Manifest(folder.name, int(time.time() * 1000), queues, points))
            report.record(
                "snapshot write",
                {"mb_per_s": size / 1e6 / elapsed, "seconds": elapsed, "messages": messages},
                cpu,
            )
            report.say(
                f"  run {run + 1}: snapshot {size / 1e6:.1f} MB in {elapsed:.2f} s "
                f"({size / 1e6 / elapsed:.1f} MB/s)"
            )
    finally:
        await cluster.stop()
    return folder, size


def _write_manifest(folder: Path, manifest: Manifest) -> None:
    write_manifest(*open_location(str(folder), {}), manifest)


def _parquet_copy(snapshot: Path, out: Path) -> None:
    """The snapshot's rows as one Parquet file, written block by block."""
    import pyarrow.parquet as pq  # noqa: PLC0415

    from spark_batch.source import (  # noqa: PLC0415 - the spark extra
        ARROW_SCHEMA,
        ObjectPartition,
        Rip5Reader,
        read_object,
        to_arrow,
    )

    reader = Rip5Reader({"path": str(snapshot)})
    fs, root = open_location(str(snapshot), {})
    with pq.ParquetWriter(out, ARROW_SCHEMA, compression="zstd") as writer:
        for partition in reader.partitions():
            assert isinstance(partition, ObjectPartition)
            for block, lo, hi in read_object(fs, root, partition):
                writer.write_batch(
                    to_arrow(partition.topic, partition.queue_id, block, lo, hi, partition.window)
                )


def _timed_query(df: Any) -> tuple[float, int, int]:
    """Seconds of ``count(*), sum(length(body))`` over ``df``, and the two results."""
    started = time.perf_counter()
    (row,) = df.selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()
    return time.perf_counter() - started, int(row.n), int(row.b or 0)


def _reads(
    args: argparse.Namespace, report: harness.BenchReport, snapshot: Path, session: Any
) -> None:
    from spark_batch.session import spark_session  # noqa: PLC0415 - the spark extra

    parquet = snapshot.parent / "anchor.parquet"
    report.stage("parquet copy")
    _parquet_copy(snapshot, parquet)
    # Warm reads of a million rows: a driver JVM with its full compiler.
    spark = session or spark_session(args.master, "rip5 bench spark", quick_start=False)
    try:
        reads = {
            "rip5": spark.read.format("rip5").load(str(snapshot)),
            # The query needs only body: the reader yields only it (Spark prunes
            # nothing for a Python source itself).
            "rip5 body": spark.read.format("rip5").schema("body binary").load(str(snapshot)),
            "parquet": spark.read.parquet(str(parquet)),
        }
        want = (args.messages, args.messages * args.message_bytes)
        for df in reads.values():  # warm-up: workers started, classes loaded
            _seconds, count, size = _timed_query(df)
            if (count, size) != want:
                raise RuntimeError(f"a read counted {count} messages, {size} bytes; want {want}")
        for run in range(args.runs):
            report.stage(f"run {run + 1}: spark reads")
            seconds = {name: _timed_query(df)[0] for name, df in reads.items()}
            parquet_s = seconds["parquet"]
            for name, elapsed in seconds.items():
                figures: dict[str, float] = {"seconds": elapsed, "messages": args.messages}
                if name != "parquet":
                    figures["ratio"] = elapsed / parquet_s
                report.record(f"spark read {name}", figures)
            report.say(
                f"  run {run + 1}: count+sum(length(body)) rip5 all columns "
                f"{seconds['rip5']:.2f} s ({seconds['rip5'] / parquet_s:.2f}x), "
                f"rip5 body only {seconds['rip5 body']:.2f} s "
                f"({seconds['rip5 body'] / parquet_s:.2f}x), parquet {parquet_s:.2f} s"
            )
    finally:
        if session is None:  # a session of its own; the caller's stays up
            spark.stop()


def main(argv: Sequence[str] | None = None, session: Any = None) -> int:
    """Parse the options and run the benchmark; ``session``: a Spark session to read with
    (the test suite's one session), else the bench starts its own on ``--master``."""
    parser = argparse.ArgumentParser(prog="rip5 bench spark", description=__doc__)
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages stored")
    parser.add_argument("--message-bytes", type=int, default=1024, help="body size")
    parser.add_argument("--groups", type=int, default=8, help="raft groups (every node)")
    parser.add_argument("--queues", type=int, default=8, help="queues of the bench topic")
    parser.add_argument("--batch", type=int, default=256, help="messages per append")
    parser.add_argument("--in-flight", type=int, default=16, help="concurrent appends")
    parser.add_argument("--object-mb", type=float, default=64.0, help="about one object's size")
    parser.add_argument("--master", default="local[2]", help="Spark master")
    parser.add_argument("--runs", type=int, default=3, help="timed snapshots and reads")
    parser.add_argument("--dir", default=None, help="where the cluster and snapshots go")
    harness.add_arguments(parser)
    args = parser.parse_args(argv)
    for name in ("messages", "message_bytes", "groups", "queues", "batch", "in_flight", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    params = {k: v for k, v in vars(args).items() if k not in ("json", "no_progress")}
    report = harness.BenchReport(
        "spark",
        list(argv or []),
        METRICS,
        params=params,
        json_path=args.json,
        show_progress=not args.no_progress,
    )
    report.say(
        f"# rip5 bench spark  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC  "
        f"cores={os.cpu_count()}  messages={args.messages}  message={args.message_bytes} B  "
        f"groups={args.groups}  queues={args.queues}  master={args.master}  runs={args.runs}"
    )
    with (
        tempfile.TemporaryDirectory(prefix="rip5-bench-spark-", dir=args.dir) as root,
        report.progress(4 * args.runs),
    ):
        snapshot, _size = uvloop.run(_snapshots(args, report, Path(root)))
        _reads(args, report, snapshot, session)
    report.finish()
    return 0
