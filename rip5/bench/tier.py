"""``rip5 bench tier``: publishing with the tier on vs off, upload throughput, cold reads.

In one sitting, two fresh clusters (one nameserver, 3 storage nodes, raft,
fsync on), the first without a tier, the second with ``--tier-url file://``
(a folder under ``--dir``; the uploader's default batches). Topic ``bench``
is created through the nameserver with ``--local-retention-ms 1`` (what is in
the tier leaves the local disks). Then, on each:

1. publish: ``in_flight`` workers append batches of ``batch`` messages of
   ``message_bytes`` to the queues round robin, each on its group's leader,
   for ``seconds`` (``rip5 bench replication``'s publisher): messages/s.
   The tier's figure over the off figure is the cost of the tier (target:
   within 10%). With it, the storage nodes' CPU (all three processes, from
   /proc) per message acknowledged: over the publish window, and (tier on)
   from the publish's start until every message is in the tier, so the
   uploads' whole cost is counted.
2. uploads (tier on): from the publish's start until every queue's upload
   point reached its end (``queue_info``'s ``tier_upload_point``, from the
   leaders): messages uploaded per second over that time, and the lag left
   when the publish ended; and the messages uploaded by the publish's end per
   second of the publish, with the catch-up time after it. Uploads keep up when
   the rate during the publish matches the publish rate (the lag stays about
   one batch per queue) and the catch-up is about one batch wait
   (``--tier-batch-wait-ms``): the last messages of a queue wait for it.
3. cold reads (tier on): once the local trims passed the data, every queue
   is read from offset 0 (``storage.read``, 1000 messages a call, one queue
   after the other) while all of it lies in the tier only: messages/s and
   MB/s of bodies. The read cache (64 MiB per node) is cold for the oldest
   data; a run publishing less than that reads partly from the cache.

Appends and reads go straight to the storage nodes (no broker). On a shared
machine the figures are indicative only.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import uvloop

from angelia_rpc.nameserver_client import NameserverClient
from protocol import nameserver_api as ns
from protocol.storage_api import QueueInfoRequest, QueueInfoResponse, ReadRequest, ReadResponse
from rip5.admin import DEFAULT_CLUSTER
from rip5.bench import harness
from rip5.bench.nameserver import LocalNameservers
from rip5.bench.replication import TOPIC
from rip5.bench.replication import _publish as publish
from rip5.bench.storage_cluster import LocalStorageCluster

METRICS = (
    harness.Metric("messages_per_s", "publish msgs/s"),
    harness.Metric("storage_cpu_us_per_message", "storage CPU us/msg (publish)", ".1f"),
    harness.Metric("storage_cpu_us_per_message_uploaded", "storage CPU us/msg (to tier)", ".1f"),
    harness.Metric("upload_messages_per_s", "upload msgs/s"),
    harness.Metric("upload_messages_per_s_during_publish", "upload msgs/s in publish"),
    harness.Metric("catch_up_s", "catch-up s", ".1f"),
    harness.Metric("lag_at_publish_end", "lag at publish end (msgs)", ",.0f"),
    harness.Metric("cold_read_messages_per_s", "cold read msgs/s"),
    harness.Metric("cold_read_mb_per_s", "cold read MB/s", ".1f"),
)
READ_COUNT = 1000
"""Messages one cold read asks for."""


@dataclass
class ModeResult:
    """What one cluster measured (-1: not measured in this mode)."""

    messages_per_s: float
    storage_cpu_us_per_message: float = -1
    storage_cpu_us_per_message_uploaded: float = -1
    upload_messages_per_s: float = -1
    upload_messages_per_s_during_publish: float = -1
    catch_up_s: float = -1
    lag_at_publish_end: float = -1
    cold_read_messages_per_s: float = -1
    cold_read_mb_per_s: float = -1


async def _create_topic(nameserver: str, queues: int) -> None:
    client = NameserverClient([nameserver])
    try:
        request = ns.CreateTopicRequest(TOPIC, DEFAULT_CLUSTER, queues, local_retention_ms=1)
        await client.call(lambda s: s.create_topic(request, timeout_ms=5000))
    finally:
        await client.close()


async def _queue_info(storage: LocalStorageCluster, queue_id: int) -> QueueInfoResponse:
    request = QueueInfoRequest(TOPIC, queue_id)
    return await storage.call(
        lambda stub: stub.queue_info(request), group=storage.group_of(TOPIC, queue_id)
    )


async def _lag(storage: LocalStorageCluster, queues: int) -> int:
    """Messages published and not yet in the tier, over the queues."""
    infos = [await _queue_info(storage, q) for q in range(queues)]
    return sum(max(0, i.end_offset - max(i.tier_upload_point, 0)) for i in infos)


async def _wait(what: str, done: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    """Until ``done()`` holds; TimeoutError naming ``what`` past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s} s")
        await asyncio.sleep(0.1)


