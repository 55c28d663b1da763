"""Reading storage segments without a running node: WAL records, segment indexes, messages.

A storage node's commit log is its shared WAL (docs/wal-format.md): segment
files of CRC-framed records, one sequence for all its raft groups. A sealed
segment is immutable; next to it the node writes a *segment index*
(docs/storage-format.md) so that the segment is self-describing: which
entries of which groups it holds, where, the highest commit index it
records per group, and a checksum of the whole segment. Retention, tiered
upload and the Spark reader work on (segment, index) pairs through this
module, which needs nothing but the bytes.

Layouts (all integers little-endian, like the WAL):

Segment header (32 bytes): magic ``RIP5WAL1``, sequence u64, version u32,
CRC32C u32 of the 20 bytes before it, zero padding. Record header (32
bytes): crc u32, payload length u32, kind u8, entry type u8, reserved u16,
group u32, term u64, index u64; the crc is CRC32C seeded with CRC32C(sequence
as u64) over bytes 4..32+n of the record.

Segment index::

    magic "RIP5IDX1" (8) | sequence u64 | version u32 | entry count u32 |
    group count u32 | data end u64 | segment crc u32          (header, 40 bytes)
    entry count x  group u32 | index u64 | term u64 | offset u64 | length u32   (32 bytes)
    group count x  group u32 | commit u64                                      (12 bytes)
    crc u32: CRC32C of every byte of the index before it

``data end`` is where the SEAL record ends; ``segment crc`` is the CRC32C of
the segment's bytes ``[0, data end)``. ``offset`` is the ENTRY record's
offset; its data is the ``length`` bytes after the record's 32-byte header.
An entry that was rewritten later in the same segment (a new leader replaced
a suffix) is listed once, with its last write. ``commit`` is the highest
commit index the segment's HARD_STATE records give the group (0: none).

Messages: the data of an APPEND entry (first byte :data:`APPEND_OP`) is a
``protocol.records`` batch after that byte.

PURE.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from protocol.records import MessageRecord, RecordBatch, RecordCorrupted, decode_batch

SEGMENT_MAGIC = b"RIP5WAL1"
SEGMENT_HEADER_BYTES = 32
RECORD_HEADER_BYTES = 32
INDEX_MAGIC = b"RIP5IDX1"
INDEX_VERSION = 1
WAL_FORMAT_VERSIONS = (1, 2)
"""WAL formats this module reads: 2 only moved snapshots into pack files; the
record framing and the ENTRY and HARD_STATE records read here are the same."""
APPEND_OP = 1
"""The partition command code of an APPEND entry (storage_node.partition.commands.Op)."""

KIND_ENTRY = 1
KIND_HARD_STATE = 2
KIND_SEAL = 6

_SEGMENT_HEADER = struct.Struct("<8sQII")
_RECORD_HEADER = struct.Struct("<IIBBHIQQ")
_INDEX_HEADER = struct.Struct("<8sQIIIQI")
_INDEX_ENTRY = struct.Struct("<IQQQI")
_INDEX_GROUP = struct.Struct("<IQ")
_CRC = struct.Struct("<I")


class SegmentCorrupted(ValueError):
    """Bytes that are not an intact sealed segment or segment index (the reason says why)."""


@dataclass(frozen=True, slots=True)
class IndexedEntry:
    """One raft entry in a segment: ``length`` data bytes after the record at ``offset``."""

    group_id: int
    index: int
    term: int
    offset: int
    length: int

    @property
    def data_offset(self) -> int:
        """Where the entry's data starts in the segment."""
        return self.offset + RECORD_HEADER_BYTES


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    """What a sealed segment holds (see the module docstring)."""

    segment_seq: int
    data_end: int
    segment_crc: int
    entries: tuple[IndexedEntry, ...]
    commits: dict[int, int]

    def entries_of(self, group_id: int) -> list[IndexedEntry]:
        """The entries of one group, in index order."""
        return sorted((e for e in self.entries if e.group_id == group_id), key=lambda e: e.index)


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """The messages of one APPEND entry read from a segment."""

    group_id: int
    log_index: int
    term: int
    batch: RecordBatch

    @property
    def records(self) -> tuple[MessageRecord, ...]:
        """The batch's records, in append order (position i is record i)."""
        return self.batch.records


def segment_seq(segment: bytes | memoryview) -> int:
    """The sequence number in a segment's header; raises :class:`SegmentCorrupted`."""
    if len(segment) < SEGMENT_HEADER_BYTES:
        raise SegmentCorrupted("segment header is truncated")
    magic, seq, version, crc = _SEGMENT_HEADER.unpack_from(segment)
    if magic != SEGMENT_MAGIC:
        raise SegmentCorrupted("not a rip5 WAL segment (bad magic)")
    if crc32c.crc32c(bytes(segment[: _SEGMENT_HEADER.size - 4])) != crc:
        raise SegmentCorrupted("segment header checksum mismatch")
    if version not in WAL_FORMAT_VERSIONS:
        raise SegmentCorrupted(f"unsupported WAL format version {version}")
    return int(seq)


