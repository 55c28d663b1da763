"""The byte layout of the shared write-ahead log: segment headers and records.

Every raft group hosted on a node appends to the same sequence of segment
files. A segment starts with a fixed header and holds back-to-back records;
the unused rest of a (preallocated) segment is zero bytes. Each record is::

    offset size  field
    0      4     crc           u32 LE, CRC32C of bytes 4..32+n (see below)
    4      4     payload_len   u32 LE, bytes of payload after the 32-byte header
    8      1     kind          RecordKind (0 is never written: it marks the end)
    9      1     entry_type    raft EntryType for ENTRY records, else 0
    10     2     reserved      0
    12     4     group_id      u32 LE
    16     8     term          u64 LE
    24     8     index         u64 LE
    32     n     payload

The CRC32C starts from the CRC of the segment's 8-byte sequence number (the
"salt"), then covers bytes 4..32+n (everything after the crc). Salting with the segment
sequence makes records left over from a recycled segment's previous life fail
the check, so they read as the end of the log, never as data.

An ENTRY record's payload is the entry's data verbatim: the entry at
(group, index) is the byte range [offset + 32, offset + 32 + payload_len) of
its segment, which is what the message store indexes (no second copy).

PURE: bytes in, values out.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import crc32c
import msgpack

from raft.types import ConfState, Entry, HardState

SEGMENT_MAGIC = b"RIP5WAL1"
SEGMENT_HEADER = struct.Struct("<8sQII")  # magic, sequence, format version, crc
SEGMENT_HEADER_BYTES = 32  # the header struct padded to 32 bytes
# 2: snapshots live in pack files; SNAPSHOT and CHECKPOINT name (pack, offset, length).
FORMAT_VERSION = 2

RECORD_HEADER = struct.Struct("<IIBBHIQQ")  # crc, payload_len, kind, type, 0, group, term, index
RECORD_HEADER_BYTES = RECORD_HEADER.size  # 32
# What a segment spends besides one record's payload: its header, the
# record's header and the SEAL record; a larger payload never fits.
SEGMENT_OVERHEAD_BYTES = SEGMENT_HEADER_BYTES + 2 * RECORD_HEADER_BYTES
_CRC = struct.Struct("<I")
_AFTER_CRC = struct.Struct("<IBBHIQQ")  # the 28 header bytes the crc covers
_SALT = struct.Struct("<Q")
_VOTE = struct.Struct("<Q")
GROUP_ID_MAX = 0xFFFFFFFF


class RecordKind(enum.IntEnum):
    """What a record says about its group. Append-only; 0 is reserved for "end"."""

    ENTRY = 1  # a log entry: term, index, entry_type, payload = data
    HARD_STATE = 2  # term, index = commit, payload = vote (u64)
    SNAPSHOT = 3  # a snapshot at (term, index); payload = conf state + where in a pack it lies
    COMPACT = 4  # entries <= index are discarded; term = term at index
    CONF_STATE = 5  # the membership the host applied; index = where; payload = conf state
    SEAL = 6  # the last record of a segment; group 0, no payload
    CHECKPOINT = 7  # a group's whole metadata, first in every segment after the first
    DROP = 8  # the replica was deleted: forget the group but its term and vote (payload)


SNAPSHOT_INSTALL = 0
"""SNAPSHOT record flag (in ``entry_type``): received from the leader; the log is replaced."""
SNAPSHOT_LOCAL = 1
"""SNAPSHOT record flag: taken locally at an applied index; the log is kept."""


class FormatError(ValueError):
    """Bytes that do not decode as a segment header or a record."""


@dataclass(frozen=True, slots=True)
class RecordHeader:
    """The decoded fixed part of one record."""

    payload_len: int
    kind: RecordKind
    entry_type: int
    group_id: int
    term: int
    index: int

    @property
    def record_bytes(self) -> int:
        """Header plus payload."""
        return RECORD_HEADER_BYTES + self.payload_len


def salt_of(segment_seq: int) -> int:
    """The CRC seed of records in segment ``segment_seq``."""
    return int(crc32c.crc32c(_SALT.pack(segment_seq)))


def encode_segment_header(segment_seq: int) -> bytes:
    """The 32-byte header that starts segment ``segment_seq``."""
    body = SEGMENT_HEADER.pack(SEGMENT_MAGIC, segment_seq, FORMAT_VERSION, 0)
    crc = crc32c.crc32c(body[:-4])
    packed = SEGMENT_HEADER.pack(SEGMENT_MAGIC, segment_seq, FORMAT_VERSION, crc)
    return packed.ljust(SEGMENT_HEADER_BYTES, b"\0")


def decode_segment_header(data: bytes) -> int:
    """The sequence number of a segment header; ``FormatError`` if it is not one."""
    if len(data) < SEGMENT_HEADER_BYTES:
        raise FormatError("segment header is truncated")
    magic, seq, version, crc = SEGMENT_HEADER.unpack_from(data)
    if magic != SEGMENT_MAGIC:
        raise FormatError("not a rip5 WAL segment (bad magic)")
    if crc32c.crc32c(data[: SEGMENT_HEADER.size - 4]) != crc:
        raise FormatError("segment header checksum mismatch")
    if version != FORMAT_VERSION:
        raise FormatError(f"unsupported WAL format version {version}")
    return int(seq)


def encode_record(
    out: list[bytes],
    salt: int,
    kind: RecordKind,
    group_id: int,
    term: int,
    index: int,
    payload: bytes,
    entry_type: int = 0,
) -> None:
    """Append one framed record to ``out`` (as header and payload chunks, not copied)."""
    rest = _AFTER_CRC.pack(len(payload), kind, entry_type, 0, group_id, term, index)
    crc = crc32c.crc32c(payload, crc32c.crc32c(rest, salt))
    out.append(_CRC.pack(crc) + rest)
    if payload:
        out.append(payload)


def encode_entries(
    out: list[bytes],
    salt: int,
    group_id: int,
    segment_seq: int,
    entries: Sequence[Entry],
    start_offset: int,
) -> list[tuple[int, int, int, int, int]]:
    """Append ENTRY records; return (term, segment_seq, offset, length, type) of each.

    ``start_offset`` is where the first record lands in the segment. The batch
    form of :func:`encode_record` (the WAL's hot path): entry data is not copied.
    """
    pack = _AFTER_CRC.pack
    pack_crc = _CRC.pack
    crc = crc32c.crc32c
    append = out.append
    kind = RecordKind.ENTRY
    locs = []
    offset = start_offset
    for e in entries:
        data = e.data
        size = len(data)
        etype = int(e.type)
        rest = pack(size, kind, etype, 0, group_id, e.term, e.index)
        append(pack_crc(crc(data, crc(rest, salt))) + rest)
        append(data)
        locs.append((e.term, segment_seq, offset, size, etype))
        offset += RECORD_HEADER_BYTES + size
    return locs


def decode_record_header(data: bytes | bytearray | memoryview, offset: int) -> RecordHeader | None:
    """The header at ``offset``; None at the end of data (zero kind or too few bytes).

    Raises ``FormatError`` for a header whose kind is unknown.
    """
    if offset + RECORD_HEADER_BYTES > len(data):
        return None
    _crc, payload_len, kind, entry_type, _res, group_id, term, index = RECORD_HEADER.unpack_from(
        data, offset
    )
    if kind == 0:
        return None
    try:
        record_kind = RecordKind(kind)
    except ValueError:
        raise FormatError(f"unknown record kind {kind} at offset {offset}") from None
    return RecordHeader(payload_len, record_kind, entry_type, group_id, term, index)


def record_intact(
    data: bytes | bytearray | memoryview, offset: int, header: RecordHeader, salt: int
) -> bool:
    """Whether the whole record at ``offset`` is present and its CRC matches."""
    end = offset + header.record_bytes
    if end > len(data):
        return False
    view = memoryview(data)
    crc = crc32c.crc32c(view[offset + 4 : end], salt)
    stored = int.from_bytes(view[offset : offset + 4], "little")
    return bool(crc == stored)


def encode_vote(vote: int) -> bytes:
    """The payload of a HARD_STATE record."""
    return _VOTE.pack(vote)


def decode_hard_state(header: RecordHeader, payload: bytes) -> HardState:
    """The hard state a HARD_STATE record carries."""
    if len(payload) != _VOTE.size:
        raise FormatError("hard state payload must be 8 bytes")
    (vote,) = _VOTE.unpack(payload)
    return HardState(term=header.term, vote=vote, commit=header.index)


def encode_conf_state(conf_state: ConfState) -> bytes:
    """The payload of SNAPSHOT and CONF_STATE records (msgpack of three sorted lists)."""
    packed: bytes = msgpack.packb(
        [
            sorted(conf_state.voters),
            sorted(conf_state.learners),
            sorted(conf_state.voters_outgoing),
        ]
    )
    return packed


@dataclass(frozen=True, slots=True)
class SnapshotLocation:
    """Where a snapshot's entry lies: ``length`` bytes at ``offset`` of pack file ``pack``.

    Pack ids start at 1; pack 0 means "no snapshot".
    """

    pack: int
    offset: int
    length: int


NO_SNAPSHOT = SnapshotLocation(0, 0, 0)


def encode_snapshot_marker(conf_state: ConfState, location: SnapshotLocation) -> bytes:
    """The payload of a SNAPSHOT record: msgpack of the three conf state lists, then
    the pack id, offset and length of the snapshot's entry."""
    packed: bytes = msgpack.packb(
        [
            sorted(conf_state.voters),
            sorted(conf_state.learners),
            sorted(conf_state.voters_outgoing),
            location.pack,
            location.offset,
            location.length,
        ]
    )
    return packed


def decode_snapshot_marker(payload: bytes) -> tuple[ConfState, SnapshotLocation]:
    """Inverse of :func:`encode_snapshot_marker`."""
    try:
        voters, learners, outgoing, pack, offset, length = msgpack.unpackb(payload)
        conf = _conf_state(voters, learners, outgoing)
        return conf, SnapshotLocation(int(pack), int(offset), int(length))
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise FormatError(f"bad snapshot marker payload: {exc}") from None


def _conf_state(voters: Any, learners: Any, outgoing: Any) -> ConfState:
    """A ConfState from decoded msgpack lists (TypeError/ValueError if malformed)."""
    return ConfState(
        voters=frozenset(int(v) for v in voters),
        learners=frozenset(int(v) for v in learners),
        voters_outgoing=frozenset(int(v) for v in outgoing),
    )


def decode_conf_state(payload: bytes) -> ConfState:
    """Inverse of :func:`encode_conf_state`."""
    try:
        voters, learners, outgoing = msgpack.unpackb(payload)
        return _conf_state(voters, learners, outgoing)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise FormatError(f"bad conf state payload: {exc}") from None


@dataclass(frozen=True, slots=True)
class GroupCheckpoint:
    """Everything but the entries that a group's replay needs, in one record.

    Written first in each new segment for every group, so no older segment is
    ever kept only for a group's hard state, membership or snapshot marker.
    """

    hard_state: HardState
    conf_index: int
    conf_state: ConfState | None
    snapshot_term: int
    snapshot_index: int
    snapshot_conf_state: ConfState
    compact_index: int
    compact_term: int
    snapshot_location: SnapshotLocation = NO_SNAPSHOT


def encode_checkpoint(cp: GroupCheckpoint) -> bytes:
    """The payload of a CHECKPOINT record."""
    packed: bytes = msgpack.packb(
        [
            cp.hard_state.term,
            cp.hard_state.vote,
            cp.hard_state.commit,
            cp.conf_index,
            None if cp.conf_state is None else encode_conf_state(cp.conf_state),
            cp.snapshot_term,
            cp.snapshot_index,
            encode_conf_state(cp.snapshot_conf_state),
            cp.compact_index,
            cp.compact_term,
            cp.snapshot_location.pack,
            cp.snapshot_location.offset,
            cp.snapshot_location.length,
        ]
    )
    return packed


def decode_checkpoint(payload: bytes) -> GroupCheckpoint:
    """Inverse of :func:`encode_checkpoint`."""
    try:
        fields = msgpack.unpackb(payload)
        term, vote, commit, conf_index, conf, snap_term, snap_index, snap_conf, ci, ct = fields[:10]
        pack, offset, length = fields[10:]
        location = SnapshotLocation(int(pack), int(offset), int(length))
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise FormatError(f"bad checkpoint payload: {exc}") from None
    return GroupCheckpoint(
        hard_state=HardState(term=term, vote=vote, commit=commit),
        conf_index=conf_index,
        conf_state=None if conf is None else decode_conf_state(conf),
        snapshot_term=snap_term,
        snapshot_index=snap_index,
        snapshot_conf_state=decode_conf_state(snap_conf),
        compact_index=ci,
        compact_term=ct,
        snapshot_location=location,
    )


# -- snapshot packs --------------------------------------------------------------
# Snapshots live in pack files (``snap/<pack:016x>.pack``), each written once,
# fsynced and renamed into place before any SNAPSHOT record names an entry in
# it. A pack is a 32-byte header (magic, pack id, entry count, crc of the
# preceding 20 bytes, zero padding) followed by entries back to back. An entry:
# header (magic, group, term, index, conf-state length, data length, crc over
# everything after the crc field), conf state, data. A SNAPSHOT or CHECKPOINT
# record names an entry by (pack, offset, length).
PACK_MAGIC = b"RIP5PAK1"
PACK_HEADER = struct.Struct("<8sQII")  # magic, pack id, entries, crc
PACK_HEADER_BYTES = 32
SNAPSHOT_MAGIC = b"RIP5SNP1"
SNAPSHOT_HEADER = struct.Struct("<8sIQQIQI")


def encode_pack_header(pack_id: int, entries: int) -> bytes:
    """The 32-byte header that starts pack ``pack_id`` of ``entries`` snapshots."""
    body = PACK_HEADER.pack(PACK_MAGIC, pack_id, entries, 0)[:-4]
    return (body + crc32c.crc32c(body).to_bytes(4, "little")).ljust(PACK_HEADER_BYTES, b"\0")


def decode_pack_header(blob: bytes) -> tuple[int, int]:
    """(pack id, entries) of a pack header; ``FormatError`` if it is not one."""
    if len(blob) < PACK_HEADER_BYTES:
        raise FormatError("pack header is truncated")
    magic, pack_id, count, crc = PACK_HEADER.unpack_from(blob)
    if magic != PACK_MAGIC or crc32c.crc32c(blob[: PACK_HEADER.size - 4]) != crc:
        raise FormatError("not a rip5 snapshot pack (bad magic or checksum)")
    return int(pack_id), int(count)


def encode_snapshot_entry(
    group_id: int, term: int, index: int, conf_state: ConfState, data: bytes
) -> tuple[bytes, bytes]:
    """One pack entry as (header + conf state, data): written with ``writev``, so the
    data is never copied. The entry's length is the sum of both lengths."""
    conf = encode_conf_state(conf_state)
    head = SNAPSHOT_HEADER.pack(SNAPSHOT_MAGIC, group_id, term, index, len(conf), len(data), 0)
    crc = crc32c.crc32c(head[:-4])
    crc = crc32c.crc32c(conf, crc)
    crc = crc32c.crc32c(data, crc)
    return head[:-4] + crc.to_bytes(4, "little") + conf, data


def decode_snapshot_entry(blob: bytes) -> tuple[int, int, int, ConfState, bytes]:
    """(group_id, term, index, conf_state, data) of one pack entry's bytes."""
    if len(blob) < SNAPSHOT_HEADER.size:
        raise FormatError("snapshot entry is truncated")
    magic, group_id, term, index, conf_len, data_len, crc = SNAPSHOT_HEADER.unpack_from(blob)
    if magic != SNAPSHOT_MAGIC:
        raise FormatError("not a rip5 snapshot entry")
    start = SNAPSHOT_HEADER.size
    if len(blob) != start + conf_len + data_len:
        raise FormatError("snapshot entry length does not match its header")
    actual = crc32c.crc32c(blob[: start - 4])
    actual = crc32c.crc32c(blob[start:], actual)
    if actual != crc:
        raise FormatError("snapshot entry checksum mismatch")
    conf = decode_conf_state(blob[start : start + conf_len])
    return group_id, term, index, conf, blob[start + conf_len :]
