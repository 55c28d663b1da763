"""The node's shared write-ahead log: one sequence of segment files for all groups.

SHELL (file I/O). The byte layout is in :mod:`raft.wal.format` and
docs/wal-format.md.

Write path (one round of the driver)::

    store.append(g, entries); store.set_hard_state(g, hs); ...  # encode only
    store.flush()   # pwritev of everything encoded since the last flush (1024 buffers a call)
    store.sync()    # ONE fdatasync (safe to run in a worker thread)
    store.maybe_collect_garbage()

Contracts:

- Records are never split across segments. When the next record does not fit,
  the current segment is flushed, sealed with a SEAL record and synced; the
  next segment starts with a CHECKPOINT record per group, so a segment is only
  ever kept for the live entries in it.
- Segments are preallocated (zero-filled and synced once) and recycled after
  garbage collection; records carry a CRC salted with their segment's
  sequence number, so a recycled file's old records read as "end of log".
- Opening recovers (:mod:`raft.wal.recovery` replays the segments): every
  segment but the last must end in a SEAL record and be intact (anything
  else is corruption: ``StorageFailed``); the last segment's first bad or
  partial record is a torn tail and is cut: a SEAL is written at that offset
  and writing continues in a fresh segment. Nothing before the cut is lost.
- The in-memory index of a group is updated when records are encoded, before
  they are durable; the caller must not act on them (send, ack) until
  :meth:`LogStore.sync` returns.
- An append at an index <= the group's last index replaces that suffix.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from raft.errors import LogCompacted, LogUnavailable, StorageFailed
from raft.types import ConfState, Entry, EntryType, HardState, Snapshot
from raft.wal import format as fmt
from raft.wal.entry_cache import EntryCache
from raft.wal.format import NO_SNAPSHOT, RecordKind, SnapshotLocation
from raft.wal.group_index import GroupIndex, dropped_group_index, new_group_index
from raft.wal.group_log import GroupLog
from raft.wal.recovery import replay_segments
from raft.wal.retention import compaction_targets, compaction_unpins
from raft.wal.snapshot_packs import SnapshotPack, SnapshotPacks
from raft.wal.spares import SparePool, fsync_dir, pwrite_all, segment_path


@dataclass(frozen=True, slots=True)
class EntryLocation:
    """Where an entry's data lies on disk: ``length`` bytes at ``offset`` of a segment.

    This is what the message store indexes instead of copying message bytes.
    The location stays valid until the group compacts past the entry and the
    segment is collected.
    """

    segment_seq: int
    offset: int
    length: int


@dataclass(slots=True)
class _Segment:
    seq: int
    path: Path
    fd: int


class LogStore:
    """The WAL of one node. Not thread-safe, except :meth:`sync` (see module doc)."""

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes: int = 64 << 20,
        spare_segments_max: int = 2,
        cache_bytes_per_group: int = 4 << 20,
        cache_bytes_total: int = 64 << 20,
    ) -> None:
        """Use :meth:`open`; this only sets fields."""
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._cache = EntryCache(cache_bytes_per_group, cache_bytes_total)
        self._groups: dict[int, GroupIndex] = {}
        self._segments: dict[int, _Segment] = {}
        self._current: _Segment | None = None
        self._salt = 0
        self._write_offset = 0  # where the buffer starts in the current segment
        self._buffer: list[bytes] = []  # encoded records not yet written, as chunks
        self._buffer_bytes = 0
        self._dirty_fds: set[int] = set()
        # Set whenever a segment may have stopped being needed (a group's
        # first entry moved, or a new segment became current); the collection
        # scans every group only then, not after every round's sync.
        self._collect_due = True
        self._failed: BaseException | None = None
        self._spares = SparePool(directory / "wal", segment_bytes, spare_segments_max)
        self.snapshot_packs = SnapshotPacks(directory / "snap")
        # Called with "write" before each WAL write and "sync" before each fdatasync
        # (the sync thread's); it may raise OSError or block. None outside fault
        # injection (storage_node/fault_injection.py installs it).
        self.io_hook: Callable[[str], None] | None = None
        # Called (in the thread that ran it) with the nanoseconds each sync() took,
        # hook included, when it had something to sync. None unless the storage node
        # reports its fsync latency (storage_node/registration.py installs it).
        self.sync_observer: Callable[[int], None] | None = None

    # ------------------------------------------------------------- opening
    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        *,
        segment_bytes: int = 64 << 20,
        spare_segments_max: int = 2,
        cache_bytes_per_group: int = 4 << 20,
        cache_bytes_total: int = 64 << 20,
    ) -> LogStore:
        """Open (creating if needed) the WAL in ``directory`` and recover its state."""
        if segment_bytes < 4096:
            raise ValueError(f"segment_bytes must be at least 4096, got {segment_bytes}")
        store = cls(
            Path(directory),
            segment_bytes=segment_bytes,
            spare_segments_max=spare_segments_max,
            cache_bytes_per_group=cache_bytes_per_group,
            cache_bytes_total=cache_bytes_total,
        )
        store._wal_dir.mkdir(parents=True, exist_ok=True)
        store._snap_dir.mkdir(parents=True, exist_ok=True)
        fsync_dir(store.directory)
        store._recover()
        return store

    @property
    def _wal_dir(self) -> Path:
        return self.directory / "wal"

    @property
    def _snap_dir(self) -> Path:
        return self.directory / "snap"

    def _segment_path(self, seq: int) -> Path:
        return segment_path(self._wal_dir, seq)

    def _recover(self) -> None:
        self._spares.recover()
        replayed = replay_segments(self._wal_dir, self.snapshot_packs)
        self._groups = replayed.groups
        for seq, path in replayed.segments:
            self._segments[seq] = _Segment(seq, path, os.open(path, os.O_RDWR))
        self.snapshot_packs.recover(g.snapshot_location for g in self._groups.values())
        live = sorted(self._segments)
        if live:
            # Seal the recovered tail where valid data ends, then start afresh.
            tail = self._segments[live[-1]]
            self._current = tail
            self._salt = fmt.salt_of(tail.seq)
            self._write_offset = replayed.tail_end
            if not replayed.tail_sealed:
                self._seal_current()
            next_seq = tail.seq + 1
        else:
            next_seq = 1
        self._start_segment(next_seq)
        self.maybe_prepare_spare()

    # -------------------------------------------------------------- segments
    def has_spare(self) -> bool:
        """Whether a preallocated segment is ready for the next rotation."""
        return self._spares.has_spare()

    def maybe_prepare_spare(self) -> bool:
        """Zero-fill one spare segment if none is ready; return whether it made one.

        Slow (writes ``segment_bytes``); the driver runs it in a worker thread
        (this and :meth:`sync` are the thread-safe methods).
        """
        return self._spares.maybe_prepare()

    def _start_segment(self, seq: int) -> None:
        """Make segment ``seq`` current: a spare renamed, header written, checkpoints."""
        path = self._segment_path(seq)
        os.rename(self._spares.take(), path)
        fd = os.open(path, os.O_RDWR)
        os.pwrite(fd, fmt.encode_segment_header(seq), 0)
        # The header must be durable before any record of this segment is trusted.
        os.fdatasync(fd)
        fsync_dir(self._wal_dir)
        segment = _Segment(seq, path, fd)
        self._segments[seq] = segment
        self._current = segment
        self._collect_due = True
        self._salt = fmt.salt_of(seq)
        self._write_offset = fmt.SEGMENT_HEADER_BYTES
        self._buffer = []
        self._buffer_bytes = 0
        for g in self._groups.values():
            self._encode(
                RecordKind.CHECKPOINT,
                g.group_id,
                g.snapshot_term,
                g.snapshot_index,
                fmt.encode_checkpoint(g.checkpoint()),
            )

    def _seal_current(self) -> None:
        """Write everything buffered plus a SEAL record to the current segment; sync it."""
        segment = self._current
        assert segment is not None
        fmt.encode_record(self._buffer, self._salt, RecordKind.SEAL, 0, 0, 0, b"")
        self._buffer_bytes += fmt.RECORD_HEADER_BYTES
        self._write_buffer(segment)
        os.fdatasync(segment.fd)
        self._dirty_fds.discard(segment.fd)

    def _room(self) -> int:
        # Keep space for the SEAL record.
        used = self._write_offset + self._buffer_bytes + fmt.RECORD_HEADER_BYTES
        return self.segment_bytes - used

    def _encode(
        self,
        kind: RecordKind,
        group_id: int,
        term: int,
        index: int,
        payload: bytes,
        entry_type: int = 0,
    ) -> tuple[int, int]:
        """Encode one record into the buffer; return its (segment seq, offset)."""
        size = fmt.RECORD_HEADER_BYTES + len(payload)
        if size > self._room():
            if kind is RecordKind.CHECKPOINT:
                raise StorageFailed("segment_bytes is too small to hold the group checkpoints")
            if size > self.segment_bytes - fmt.SEGMENT_HEADER_BYTES - fmt.RECORD_HEADER_BYTES:
                raise ValueError(f"a {size}-byte record exceeds the segment size")
            assert self._current is not None
            try:
                self._seal_current()
                self._start_segment(self._current.seq + 1)
            except OSError as exc:
                # As a failed flush: the store stops for good, and the driver stops
                # its rounds through StorageFailed (a raw OSError ended them unseen).
                self._failed = exc
                raise StorageFailed(f"WAL write failed while sealing a segment: {exc}") from exc
            if size > self._room():
                raise StorageFailed(f"a {size}-byte record does not fit in a new segment")
        assert self._current is not None
        offset = self._write_offset + self._buffer_bytes
        fmt.encode_record(
            self._buffer, self._salt, kind, group_id, term, index, payload, entry_type
        )
        self._buffer_bytes += size
        return self._current.seq, offset

    # ------------------------------------------------------------ write API
    def _group_state(self, group_id: int) -> GroupIndex:
        g = self._groups.get(group_id)
        if g is None:
            g = self._groups[group_id] = new_group_index(group_id)
        return g

    def _check(self) -> None:
        if self._failed is not None:
            raise StorageFailed(f"the log store failed earlier: {self._failed}")

    def append(self, group_id: int, entries: Sequence[Entry]) -> None:
        """Encode ``entries`` (consecutive indices) for ``group_id``; replaces any suffix.

        The first index must be in [first_index, last_index + 1].
        """
        self._check()
        if not entries:
            return
        g = self._group_state(group_id)
        start = entries[0].index
        if start <= g.compact_index or start > g.last + 1:
            raise ValueError(
                f"group {group_id}: append at {start} outside [{g.compact_index + 1}, {g.last + 1}]"
            )
        if start <= g.last:
            g.truncate_from(start)
            self._collect_due = True
        if entries[-1].index != start + len(entries) - 1:
            raise ValueError(f"group {group_id}: entries are not consecutive from {start}")
        total = sum(len(e.data) for e in entries) + fmt.RECORD_HEADER_BYTES * len(entries)
        if total <= self._room():
            # Fast path: the whole run fits in the current segment.
            assert self._current is not None
            g.locs += fmt.encode_entries(
                self._buffer,
                self._salt,
                group_id,
                self._current.seq,
                entries,
                self._write_offset + self._buffer_bytes,
            )
            self._buffer_bytes += total
            self._cache.add(g, entries)
            return
        for entry in entries:
            if entry.index != g.last + 1:
                raise ValueError(f"group {group_id}: entries are not consecutive at {entry.index}")
            seq, offset = self._encode(
                RecordKind.ENTRY, group_id, entry.term, entry.index, entry.data, entry.type
            )
            g.locs.append((entry.term, seq, offset, len(entry.data), int(entry.type)))
        self._cache.add(g, entries)

    def set_hard_state(self, group_id: int, hard_state: HardState) -> None:
        """Encode the group's new hard state."""
        self._check()
        g = self._group_state(group_id)
        self._encode(
            RecordKind.HARD_STATE,
            group_id,
            hard_state.term,
            hard_state.commit,
            fmt.encode_vote(hard_state.vote),
        )
        g.hard_state = hard_state

    def set_conf_state(self, group_id: int, index: int, conf_state: ConfState) -> None:
        """Record the membership the host applied at log ``index`` (or at bootstrap)."""
        self._check()
        g = self._group_state(group_id)
        self._encode(RecordKind.CONF_STATE, group_id, 0, index, fmt.encode_conf_state(conf_state))
        g.conf_index = index
        g.conf_state = conf_state

    def install_snapshot(self, group_id: int, snapshot: Snapshot) -> None:
        """Persist a snapshot received from the leader: the group's log is replaced."""
        self._save_snapshot(group_id, snapshot, fmt.SNAPSHOT_INSTALL)

    def save_local_snapshot(self, group_id: int, snapshot: Snapshot) -> None:
        """Persist a snapshot taken at an applied index; the log is kept (see compact)."""
        g = self._group_state(group_id)
        if not g.compact_index <= snapshot.metadata.index <= g.last:
            raise ValueError(
                f"group {group_id}: local snapshot at {snapshot.metadata.index} "
                f"outside the log [{g.compact_index}, {g.last}]"
            )
        self._save_snapshot(group_id, snapshot, fmt.SNAPSHOT_LOCAL)

    def _save_snapshot(self, group_id: int, snapshot: Snapshot, flag: int) -> None:
        self._check()
        if snapshot.metadata.index <= self._group_state(group_id).snapshot_index:
            return  # older than what we hold: nothing to do
        # Into the round's pack: written durably before this record is (flush).
        location = self.snapshot_packs.open_pack().add(group_id, snapshot)
        self._record_snapshot(group_id, snapshot, flag, location)

    def begin_snapshot_pack(self) -> SnapshotPack:
        """A pack for a batch of local snapshots (a compaction's).

        Write it with :meth:`SnapshotPack.write_durably` (any thread), record its
        snapshots with :meth:`note_local_snapshot`, then :meth:`end_snapshot_pack`.
        It also copies the live snapshots of sparse packs (see
        :mod:`raft.wal.snapshot_packs`), recorded by :meth:`end_snapshot_pack`.
        """
        sparse = self.snapshot_packs.sparse()
        carry = [
            (g.group_id, g.snapshot_term, g.snapshot_index, g.snapshot_location)
            for g in (self._groups.values() if sparse else ())
            if g.snapshot_location.pack in sparse
        ]
        return self.snapshot_packs.begin(carry)

    def end_snapshot_pack(self, pack: SnapshotPack) -> None:
        """Done recording ``pack`` (or its write failed). Records where the snapshots
        it copied out of sparse packs lie now (unless a group moved on meanwhile);
        from now on a pack lives only while a group's current snapshot lies in it."""
        for group_id, term, index, old in pack.carry if pack.durable else ():
            g = self._groups.get(group_id)
            new = pack.locations.get((group_id, term, index))
            if g is None or new is None or g.snapshot_location != old:
                continue  # dropped, not copied (snapshotted anew), or moved on
            conf = g.snapshot_conf_state
            marker = fmt.encode_snapshot_marker(conf, new)
            self._encode(RecordKind.SNAPSHOT, group_id, term, index, marker, fmt.SNAPSHOT_LOCAL)
            self.snapshot_packs.move(old, new)
            g.snapshot_location = new
        self.snapshot_packs.end(pack)

    def note_local_snapshot(self, group_id: int, snapshot: Snapshot) -> bool:
        """Record a local snapshot that a durable pack of :meth:`begin_snapshot_pack` holds.

        Returns False when it is stale meanwhile: a newer snapshot was recorded,
        or the log no longer holds its index. ValueError if no such pack holds it.
        """
        self._check()
        g = self._group_state(group_id)
        meta = snapshot.metadata
        if meta.index <= g.snapshot_index or not g.compact_index <= meta.index <= g.last:
            return False
        location = self.snapshot_packs.location_of(group_id, meta.term, meta.index)
        if location is None:
            raise ValueError(f"group {group_id}: snapshot at {meta.index} is in no durable pack")
        self._record_snapshot(group_id, snapshot, fmt.SNAPSHOT_LOCAL, location)
        return True

    def _record_snapshot(
        self, group_id: int, snapshot: Snapshot, flag: int, location: SnapshotLocation
    ) -> None:
        meta = snapshot.metadata
        g = self._group_state(group_id)
        self._encode(
            RecordKind.SNAPSHOT,
            group_id,
            meta.term,
            meta.index,
            fmt.encode_snapshot_marker(meta.conf_state, location),
            flag,
        )
        self.snapshot_packs.move(g.snapshot_location, location)
        g.note_snapshot(meta.term, meta.index, meta.conf_state, flag, location)
        if flag == fmt.SNAPSHOT_INSTALL:
            self._collect_due = True  # the log was replaced

    def compact(self, group_id: int, index: int) -> None:
        """Discard the group's entries <= ``index`` (at most its snapshot index).

        Segments that only held discarded entries are collected after the next sync.
        """
        self._check()
        g = self._group_state(group_id)
        if index <= g.compact_index:
            return
        if index > g.snapshot_index:
            raise ValueError(
                f"group {group_id}: compact to {index} beyond the snapshot at {g.snapshot_index}"
            )
        term = self.term_of(g, index)
        self._encode(RecordKind.COMPACT, group_id, term, index, b"")
        g.compact_to(index, term)
        self._collect_due = True

    def drop_group(self, group_id: int) -> None:
        """Delete this node's replica of ``group_id``: its entries, snapshot and membership.

        Only the term and vote survive (a DROP record), so a replica created
        again later (the group moved back here) never votes twice in a term.
        Segments held only by the group's entries are collected after the
        next sync; its snapshot's pack goes once no group's snapshot is in it.
        """
        self._check()
        g = self._groups.get(group_id)
        if g is None:
            return
        hard_state = g.hard_state
        vote = fmt.encode_vote(hard_state.vote)
        self._encode(RecordKind.DROP, group_id, hard_state.term, 0, vote)
        self.snapshot_packs.move(g.snapshot_location, NO_SNAPSHOT)
        self._groups[group_id] = dropped_group_index(group_id, hard_state)
        self._collect_due = True

    def flush(self) -> None:
        """Write everything encoded since the last flush (one system call per 1024 chunks)."""
        self._check()
        if not self._buffer:
            return
        segment = self._current
        assert segment is not None
        try:
            self._write_buffer(segment)
        except OSError as exc:
            self._failed = exc
            raise StorageFailed(f"WAL write failed: {exc}") from exc
        self._dirty_fds.add(segment.fd)

    def _write_buffer(self, segment: _Segment) -> None:
        """Write the buffered records (pwritev, nothing copied); the open snapshot
        pack first, durably, since records in the buffer may name it.

        Several pwritev calls are no weaker than one: nothing is durable before
        the round's fdatasync, and recovery cuts a torn tail at the first bad record.
        """
        self.snapshot_packs.write_open_pack()  # before any record naming it is written
        if self.io_hook is not None:
            self.io_hook("write")
        offset = pwrite_all(segment.fd, self._buffer, self._write_offset)
        self._write_offset = offset
        self._buffer = []
        self._buffer_bytes = 0

    def sync(self) -> None:
        """fdatasync what was flushed. The only method safe to call from another thread."""
        fds = list(self._dirty_fds)
        self._dirty_fds.clear()
        started_ns = time.monotonic_ns()
        for fd in fds:
            try:
                if self.io_hook is not None:
                    self.io_hook("sync")
                os.fdatasync(fd)
            except OSError as exc:
                # After a failed fsync the page cache state is unknown: stop for good.
                self._failed = exc
                raise StorageFailed(f"WAL fdatasync failed: {exc}") from exc
        if fds and self.sync_observer is not None:
            self.sync_observer(time.monotonic_ns() - started_ns)

    def commit(self) -> None:
        """flush, sync and collect garbage: the synchronous form of one round's write."""
        self.flush()
        self.sync()
        self.maybe_collect_garbage()

    def maybe_collect_garbage(self) -> list[int]:
        """Recycle segments no group needs; return their sequences.

        Does nothing unless everything encoded is durable (nothing buffered or
        unsynced): a compaction must be on disk before the segments it frees go.
        """
        if self._buffer or self._dirty_fds:
            return []
        self.snapshot_packs.delete_unreferenced()
        if not self._collect_due:
            return []
        self._collect_due = False
        assert self._current is not None
        needed = self._current.seq
        for g in self._groups.values():
            if g.locs:
                needed = min(needed, g.locs[0][1])
        collected = []
        for seq in sorted(self._segments):
            if seq >= needed:
                break
            segment = self._segments.pop(seq)
            os.close(segment.fd)
            self._dirty_fds.discard(segment.fd)
            if not self._spares.maybe_recycle(segment.path, seq):
                segment.path.unlink()
            collected.append(seq)
        if collected:
            fsync_dir(self._wal_dir)
        return collected

    def close(self) -> None:
        """Flush, sync and close the files. Unsealed: the next open seals the tail."""
        if self._failed is None:
            self.flush()
            self.sync()
        for segment in self._segments.values():
            os.close(segment.fd)
        self._segments.clear()
        self._current = None

    # ------------------------------------------------------------- read API
    def group(self, group_id: int) -> GroupLog:
        """The :class:`raft.types.LogReader` view of one group (created empty if new)."""
        return GroupLog(self, self._group_state(group_id))

    def group_ids(self) -> list[int]:
        """Every group that has written anything, sorted."""
        return sorted(self._groups)

    def segment_seqs(self) -> list[int]:
        """The live segments, oldest first."""
        return sorted(self._segments)

    def retained_bytes(self) -> int:
        """Disk held by live segments (whole preallocated segments)."""
        return len(self._segments) * self.segment_bytes

    def compaction_targets(self, keep_segments: int) -> dict[int, int]:
        """What frees every live segment but the newest ``keep_segments``: group -> index
        (see :func:`raft.wal.retention.compaction_targets`)."""
        return compaction_targets(self._groups.values(), sorted(self._segments), keep_segments)

    def compaction_unpins(self, group_id: int, index: int) -> bool:
        """Whether compacting ``group_id`` up to ``index`` releases a segment it holds
        (see :func:`raft.wal.retention.compaction_unpins`)."""
        g = self._groups.get(group_id)
        return g is not None and compaction_unpins(g, index)

    def locate(self, group_id: int, index: int) -> EntryLocation:
        """Where entry ``index`` of the group lies on disk (for indexing without copying)."""
        g = self._group_state(group_id)
        self._check_range(g, index, index + 1)
        _term, seq, offset, length, _etype = g.locs[index - g.first]
        return EntryLocation(seq, offset + fmt.RECORD_HEADER_BYTES, length)

    def read_at(self, location: EntryLocation, start: int = 0, length: int | None = None) -> bytes:
        """Bytes [start, start + length) of the entry data at ``location``."""
        segment = self._segments.get(location.segment_seq)
        if segment is None:
            raise LogCompacted(f"segment {location.segment_seq} was collected")
        if length is None:
            length = location.length - start
        if start < 0 or start + length > location.length:
            raise ValueError("read outside the entry")
        if self._current is segment and self._buffer:
            self.flush()
        return os.pread(segment.fd, length, location.offset + start)

    def _check_range(self, g: GroupIndex, lo: int, hi: int) -> None:
        if lo <= g.compact_index:
            raise LogCompacted(
                f"group {g.group_id}: index {lo} is compacted (<= {g.compact_index})"
            )
        if hi > g.last + 1:
            raise LogUnavailable(f"group {g.group_id}: index {hi - 1} is beyond {g.last}")

    def term_of(self, g: GroupIndex, index: int) -> int:
        """Term of entry ``index`` of ``g`` (the snapshot's or compaction point's there)."""
        if index == g.compact_index:
            return g.compact_term
        if index == g.snapshot_index:
            return g.snapshot_term
        self._check_range(g, index, index + 1)
        return g.locs[index - g.first][0]

    def entries_of(self, g: GroupIndex, lo: int, hi: int, max_bytes: int | None) -> list[Entry]:
        """Entries [lo, hi) of ``g``, from its cache or disk (see :class:`GroupLog`)."""
        self._check_range(g, lo, hi)
        if lo >= hi:
            return []
        out: list[Entry] = []
        total = 0
        index = lo
        while index < hi:
            if index >= g.cache_from:
                for entry in g.cache[index - g.cache_from : hi - g.cache_from]:
                    total += len(entry.data)
                    if out and max_bytes is not None and total > max_bytes:
                        return out
                    out.append(entry)
                return out
            stop = min(hi, g.cache_from)
            for entry in self._read_entries(g, index, stop):
                total += len(entry.data)
                if out and max_bytes is not None and total > max_bytes:
                    return out
                out.append(entry)
            index = stop
        return out

    def _read_entries(self, g: GroupIndex, lo: int, hi: int) -> Iterable[Entry]:
        """Entries [lo, hi) from disk: one pread per run of records in one segment."""
        if self._buffer:
            self.flush()
        locs = g.locs[lo - g.first : hi - g.first]
        run_start = 0
        while run_start < len(locs):
            seq = locs[run_start][1]
            run_end = run_start
            while run_end + 1 < len(locs) and locs[run_end + 1][1] == seq:
                run_end += 1
            first_offset = locs[run_start][2]
            end = locs[run_end][2] + fmt.RECORD_HEADER_BYTES + locs[run_end][3]
            segment = self._segments[seq]
            blob = os.pread(segment.fd, end - first_offset, first_offset)
            for i in range(run_start, run_end + 1):
                term, _seq, offset, length, etype = locs[i]
                start = offset - first_offset + fmt.RECORD_HEADER_BYTES
                yield Entry(
                    term=term,
                    index=lo + i,
                    type=EntryType(etype),
                    data=blob[start : start + length],
                )
            run_start = run_end + 1

    def snapshot_of(self, g: GroupIndex) -> Snapshot:
        """The newest snapshot of ``g`` (empty if none)."""
        if g.snapshot_index == 0:
            return Snapshot()
        return self.snapshot_packs.read(
            g.group_id, g.snapshot_term, g.snapshot_index, g.snapshot_location
        )