async def _read(storage: LocalStorageCluster, queue_id: int, offset: int) -> ReadResponse:
    request = ReadRequest(TOPIC, queue_id, offset, READ_COUNT, 16 << 20)
    return await storage.call(
        lambda stub: stub.read(request), group=storage.group_of(TOPIC, queue_id)
    )


async def _cold_read(storage: LocalStorageCluster, queues: int) -> tuple[int, int]:
    """Every queue read from 0 to its end; (messages, body bytes)."""
    messages = body_bytes = 0
    for queue_id in range(queues):
        end = (await _queue_info(storage, queue_id)).end_offset
        offset = 0
        while offset < end:
            response = await _read(storage, queue_id, offset)
            if response.next_offset <= offset:
                raise RuntimeError(f"queue {queue_id}: a read at {offset} made no progress")
            messages += len(response.messages)
            body_bytes += sum(len(m.message.body) for m in response.messages)
            offset = response.next_offset
    return messages, body_bytes


async def _run_mode(
    tier_on: bool, args: argparse.Namespace, report: harness.BenchReport
) -> ModeResult:
    name = "tier on" if tier_on else "tier off"
    with tempfile.TemporaryDirectory(prefix="rip5-bench-tier-", dir=args.dir) as folder:
        root = Path(folder)
        flags: tuple[str, ...] = ("--retention-check-ms", "500")
        if tier_on:
            flags += ("--tier-url", f"file://{root / 'tier'}")
        nameservers = LocalNameservers(root, 1, groups=args.groups)
        storage: LocalStorageCluster | None = None
        try:
            await nameservers.start()
            storage = LocalStorageCluster(
                root, 3, args.groups, nameserver=nameservers.leader, static=False, flags=flags
            )
            await storage.start()
            await storage.wait_all_led()
            await _create_topic(nameservers.leader, args.queues)
            report.stage(f"{name}: publish")
            pids = harness.pids_of(storage.processes)
            cpu_at_start = _cpu_seconds(pids())
            started = time.monotonic()
            acked = await publish(storage, args)
            elapsed = time.monotonic() - started
            result = ModeResult(acked / elapsed)
            result.storage_cpu_us_per_message = _us_per(cpu_at_start, pids(), acked)
            if tier_on:
                report.stage("tier on: uploads")
                result.lag_at_publish_end = await _lag(storage, args.queues)
                result.upload_messages_per_s_during_publish = (
                    acked - result.lag_at_publish_end
                ) / elapsed
                await _wait("the uploads", lambda: _uploaded(storage, args.queues), 600)
                result.catch_up_s = time.monotonic() - started - elapsed
                result.upload_messages_per_s = acked / (time.monotonic() - started)
                result.storage_cpu_us_per_message_uploaded = _us_per(cpu_at_start, pids(), acked)
                report.stage("tier on: cold reads")
                await _wait("the local trims", lambda: _trimmed(storage, args.queues), 120)
                read_started = time.monotonic()
                messages, body_bytes = await _cold_read(storage, args.queues)
                read_s = time.monotonic() - read_started
                result.cold_read_messages_per_s = messages / read_s
                result.cold_read_mb_per_s = body_bytes / read_s / 1e6
        finally:
            if storage is not None:
                await storage.stop()
            await nameservers.stop()
    report.record(name, {k: v for k, v in vars(result).items() if v >= 0})
    return result


