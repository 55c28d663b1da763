"""Snapshot pack files next to the WAL (SHELL: file I/O).

``<snap-dir>/<pack:016x>.pack`` holds the snapshots of one batch: every
group snapshotted by one compaction, or every snapshot saved (installed from
a leader, or taken locally) in one driver round. The layout is in
:mod:`raft.wal.format`; a WAL record names a snapshot by
:class:`raft.wal.format.SnapshotLocation` (pack, offset, length).

Contracts:

- A pack is written once: all entries to ``<pack>.tmp``, one fsync, renamed
  into place, the directory synced (:meth:`SnapshotPack.write_durably`). A
  WAL record naming an entry of a pack reaches the disk only after that:
  the compaction's records are encoded once its pack is durable, and the log
  store writes the round's open pack before any buffered record
  (:meth:`SnapshotPacks.write_open_pack`). So no durable record names bytes
  a crash could lose.
- Reference counting: ``refs[pack]`` is the number of groups whose current
  snapshot lies in the pack. A pack is deleted once its count is 0 and it is
  not pinned (being written or recorded), and only after the WAL records
  that superseded its snapshots are durable (the log store calls
  :meth:`SnapshotPacks.delete_unreferenced` after a sync). The counts are
  rebuilt from the replayed groups on open (:meth:`SnapshotPacks.recover`),
  which also removes unreferenced packs and ``.tmp`` leftovers.
- Pack ids only grow (never reused while a record may name the id).
- Repacking: a pack whose live entries fell to a quarter or less (groups
  never snapshotted again keep it, with the others' stale bytes) is emptied
  into the next compaction's pack: the live entries are copied as they are
  and recorded there, so its space is freed. Such a source pack is held
  (never deleted) while the new pack is being written from it.

Thread-safety: :meth:`SnapshotPack.write_durably` touches only its own
pack, so the driver runs it in a worker thread while the event loop goes
on; everything else runs on the log store's thread.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from raft.errors import StorageFailed
from raft.types import Snapshot, SnapshotMetadata
from raft.wal import format as fmt
from raft.wal.format import SnapshotLocation
from raft.wal.spares import fsync_dir, pwrite_all

PACK_SUFFIX = ".pack"
_SPARSE = 4  # a pack with live entries * _SPARSE <= its entries is repacked
# (group, term, index, where it lies now): a snapshot a new pack copies from a sparse pack.
Carried = tuple[int, int, int, SnapshotLocation]
_STRAY_SUFFIXES = (PACK_SUFFIX, ".tmp", ".snap")  # .snap: single-snapshot files of format 1


class SnapshotPack:
    """One pack being built: entries added, then written durably once."""

    def __init__(self, directory: Path, pack_id: int, carry: Sequence[Carried] = ()) -> None:
        """An empty pack ``pack_id`` in ``directory`` (nothing on disk yet) that will
        also copy the ``carry`` snapshots out of their sparse packs."""
        self.pack_id = pack_id
        self.carry = list(carry)
        self.path = pack_path(directory, pack_id)
        self._parts: list[bytes] = [b""]  # [0] is the header, known once complete
        self._size = fmt.PACK_HEADER_BYTES
        self._count = 0
        # Until durable, snapshots are read from here (by offset).
        self._unwritten: dict[int, Snapshot] = {}
        # (group, term, index) -> where each added snapshot lies.
        self.locations: dict[tuple[int, int, int], SnapshotLocation] = {}
        self.durable = False

    def add(self, group_id: int, snapshot: Snapshot) -> SnapshotLocation:
        """Append one group's snapshot (encoded now, written by :meth:`write_durably`)."""
        assert not self.durable, "a pack is written once"
        meta = snapshot.metadata
        head, data = fmt.encode_snapshot_entry(
            group_id, meta.term, meta.index, meta.conf_state, snapshot.data
        )
        location = SnapshotLocation(self.pack_id, self._size, len(head) + len(data))
        self._parts += (head, data)
        self._size += location.length
        self._count += 1
        self._unwritten[location.offset] = snapshot
        self.locations[(group_id, meta.term, meta.index)] = location
        return location

    def __len__(self) -> int:
        """How many snapshots were added."""
        return self._count

    def _copy(self, group_id: int, term: int, index: int, old: SnapshotLocation) -> None:
        """Append another pack's entry as it is (its CRC still covers it)."""
        blob = read_entry(self.path.parent, old)
        location = SnapshotLocation(self.pack_id, self._size, len(blob))
        self._parts.append(blob)
        self._size += location.length
        self._count += 1
        self.locations[(group_id, term, index)] = location

    def unwritten(self, location: SnapshotLocation) -> Snapshot | None:
        """The snapshot at ``location`` while the pack is not written yet, else None."""
        return self._unwritten.get(location.offset)

    def write_durably(self, items: Sequence[tuple[int, Snapshot]] = ()) -> None:
        """Add ``items``, then write the pack: tmp file, one fsync, rename, directory sync.

        A pack with no entries writes nothing. On failure the tmp file is removed
        and the exception propagates; the pack stays unwritten.
        """
        for group_id, snapshot in items:
            self.add(group_id, snapshot)
        fresh = {group_id for group_id, _snapshot in items}
        for group_id, term, index, old in self.carry:
            if group_id not in fresh:  # else superseded by the new snapshot anyway
                self._copy(group_id, term, index, old)
        if self._count:
            self._parts[0] = fmt.encode_pack_header(self.pack_id, self._count)
            tmp = self.path.with_suffix(".tmp")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    pwrite_all(fd, self._parts, 0)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.rename(tmp, self.path)
                fsync_dir(self.path.parent)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        self.durable = True
        self._parts = []
        self._unwritten = {}