def build_index(segment: bytes | memoryview) -> SegmentIndex:
    """Index a sealed segment, checking every record's CRC up to its SEAL.

    Raises :class:`SegmentCorrupted` if a record fails its CRC or the
    segment has no SEAL record (it is not sealed yet, or it is damaged).
    """
    view = memoryview(segment)
    seq = segment_seq(view)
    salt = crc32c.crc32c(struct.pack("<Q", seq))
    entries: dict[tuple[int, int], IndexedEntry] = {}
    last: dict[int, int] = {}  # group -> last index written in this segment
    commits: dict[int, int] = {}
    offset = SEGMENT_HEADER_BYTES
    while True:
        if offset + RECORD_HEADER_BYTES > len(view):
            raise SegmentCorrupted(f"segment {seq} ends at {offset} without a SEAL record")
        crc, length, kind, _etype, _res, group, term, index = _RECORD_HEADER.unpack_from(
            view, offset
        )
        end = offset + RECORD_HEADER_BYTES + length
        if kind == 0 or end > len(view) or crc32c.crc32c(view[offset + 4 : end], salt) != crc:
            raise SegmentCorrupted(f"segment {seq}: no intact record at offset {offset}")
        if kind == KIND_SEAL:
            data_end = end
            break
        if kind == KIND_ENTRY:
            for replaced in range(index, last.get(group, 0) + 1):
                entries.pop((group, replaced), None)  # a later write replaces the suffix
            entries[(group, index)] = IndexedEntry(group, index, term, offset, length)
            last[group] = index
        elif kind == KIND_HARD_STATE:
            commits[group] = max(commits.get(group, 0), index)
        offset = end
    ordered = tuple(sorted(entries.values(), key=lambda e: (e.offset, e.group_id)))
    return SegmentIndex(seq, data_end, crc32c.crc32c(view[:data_end]), ordered, commits)


def encode_index(index: SegmentIndex) -> bytes:
    """The bytes of a segment index file."""
    parts = [
        _INDEX_HEADER.pack(
            INDEX_MAGIC,
            index.segment_seq,
            INDEX_VERSION,
            len(index.entries),
            len(index.commits),
            index.data_end,
            index.segment_crc,
        )
    ]
    parts += [
        _INDEX_ENTRY.pack(e.group_id, e.index, e.term, e.offset, e.length) for e in index.entries
    ]
    parts += [_INDEX_GROUP.pack(g, c) for g, c in sorted(index.commits.items())]
    body = b"".join(parts)
    return body + _CRC.pack(crc32c.crc32c(body))


def decode_index(data: bytes) -> SegmentIndex:
    """A segment index from its bytes; raises :class:`SegmentCorrupted`."""
    if len(data) < _INDEX_HEADER.size + _CRC.size:
        raise SegmentCorrupted("segment index is truncated")
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c.crc32c(data[: -_CRC.size]) != crc:
        raise SegmentCorrupted("segment index checksum mismatch")
    magic, seq, version, count, groups, data_end, segment_crc = _INDEX_HEADER.unpack_from(data)
    if magic != INDEX_MAGIC:
        raise SegmentCorrupted("not a rip5 segment index (bad magic)")
    if version != INDEX_VERSION:
        raise SegmentCorrupted(f"unsupported segment index version {version}")
    want = _INDEX_HEADER.size + count * _INDEX_ENTRY.size + groups * _INDEX_GROUP.size + _CRC.size
    if len(data) != want:
        raise SegmentCorrupted(f"segment index is {len(data)} bytes, its header says {want}")
    offset = _INDEX_HEADER.size
    entries = []
    for _ in range(count):
        entries.append(IndexedEntry(*_INDEX_ENTRY.unpack_from(data, offset)))
        offset += _INDEX_ENTRY.size
    commits = {}
    for _ in range(groups):
        group, commit = _INDEX_GROUP.unpack_from(data, offset)
        commits[group] = commit
        offset += _INDEX_GROUP.size
    return SegmentIndex(seq, data_end, segment_crc, tuple(entries), commits)


def verify(segment: bytes | memoryview, index: SegmentIndex) -> None:
    """Raise :class:`SegmentCorrupted` unless ``segment`` is the one ``index`` describes."""
    seq = segment_seq(segment)
    if seq != index.segment_seq:
        raise SegmentCorrupted(f"segment {seq} read with the index of {index.segment_seq}")
    if len(segment) < index.data_end:
        raise SegmentCorrupted(f"segment {seq} is shorter than its data end {index.data_end}")
    if crc32c.crc32c(memoryview(segment)[: index.data_end]) != index.segment_crc:
        raise SegmentCorrupted(f"segment {seq} checksum mismatch")


def entry_data(segment: bytes | memoryview, entry: IndexedEntry) -> bytes:
    """The data of one indexed entry (call :func:`verify` first)."""
    return bytes(segment[entry.data_offset : entry.data_offset + entry.length])


def read_batches(
    segment: bytes | memoryview, index: SegmentIndex, committed_only: bool = True
) -> Iterator[StoredBatch]:
    """The message batches of a sealed segment, in log order per group.

    Verifies the segment against its index first. With ``committed_only``,
    entries above the group's commit in this segment are left out (a later
    segment may commit or replace them; readers of a run of segments take
    the highest commit of the run). Raises :class:`SegmentCorrupted`.
    """
    verify(segment, index)
    for entry in sorted(index.entries, key=lambda e: (e.group_id, e.index)):
        if committed_only and entry.index > index.commits.get(entry.group_id, 0):
            continue
        data = entry_data(segment, entry)
        if not data or data[0] != APPEND_OP:
            continue
        try:
            batch = decode_batch(data[1:])
        except RecordCorrupted as exc:
            raise SegmentCorrupted(
                f"segment {index.segment_seq}: entry {entry.index} of group {entry.group_id}: {exc}"
            ) from exc
        yield StoredBatch(entry.group_id, entry.index, entry.term, batch)