def _cpu_seconds(pids: Sequence[int]) -> dict[int, float]:
    """CPU seconds so far of each live process of ``pids``."""
    seconds = {pid: harness.cpu_seconds_of(pid) for pid in pids}
    return {pid: value for pid, value in seconds.items() if value is not None}


def _us_per(at_start: dict[int, float], pids: Sequence[int], messages: int) -> float:
    """CPU microseconds the processes ``pids`` used since ``at_start``, per message."""
    now = _cpu_seconds(pids)
    used = sum(now[pid] - at_start.get(pid, 0.0) for pid in now)
    return used * 1e6 / max(1, messages)


async def _uploaded(storage: LocalStorageCluster, queues: int) -> bool:
    return await _lag(storage, queues) == 0


async def _trimmed(storage: LocalStorageCluster, queues: int) -> bool:
    """Whether every queue's local log lost its uploaded messages (all in the tier only)."""
    for queue_id in range(queues):
        info = await _queue_info(storage, queue_id)
        if info.local_first_offset < info.tier_upload_point:
            return False
    return True


async def _bench(args: argparse.Namespace, report: harness.BenchReport) -> int:
    print(
        f"# rip5 bench tier  {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC  "
        f"cores={os.cpu_count()}  fsync=on  message={args.message_bytes} B  "
        f"batch={args.batch}  in_flight={args.in_flight}  groups={args.groups}  "
        f"queues={args.queues}  {args.seconds} s",
        flush=True,
    )
    off = await _run_mode(False, args, report)
    on = await _run_mode(True, args, report)
    print(
        f"  publish: tier off {off.messages_per_s:,.0f} msgs/s, tier on "
        f"{on.messages_per_s:,.0f} msgs/s ({on.messages_per_s / off.messages_per_s:.0%})\n"
        f"  storage CPU per message: tier off {off.storage_cpu_us_per_message:.1f} us, "
        f"tier on {on.storage_cpu_us_per_message:.1f} us over the publish, "
        f"{on.storage_cpu_us_per_message_uploaded:.1f} us until all was in the tier\n"
        f"  uploads: {on.upload_messages_per_s:,.0f} msgs/s from the publish's start to "
        f"all in the tier (lag {on.lag_at_publish_end:,.0f} msgs when the publish ended); "
        f"{on.upload_messages_per_s_during_publish:,.0f} msgs/s uploaded during the publish, "
        f"all in the tier {on.catch_up_s:.1f} s after it\n"
        f"  cold reads: {on.cold_read_messages_per_s:,.0f} msgs/s, "
        f"{on.cold_read_mb_per_s:.1f} MB/s",
        flush=True,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and run the benchmark."""
    parser = argparse.ArgumentParser(prog="rip5 bench tier", description=__doc__)
    parser.add_argument("--groups", type=int, default=8, help="groups of the cluster")
    parser.add_argument("--queues", type=int, default=8, help="queues appended to")
    parser.add_argument("--message-bytes", type=int, default=1024, help="body size")
    parser.add_argument("--batch", type=int, default=64, help="messages per append")
    parser.add_argument("--in-flight", type=int, default=16, help="concurrent appends")
    parser.add_argument("--seconds", type=float, default=10.0, help="publish window")
    parser.add_argument("--dir", default=None, help="where the clusters' folders go")
    harness.add_arguments(parser)
    args = parser.parse_args(argv)
    for name in ("groups", "queues", "message_bytes", "batch", "in_flight"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    params = {k: v for k, v in vars(args).items() if k not in ("json", "no_progress")}
    report = harness.BenchReport(
        "tier",
        list(argv or []),
        METRICS,
        params=params,
        json_path=args.json,
        show_progress=not args.no_progress,
    )
    with report.progress(4):
        code = uvloop.run(_bench(args, report))
    report.finish()
    return code