class SnapshotPacks:
    """The snapshot packs of one node's WAL: ids, reference counts, reads, deletion."""

    def __init__(self, directory: Path) -> None:
        """``directory`` exists (the log store creates it)."""
        self.directory = directory
        self._refs: Counter[int] = Counter()
        self._pinned: dict[int, SnapshotPack] = {}
        self._held: Counter[int] = Counter()  # sparse packs being copied from
        self._entries: dict[int, int] = {}  # entries of each written pack
        self._open: SnapshotPack | None = None  # the round's pack, written before its records
        self._next_id = 1
        self._to_delete: list[int] = []

    def path(self, pack_id: int) -> Path:
        """Where pack ``pack_id`` lives."""
        return pack_path(self.directory, pack_id)

    # ------------------------------------------------------------ recovery
    def note_seen(self, location: SnapshotLocation) -> None:
        """A replayed record named ``location``: later packs get larger ids."""
        self._next_id = max(self._next_id, location.pack + 1)

    def recover(self, current: Iterable[SnapshotLocation]) -> None:
        """Rebuild the counts from each group's current snapshot; delete the rest.

        Removes unreferenced packs (a compaction whose records never reached the
        WAL, or packs whose deletion a crash interrupted) and ``.tmp`` files.
        StorageFailed if a referenced pack is missing.
        """
        self._refs = Counter(loc.pack for loc in current if loc.pack)
        present: set[int] = set()
        removed = False
        for path in self.directory.iterdir():
            if path.suffix not in _STRAY_SUFFIXES:
                continue  # not ours
            pack_id = _pack_id(path)
            if pack_id is not None:
                self._next_id = max(self._next_id, pack_id + 1)
                if pack_id in self._refs:
                    present.add(pack_id)
                    self._entries[pack_id] = _read_entry_count(path)
                    continue
            path.unlink()
            removed = True
        if removed:
            fsync_dir(self.directory)
        missing = sorted(set(self._refs) - present)
        if missing:
            raise StorageFailed(f"snapshot packs {missing} named by the WAL are missing")

    # --------------------------------------------------------------- writing
    def begin(self, carry: Sequence[Carried] = ()) -> SnapshotPack:
        """A new pinned pack: write it, record it, then :meth:`end` it. It copies
        ``carry`` out of their packs, which are held until then."""
        pack = SnapshotPack(self.directory, self._next_id, carry)
        self._next_id += 1
        self._pinned[pack.pack_id] = pack
        for *_key, old in carry:
            self._held[old.pack] += 1
        return pack

    def sparse(self) -> set[int]:
        """The packs whose live entries are a quarter of theirs or fewer (not pinned)."""
        return {
            pack_id
            for pack_id, live in self._refs.items()
            if live * _SPARSE <= self._entries.get(pack_id, 0) and pack_id not in self._pinned
        }

    def end(self, pack: SnapshotPack) -> None:
        """Unpin ``pack`` and release its sources: from now on a pack lives only
        while a group's snapshot is in it."""
        if self._pinned.pop(pack.pack_id, None) is None:
            return
        if pack.durable:
            self._entries[pack.pack_id] = len(pack)
        self._to_delete.append(pack.pack_id)
        for *_key, old in pack.carry:
            self._held[old.pack] -= 1
            self._to_delete.append(old.pack)
        self._held = +self._held  # drop zero counts

    def open_pack(self) -> SnapshotPack:
        """The pack that collects this round's saved snapshots (created on first use)."""
        if self._open is None:
            self._open = self.begin()
        return self._open

    def write_open_pack(self) -> None:
        """Make the round's pack durable (before any WAL record naming it is written)."""
        pack = self._open
        if pack is None:
            return
        pack.write_durably()
        self._open = None
        self.end(pack)

    def location_of(self, group_id: int, term: int, index: int) -> SnapshotLocation | None:
        """Where a durable, still pinned pack holds that snapshot (None if none does)."""
        for pack in self._pinned.values():
            location = pack.locations.get((group_id, term, index))
            if location is not None and pack.durable:
                return location
        return None

    def move(self, old: SnapshotLocation, new: SnapshotLocation) -> None:
        """A group's current snapshot moved from ``old`` to ``new`` (either may be none)."""
        if new.pack:
            self._refs[new.pack] += 1
        if old.pack:
            self._refs[old.pack] -= 1
            if not self._refs[old.pack]:
                del self._refs[old.pack]
                self._to_delete.append(old.pack)

    def delete_unreferenced(self) -> None:
        """Delete the packs no group needs. Call only once the WAL records that
        superseded their snapshots are durable.

        Counts are checked again here: a round's pack is unpinned when it is
        written, which can come just before the record naming it is encoded
        (a segment sealed while encoding that record), so it may have been
        scheduled at 0 and referenced since.
        """
        for pack_id in self._to_delete:
            if not (self._refs[pack_id] or self._held[pack_id] or pack_id in self._pinned):
                self.path(pack_id).unlink(missing_ok=True)
                self._entries.pop(pack_id, None)
        self._to_delete = []

    def live_packs(self) -> list[int]:
        """The ids of the packs some group's current snapshot lies in."""
        return sorted(self._refs)

    # --------------------------------------------------------------- reading
    def read(self, group_id: int, term: int, index: int, location: SnapshotLocation) -> Snapshot:
        """The snapshot of ``group_id`` at (term, index); StorageFailed if unreadable."""
        pack = self._pinned.get(location.pack)
        if pack is not None:
            unwritten = pack.unwritten(location)
            if unwritten is not None:
                return unwritten
        try:
            found = fmt.decode_snapshot_entry(read_entry(self.directory, location))
        except (OSError, fmt.FormatError) as exc:
            raise StorageFailed(f"snapshot of group {group_id} is unreadable: {exc}") from exc
        found_group, found_term, found_index, conf, data = found
        if (found_group, found_term, found_index) != (group_id, term, index):
            raise StorageFailed(
                f"snapshot of group {group_id} at {location} holds group {found_group} "
                f"({found_term}, {found_index}), not ({term}, {index})"
            )
        return Snapshot(SnapshotMetadata(index=index, term=term, conf_state=conf), data)


def pack_path(directory: Path, pack_id: int) -> Path:
    """Where pack ``pack_id`` of ``directory`` lives."""
    return directory / f"{pack_id:016x}{PACK_SUFFIX}"


def read_entry(directory: Path, location: SnapshotLocation) -> bytes:
    """The raw bytes of the pack entry at ``location`` (OSError if unreadable)."""
    fd = os.open(pack_path(directory, location.pack), os.O_RDONLY)
    try:
        return os.pread(fd, location.length, location.offset)
    finally:
        os.close(fd)


def _read_entry_count(path: Path) -> int:
    """How many entries the pack at ``path`` holds (its header); StorageFailed if damaged."""
    try:
        with path.open("rb") as file:
            return fmt.decode_pack_header(file.read(fmt.PACK_HEADER_BYTES))[1]
    except (OSError, fmt.FormatError) as exc:
        raise StorageFailed(f"snapshot pack {path.name} is unreadable: {exc}") from exc


def _pack_id(path: Path) -> int | None:
    """The id of a ``.pack`` file's name; None for any other file."""
    if path.suffix != PACK_SUFFIX:
        return None
    try:
        return int(path.stem, 16)
    except ValueError:
        return None
