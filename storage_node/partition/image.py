"""A group image: a partition snapshot together with the message bodies it needs.

The partition snapshot (``snapshot.take_snapshot``) holds indexes, not bodies:
its queue entries name APPEND log entries by index. A replica that restores
a snapshot while holding those log entries (its own WAL, after a restart)
needs nothing more; a replica that receives the snapshot from its leader
(its log is replaced from the snapshot index on) must also get the APPEND
entries the snapshot still references. A group image carries both, so the
raft snapshot of a storage group is always self-contained: bodies come
along exactly for the entries the receiver cannot have.

Layout (all integers big-endian)::

    magic    4 bytes  b"R5GI"
    version  1 byte   1
    crc32c   4 bytes  over every byte after this field
    count    4 bytes  number of bodies
    count x  [log index u64][length u32][APPEND entry data]
    rest              the partition snapshot (its own magic, version and CRC)

Bodies are sorted by log index; their data is the APPEND entry's bytes
verbatim (op byte + record batch), so ``reads.record_at`` reads them as it
reads the log.

PURE.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

import crc32c

from storage_node.errors import SnapshotCorrupted
from storage_node.partition.snapshot import restore, snapshot_parts
from storage_node.partition.state import PartitionState

IMAGE_MAGIC = b"R5GI"
IMAGE_VERSION = 1
_HEAD = struct.Struct(">4sBII")
_BODY = struct.Struct(">QI")


def encode_image(state: PartitionState, bodies: Mapping[int, bytes]) -> bytes:
    """The image of ``state`` with the APPEND entries ``bodies`` (log index -> data).

    Joined once from its parts (the checksum taken part by part): an image is
    taken at every compaction of the group, and its snapshot is megabytes."""
    parts = [struct.pack(">I", len(bodies))]
    for index in sorted(bodies):
        parts += (_BODY.pack(index, len(bodies[index])), bodies[index])
    parts += snapshot_parts(state)
    crc = 0
    for part in parts:
        crc = crc32c.crc32c(part, crc)
    return b"".join([struct.pack(">4sBI", IMAGE_MAGIC, IMAGE_VERSION, crc), *parts])


def decode_image(data: bytes) -> tuple[PartitionState, dict[int, bytes]]:
    """The state and bodies of :func:`encode_image`; raises :class:`SnapshotCorrupted`."""
    if len(data) < _HEAD.size:
        raise SnapshotCorrupted(f"group image of {len(data)} bytes is truncated")
    magic, version, crc, count = _HEAD.unpack_from(data)
    if magic != IMAGE_MAGIC:
        raise SnapshotCorrupted("not a group image (bad magic)")
    if version != IMAGE_VERSION:
        raise SnapshotCorrupted(f"unknown group image version {version}")
    if crc32c.crc32c(memoryview(data)[9:]) != crc:
        raise SnapshotCorrupted("group image CRC mismatch")
    bodies: dict[int, bytes] = {}
    offset = _HEAD.size
    for _ in range(count):
        if offset + _BODY.size > len(data):
            raise SnapshotCorrupted("group image ends inside a body header")
        index, length = _BODY.unpack_from(data, offset)
        offset += _BODY.size
        if offset + length > len(data):
            raise SnapshotCorrupted(f"group image ends inside the body of entry {index}")
        bodies[index] = data[offset : offset + length]
        offset += length
    return restore(data[offset:]), bodies
