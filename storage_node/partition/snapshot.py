"""Snapshots of a partition state machine, so a group's log prefix can be dropped.

:func:`take_snapshot` serializes the whole state deterministically: equal
states give equal bytes, whatever order things happened in memory (maps are
written sorted or in their log-derived order). :func:`restore` rebuilds a
state that applies every later entry exactly as the original would; raft
stores the bytes as ``Snapshot.data`` at ``applied_index``.

What a snapshot does not hold: message bodies. They stay in the log entries
the queue indexes point at, so the log may be truncated below the snapshot
only where retention no longer needs those entries.

Layout: magic b"R5PS", version (1 byte), crc32c (4 bytes, over the rest),
then a msgpack array (see ``_to_wire``) of 8 items, or 9 once the group has
recorded a tier upload (the tier's metadata, ``partition.tier``). The transient ``grown_queues`` is
not kept. A group queue consumed to its end (no lease, nothing done ahead) is
written with no latest attempt (``["", 0, []]``): the state keeps it as its cursor
alone (``partition.group_queues``), and the attempt it drops named no lease. A
snapshot written before that, with such an attempt, is read as before (the
attempt dropped). Version 2 holds the dedup window by run (``DedupWindow.to_wire``);
version 1, one array per remembered entry, is still read (its window comes
back with the same entries, its runs joined as a queued append would make
them).

Cost: the queue entries and the dedup window, which hold nearly all of it,
keep their encoding by chunk (``chunks.PackedChunks``), so a snapshot packs
only what changed in them since the last one; the payload is assembled from
those pieces and is byte for byte ``msgpack.packb(_to_wire(state))``.

PURE.
"""

from __future__ import annotations

import struct

import crc32c
import msgpack

from storage_node.errors import SnapshotCorrupted
from storage_node.partition.config import PartitionConfig
from storage_node.partition.pop import GroupQueue
from storage_node.partition.queues import QueueEntry, QueueIndex, queue_key
from storage_node.partition.state import PartitionState
from storage_node.partition.wire import array_header, as_int, as_list, as_str, pack, pack_items

SNAPSHOT_MAGIC = b"R5PS"
SNAPSHOT_VERSION = 2
ENTRIES_DEDUP_VERSION = 1
"""The older version, whose dedup window is one array per entry; still read."""


def take_snapshot(state: PartitionState) -> bytes:
    """The bytes of ``state`` as of its ``applied_index``."""
    return b"".join(snapshot_parts(state))


def snapshot_parts(state: PartitionState) -> list[bytes]:
    """:func:`take_snapshot`'s bytes as parts (the header, then the payload's pieces),
    the checksum taken part by part: joined once, by whoever writes them (a group
    image), they are exactly those bytes. A snapshot is megabytes; each copy of it
    counts."""
    payload = _payload_parts(state)
    crc = 0
    for part in payload:
        crc = crc32c.crc32c(part, crc)
    return [SNAPSHOT_MAGIC + bytes([SNAPSHOT_VERSION]) + struct.pack(">I", crc), *payload]


def restore(data: bytes) -> PartitionState:
    """The state saved by :func:`take_snapshot`; raises :class:`SnapshotCorrupted`."""
    if len(data) < 9 or data[:4] != SNAPSHOT_MAGIC:
        raise SnapshotCorrupted("not a partition snapshot (bad magic)")
    version = data[4]
    if version not in (SNAPSHOT_VERSION, ENTRIES_DEDUP_VERSION):
        raise SnapshotCorrupted(f"unknown partition snapshot version {version}")
    (crc,) = struct.unpack_from(">I", data, 5)
    payload = data[9:]
    if crc32c.crc32c(payload) != crc:
        raise SnapshotCorrupted("partition snapshot CRC mismatch")
    try:
        wire = msgpack.unpackb(payload, raw=False, strict_map_key=True)
        return _from_wire(wire, version)
    except SnapshotCorrupted:
        raise
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise SnapshotCorrupted(f"partition snapshot does not decode: {exc!r}") from exc


