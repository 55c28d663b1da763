"""``storage.export_snapshot`` over a one-node raft driver (real WAL in tmp_path).

The export writes every message of the chosen queues, as the storage API
reads them, into message objects; it stops at the ends the queues had when
it started, however much is appended meanwhile; it refuses sizes it cannot
honour and names the queue when the destination cannot be written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from protocol import message_objects as mo
from protocol.storage_api import AppendRequest, ExportSnapshotRequest, Message, ReadRequest
from raft.host.angelia_transport import AngeliaTransport
from raft.host.driver import Driver, DriverOptions
from raft.wal.logstore import LogStore
from storage_node import snapshot_export
from storage_node.errors import BadCommand, ExportFailed
from storage_node.partition.reads import record_items_of
from storage_node.replica import GroupReplica
from storage_node.service import StorageNode
from storage_node.store.segment_files import WalBodyStore
from tests.unit.storage_node.partition.harness import Harness
from tests.unit.storage_node.partition.harness import record as message_record
from tests.unit.storage_node.test_service import CONTEXT, one_node
from tests.waiting import async_wait_until

WAL_BODIES = [False, True]
"""Whether the node's replicas read bodies from the WAL (as a storage process does:
the export reads segment files in its thread) or keep them in memory."""


@contextlib.asynccontextmanager
async def node_with(data_dir: Path, wal_bodies: bool) -> AsyncIterator[StorageNode]:
    """A one-node storage service; with ``wal_bodies``, replicas over the WAL store."""
    if not wal_bodies:
        async with one_node(data_dir) as node:
            yield node
        return
    store = LogStore.open(data_dir, segment_bytes=1 << 20)
    driver = Driver(1, store, AngeliaTransport(1, {}), DriverOptions(tick_ms=10, seed=1))
    replicas = {g: GroupReplica(g, WalBodyStore(store)) for g in (1, 2)}
    for group_id, replica in replicas.items():
        driver.add_group(group_id, [1], replica)
    node = StorageNode(driver, store, replicas, 2, {1: "127.0.0.1:1"})
    await driver.start()
    try:
        await async_wait_until(
            lambda: all(driver.host.node(g).is_leader() for g in replicas), 10, "leadership"
        )
        yield node
    finally:
        await driver.stop()


def _messages(queue_id: int, first: int, count: int) -> list[Message]:
    return [
        Message(
            "t",
            queue_id,
            f"m{queue_id}-{i}",
            b"body %d " % i * (1 + i % 5),
            tag="a" if i % 2 else "",
            keys=[f"k{i}"],
            properties={"i": str(i)},
        )
        for i in range(first, first + count)
    ]


def _read_objects(root: Path, queue: mo.QueueManifest) -> list[tuple[int, int, Message]]:
    rows = []
    for entry in queue.objects:
        data = (root / entry.name).read_bytes()
        assert len(data) == entry.size_bytes
        footer = mo.decode_footer(data, entry.name, len(data))
        for block in footer.blocks:
            part = data[block.position : block.position + block.length]
            decoded = mo.decode_block(part, block, entry.name)
            for i, record in enumerate(mo.block_records(decoded)):
                rows.append((decoded.first_offset + i, decoded.store_timestamps_ms[i], record))
    return [
        (
            offset,
            stored,
            Message(
                *record[:5],
                list(record.keys),
                record.message_group,
                dict(record.properties),
                record.born_timestamp_ms,
            ),
        )
        for offset, stored, record in rows
    ]


async def _stored(node: StorageNode, queue_id: int, end: int) -> list[tuple[int, int, Message]]:
    read = await node.read(ReadRequest("t", queue_id, 0, end), CONTEXT)
    return [(m.queue_offset, m.store_timestamp_ms, m.message) for m in read.messages]


@pytest.fixture
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slices of a few messages, so an export takes many turns of the event loop."""
    monkeypatch.setattr(snapshot_export, "SLICE_MESSAGES", 7)
    monkeypatch.setattr(snapshot_export, "SLICE_BYTES", 300)


