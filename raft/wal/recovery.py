"""Opening the WAL: replay its segments into the groups' indexes (SHELL: reads files).

The contracts are the log store's (:mod:`raft.wal.logstore`): only the last
segment may be torn (a bad header: it is removed; a bad or partial record:
its valid data ends there); any other damage, or a group whose entries in
collected segments no live compaction covers, is ``StorageFailed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from raft.errors import StorageFailed
from raft.wal import format as fmt
from raft.wal.format import RecordKind
from raft.wal.group_index import GroupIndex, dropped_group_index, new_group_index
from raft.wal.snapshot_packs import SnapshotPacks
from raft.wal.spares import SEGMENT_SUFFIX, SPARE_PREFIX, fsync_dir, segment_path


@dataclass(slots=True)
class Replayed:
    """What the segments held: the groups' indexes, the intact segments (sequence,
    path; oldest first), and where the last one's valid data ends and whether it
    is sealed there."""

    groups: dict[int, GroupIndex] = field(default_factory=dict)
    segments: list[tuple[int, Path]] = field(default_factory=list)
    tail_end: int = 0
    tail_sealed: bool = True


def replay_segments(wal_dir: Path, snapshot_packs: SnapshotPacks) -> Replayed:
    """Replay every segment of ``wal_dir`` in order; note the snapshot packs records name.

    A torn last segment without a valid header is deleted (the directory synced).
    """
    replay = _Replay(wal_dir, snapshot_packs)
    seqs = sorted(
        int(p.name[: -len(SEGMENT_SUFFIX)], 16)
        for p in wal_dir.iterdir()
        if p.name.endswith(SEGMENT_SUFFIX) and not p.name.startswith(SPARE_PREFIX)
    )
    out = replay.out
    for position, seq in enumerate(seqs):
        is_last = position == len(seqs) - 1
        path = segment_path(wal_dir, seq)
        data = path.read_bytes()
        try:
            header_seq = fmt.decode_segment_header(data)
        except fmt.FormatError as exc:
            if is_last:
                # A segment whose creation did not finish: it holds nothing.
                path.unlink()
                fsync_dir(wal_dir)
                break
            raise StorageFailed(f"WAL segment {path.name} is corrupt at offset 0: {exc}") from None
        if header_seq != seq:
            if is_last:
                path.unlink()  # a recycled spare renamed before its header was written
                fsync_dir(wal_dir)
                break
            raise StorageFailed(
                f"WAL segment {path.name} is corrupt at offset 0: its header names sequence "
                f"{header_seq}"
            )
        out.segments.append((seq, path))
        out.tail_end, out.tail_sealed = replay.segment(seq, path.name, data, is_last)
    replay.validate_groups()
    return out


class _Replay:
    """The records of the segments applied, in order, to the groups' indexes."""

    def __init__(self, wal_dir: Path, snapshot_packs: SnapshotPacks) -> None:
        self.wal_dir = wal_dir
        self.snapshot_packs = snapshot_packs
        self.out = Replayed()

    def segment(self, seq: int, name: str, data: bytes, is_last: bool) -> tuple[int, bool]:
        """Apply the records of one segment; return (where valid data ends, sealed)."""
        salt = fmt.salt_of(seq)
        offset = fmt.SEGMENT_HEADER_BYTES
        view = memoryview(data)
        while True:
            try:
                header = fmt.decode_record_header(view, offset)
            except fmt.FormatError as exc:
                header = None
                if not is_last:
                    raise StorageFailed(
                        f"WAL segment {name} is corrupt at offset {offset}: {exc}"
                    ) from None
            if header is None or not fmt.record_intact(view, offset, header, salt):
                if is_last:
                    return offset, False  # torn tail: cut here
                raise StorageFailed(
                    f"WAL segment {name} is corrupt at offset {offset} (not the last segment)"
                )
            if header.kind is RecordKind.SEAL:
                return offset + header.record_bytes, True
            payload_start = offset + fmt.RECORD_HEADER_BYTES
            payload = view[payload_start : payload_start + header.payload_len]
            try:
                self.record(seq, offset, header, payload)
            except fmt.FormatError as exc:
                raise StorageFailed(
                    f"WAL segment {name} is corrupt at offset {offset}: {exc}"
                ) from None
            offset += header.record_bytes

    def record(self, seq: int, offset: int, header: fmt.RecordHeader, payload: memoryview) -> None:
        """Apply one record to its group's index."""
        groups = self.out.groups
        g = groups.get(header.group_id)
        if g is None:
            g = groups[header.group_id] = new_group_index(header.group_id)
        kind = header.kind
        if kind is RecordKind.ENTRY:
            index = header.index
            if g.locs and index <= g.last:
                g.truncate_from(index)
            if not g.locs and index != g.first:
                # Entries before this one were in collected segments; a later
                # COMPACT must cover the gap (checked by validate_groups).
                g.first = index
            g.locs.append((header.term, seq, offset, header.payload_len, header.entry_type))
            g.cache_from = g.last + 1
        elif kind is RecordKind.HARD_STATE:
            g.hard_state = fmt.decode_hard_state(header, bytes(payload))
        elif kind is RecordKind.CONF_STATE:
            g.conf_index = header.index
            g.conf_state = fmt.decode_conf_state(bytes(payload))
        elif kind is RecordKind.SNAPSHOT:
            conf, location = fmt.decode_snapshot_marker(bytes(payload))
            self.snapshot_packs.note_seen(location)
            g.note_snapshot(header.term, header.index, conf, header.entry_type, location)
        elif kind is RecordKind.COMPACT:
            g.compact_to(header.index, header.term)
        elif kind is RecordKind.DROP:
            groups[header.group_id] = dropped_group_index(
                header.group_id, fmt.decode_hard_state(header, bytes(payload))
            )
        elif kind is RecordKind.CHECKPOINT:
            cp = fmt.decode_checkpoint(bytes(payload))
            g.restore(cp)
            self.snapshot_packs.note_seen(cp.snapshot_location)

    def validate_groups(self) -> None:
        """Every group's live entries start right after its compaction point."""
        for g in self.out.groups.values():
            if g.locs and g.first != g.compact_index + 1:
                raise StorageFailed(
                    f"WAL of group {g.group_id} misses entries {g.compact_index + 1}.."
                    f"{g.first - 1} (a segment was lost)"
                )
            g.first = g.compact_index + 1
            g.cache_from = g.last + 1