def _to_wire(state: PartitionState) -> list[object]:
    """The layout: the snapshot payload is this list's msgpack (see :func:`_payload_parts`)."""
    return [
        _config_wire(state.config),
        state.applied_index,
        state.clock_ms,
        [
            [topic, queue_id, index.first_offset, [entry.to_wire() for entry in index]]
            for (topic, queue_id), index in sorted(state._queues.items())
        ],
        _groups_wire(state),
        state._dedup.to_wire(),
        state._halves.to_wire(),
        state._timers.to_wire(),
        *_tier_wire(state),
    ]


def _payload_parts(state: PartitionState) -> list[bytes]:
    """``pack(_to_wire(state))`` in pieces, item for item, with the queue entries, the
    dedup window and the tier's records packed by their memos
    (``QueueIndex.packed_parts``, ``DedupWindow.packed_parts``, ``TierObjects.packed_parts``)."""
    queues = sorted(state._queues.items())
    tier = bool(state.tier)
    parts = [
        array_header(9 if tier else 8),
        pack_items([_config_wire(state.config), state.applied_index, state.clock_ms]),
        array_header(len(queues)),
    ]
    for (topic, queue_id), index in queues:
        parts += (
            array_header(4),
            pack_items([topic, queue_id, index.first_offset]),
            *index.packed_parts(),
        )
    parts += (pack(_groups_wire(state)), *state._dedup.packed_parts())
    parts += (pack(state._halves.to_wire()), pack(state._timers.to_wire()))
    if tier:
        parts += state.tier.packed_parts()
    return parts


def _tier_wire(state: PartitionState) -> list[object]:
    """The tier's metadata as the optional 9th item: none while the group never recorded
    an upload, so a state without a tier snapshots as it did before the tier existed."""
    return [state.tier.to_wire()] if state.tier else []


def _config_wire(config: PartitionConfig) -> list[object]:
    return [
        config.group_id,
        config.dedup_window_ms,
        config.dedup_entries_max,
        config.receive_scan_max,
    ]


def _groups_wire(state: PartitionState) -> list[object]:
    return [
        [group, topic, queue_id, group_queue.to_wire()]
        for (group, topic, queue_id), group_queue in sorted(state._groups.items())
    ]


def _from_wire(wire: object, version: int) -> PartitionState:
    items = as_list(wire, "snapshot")
    if len(items) not in (8, 9):
        raise SnapshotCorrupted(f"snapshot: expected 8 or 9 items, got {len(items)}")
    config_wire, applied_index, clock_ms, queues, groups, dedup, halves, timers = items[:8]
    group_id, window_ms, entries_max, scan_max = as_list(config_wire, "config", 4)
    state = PartitionState(
        PartitionConfig(
            as_int(group_id, "group id"),
            as_int(window_ms, "dedup window"),
            as_int(entries_max, "dedup entries max"),
            as_int(scan_max, "receive scan max"),
        )
    )
    state.applied_index = as_int(applied_index, "applied index")
    state.clock_ms = as_int(clock_ms, "clock")
    for item in as_list(queues, "queues"):
        topic, queue_id, first_offset, entries = as_list(item, "queue", 4)
        queue = queue_key(as_str(topic, "topic"), as_int(queue_id, "queue id"))
        state._queues[queue] = QueueIndex(
            as_int(first_offset, "first offset"),
            [QueueEntry.from_wire(entry) for entry in as_list(entries, "queue entries")],
            queue,
        )
    state.recount_messages()
    for item in as_list(groups, "group queues"):
        group, topic, queue_id, group_queue = as_list(item, "group queue", 4)
        state._groups.restore(
            as_str(group, "group"),
            state.queue_key_of(as_str(topic, "topic"), as_int(queue_id, "queue id")),
            GroupQueue.from_wire(group_queue),
        )
    if version == ENTRIES_DEDUP_VERSION:
        state._dedup.load_entries_wire(as_list(dedup, "dedup"))
    else:
        state._dedup.load_wire(as_list(dedup, "dedup"))
    state._halves.load_wire(as_list(halves, "half messages"))
    state._timers.load_wire(as_list(timers, "timers"))
    if len(items) == 9:
        state.tier.load_wire(as_list(items[8], "tier"))
    return state