@pytest.mark.parametrize("wal_bodies", WAL_BODIES)
async def test_export_writes_what_the_storage_api_reads(
    tmp_path: Path, small_slices: Any, wal_bodies: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranges_read: list[int] = []
    read_file_ranges = snapshot_export.read_file_ranges

    def counted(ranges: Any) -> dict[int, bytes]:
        read = read_file_ranges(ranges)
        ranges_read.append(len(read))
        return read

    monkeypatch.setattr(snapshot_export, "read_file_ranges", counted)
    async with node_with(tmp_path / "node", wal_bodies) as node:
        for start in range(0, 120, 30):  # several appends: entries of several log indexes
            await node.append(AppendRequest("t", 0, _messages(0, start, 30)), CONTEXT)
        await node.append(AppendRequest("t", 1, _messages(1, 0, 5)), CONTEXT)
        group = node._group_of("t", 0)
        request = ExportSnapshotRequest(group, str(tmp_path / "snap"), ["t"], 4096, 1024)
        response = await node.export_snapshot(request, CONTEXT)
        queues = {(q.topic, q.queue_id): q for q in response.queues}
        assert response.applied_index > 0
        queue = queues[("t", 0)]
        assert (queue.first_offset, queue.end_offset, queue.group_id) == (0, 120, group)
        assert len(queue.objects) > 1
        mo.check_queue(queue, "export")
        assert _read_objects(tmp_path / "snap", queue) == await _stored(node, 0, 120)
        assert queue.min_store_timestamp_ms == queue.objects[0].min_store_timestamp_ms
        if node._group_of("t", 1) == group:
            assert _read_objects(tmp_path / "snap", queues[("t", 1)]) == await _stored(node, 1, 5)
        # Over the WAL, the log entries were read from the segment files in the thread.
        assert (sum(ranges_read) > 0) == wal_bodies


@pytest.mark.parametrize("wal_bodies", WAL_BODIES)
async def test_export_stops_at_the_ends_it_started_with(
    tmp_path: Path, small_slices: Any, wal_bodies: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    sliced = asyncio.Event()  # set once the export took its ends and cuts its first slice
    slice_of = snapshot_export.slice_of

    def first_slice_seen(*args: Any) -> Any:
        sliced.set()
        return slice_of(*args)

    monkeypatch.setattr(snapshot_export, "slice_of", first_slice_seen)
    async with node_with(tmp_path / "node", wal_bodies) as node:
        await node.append(AppendRequest("t", 0, _messages(0, 0, 200)), CONTEXT)
        group = node._group_of("t", 0)
        request = ExportSnapshotRequest(group, str(tmp_path / "snap"), [], 4096, 1024)
        export = asyncio.create_task(node.export_snapshot(request, CONTEXT))
        waiting = asyncio.create_task(sliced.wait())
        await asyncio.wait([export, waiting], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        assert sliced.is_set(), export
        appended = 0
        while not export.done():  # appends race the export's remaining slices
            await node.append(AppendRequest("t", 0, _messages(0, 200 + appended, 3)), CONTEXT)
            appended += 3
        response = await export
        assert appended > 0
        (queue,) = [q for q in response.queues if q.queue_id == 0]
        assert queue.end_offset == 200
        assert _read_objects(tmp_path / "snap", queue) == await _stored(node, 0, 200)


async def test_export_refusals(tmp_path: Path) -> None:
    async with one_node(tmp_path / "node") as node:
        await node.append(AppendRequest("t", 0, _messages(0, 0, 3)), CONTEXT)
        group = node._group_of("t", 0)
        with pytest.raises(BadCommand, match="object_bytes_max"):
            await node.export_snapshot(ExportSnapshotRequest(group, str(tmp_path), [], 10), CONTEXT)
        with pytest.raises(BadCommand, match="cannot open"):
            await node.export_snapshot(ExportSnapshotRequest(group, "nosuchfs://x"), CONTEXT)
        blocked = tmp_path / "snap" / "objects"
        blocked.mkdir(parents=True)
        (blocked / "t").write_bytes(b"a file where a folder goes")
        with pytest.raises(ExportFailed, match="writing queue t:0"):
            await node.export_snapshot(
                ExportSnapshotRequest(group, str(tmp_path / "snap")), CONTEXT
            )


async def test_a_segment_gone_meanwhile_is_read_through_the_store(
    tmp_path: Path, small_slices: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def collected(ranges: Any) -> dict[int, bytes]:
        raise FileNotFoundError("the segment was collected")

    monkeypatch.setattr(snapshot_export, "read_file_ranges", collected)
    async with node_with(tmp_path / "node", wal_bodies=True) as node:
        await node.append(AppendRequest("t", 0, _messages(0, 0, 50)), CONTEXT)
        group = node._group_of("t", 0)
        request = ExportSnapshotRequest(group, str(tmp_path / "snap"), ["t"], 4096, 1024)
        response = await node.export_snapshot(request, CONTEXT)
        (queue,) = [q for q in response.queues if q.queue_id == 0]
        assert _read_objects(tmp_path / "snap", queue) == await _stored(node, 0, 50)


@pytest.mark.parametrize("block_bytes_max", [100, 700, 2048, 1 << 20])
def test_the_sink_cuts_blocks_as_if_the_messages_came_one_by_one(block_bytes_max: int) -> None:
    """Records come as runs of log entries (views, not copies), yet every block ends at
    the message that fills it, as when each message was added alone."""
    h = Harness()
    for batch in range(6):
        h.append(*(message_record(f"m{batch}-{i}", body=b"x" * (40 * i)) for i in range(1 + batch)))
    entries = list(h.state.read("orders", 0, 0, 100))
    fs = fsspec.filesystem("memory")
    sink = snapshot_export.QueueObjectSink(
        fs, "/runs", 1, ("orders", 0), 0, 1 << 40, block_bytes_max
    )
    sink.add(entries[:4], h.log)  # a slice ends inside a log entry: the next starts there
    sink.add(entries[4:], h.log)
    (entry,) = sink.close()
    expected = mo.ObjectBuilder("orders", 0, 0)
    parts, items, times = [expected.header()], [], []
    for queue_entry, item in zip(
        entries, record_items_of(h.log.__getitem__, 1, ("orders", 0), entries), strict=True
    ):
        items.append(item)
        times.append(queue_entry.store_timestamp_ms)
        if sum(map(len, items)) >= block_bytes_max:
            parts.append(expected.add_block(times, items))
            items, times = [], []
    if items:
        parts.append(expected.add_block(times, items))
    tail, expected_entry = expected.finish(entry.name)
    assert fs.cat(f"/runs/{entry.name}") == b"".join([*parts, tail])
    assert entry == expected_entry
