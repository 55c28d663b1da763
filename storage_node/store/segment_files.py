"""The message store over the node's WAL segment files, and the sealed-segment indexer.

:class:`WalBodyStore` reads a body from the WAL, where raft already
wrote it (``LogStore``: the entry cache or one ``pread``). The only bodies
it keeps aside are those adopted from a leader's group image: this node's
log never held them, so they live in memory and in the group's snapshot
file (every local snapshot carries them until they are no longer
referenced), which is where a restart finds them again.

Retention contract with raft: the group's log must not be compacted past
an entry the partition still references (the group's truncate floor, which
``GroupReplica`` keeps through ``Driver.set_truncate_floor``), so every
referenced body not adopted stays in a live segment.

:func:`index_sealed_segments` writes ``<seq>.idx`` next to every sealed
segment that lacks one (``protocol.segments`` layout; written to a temp
file, fsynced, renamed) and removes indexes of collected segments.
:func:`uncache_segments` lets the page cache go of sealed segments older
than a window, right before a spare segment is zero-filled.
:func:`read_file_ranges` reads entries where ``WalBodyStore.entry_location``
says they lie, on any thread (snapshot exports read segments off the loop).

SHELL (file I/O).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Mapping, Set
from pathlib import Path

from protocol import segments
from raft.errors import LogCompacted, LogUnavailable
from raft.wal.logstore import LogStore
from raft.wal.spares import segment_path
from storage_node.errors import BodyUnavailable
from storage_node.store.base import EntryFileRange

INDEX_SUFFIX = ".idx"
SEGMENT_SUFFIX = ".wal"
_fadvise = getattr(os, "posix_fadvise", None)


class WalBodyStore:
    """Implements :class:`storage_node.store.base.BodyStore` over a ``LogStore``."""

    def __init__(self, log_store: LogStore) -> None:
        self.log_store = log_store
        self._adopted: dict[int, dict[int, bytes]] = {}

    def keep_applied(self, group_id: int, log_index: int, data: bytes) -> None:
        """Nothing to do: the entry is in the WAL."""

    def adopt(self, group_id: int, bodies: Mapping[int, bytes]) -> None:
        """Keep bodies this node's log never held (they came with a group image)."""
        self._adopted.setdefault(group_id, {}).update(bodies)

    def read_entry(self, group_id: int, log_index: int) -> bytes:
        """The entry's bytes from the WAL, else from the adopted bodies."""
        adopted = self._adopted.get(group_id)
        if adopted is not None and log_index in adopted:
            return adopted[log_index]
        try:
            return self.log_store.group(group_id).entries(log_index, log_index + 1)[0].data
        except (LogCompacted, LogUnavailable) as exc:
            raise BodyUnavailable(
                f"group {group_id}: log entry {log_index} is not in this node's log ({exc})"
            ) from exc

    def entry_location(self, group_id: int, log_index: int) -> EntryFileRange | None:
        """Where the entry lies in its WAL segment (None: adopted, or not in the log)."""
        adopted = self._adopted.get(group_id)
        if adopted is not None and log_index in adopted:
            return None
        try:
            location = self.log_store.locate(group_id, log_index)
        except (LogCompacted, LogUnavailable):
            return None
        path = segment_path(self.log_store.directory / "wal", location.segment_seq)
        return EntryFileRange(str(path), location.offset, location.length)

    def bodies_to_carry(self, group_id: int, referenced: Set[int]) -> dict[int, bytes]:
        """The adopted bodies still referenced (the WAL holds every other one)."""
        adopted = self._adopted.get(group_id, {})
        kept = {i: data for i, data in adopted.items() if i in referenced}
        self._adopted[group_id] = kept
        return dict(kept)

    def bodies_for_peer(self, group_id: int, referenced: Set[int]) -> dict[int, bytes]:
        """Every referenced body, read from the WAL or the adopted ones."""
        return {i: self.read_entry(group_id, i) for i in sorted(referenced)}


def index_path(segment_path: Path) -> Path:
    """Where the index of a segment file lives."""
    return segment_path.with_suffix(INDEX_SUFFIX)


def index_sealed_segments(log_store: LogStore) -> list[int]:
    """Write the missing indexes of sealed segments; drop those of collected ones.

    Returns the sequences indexed now. Call it on the thread that drives the
    store, or use :func:`index_segments` in a worker with the live sequences
    taken on that thread.
    """
    return index_segments(log_store.directory / "wal", log_store.segment_seqs())


def index_segments(wal_dir: Path, live_seqs: list[int]) -> list[int]:
    """:func:`index_sealed_segments` for the segment files of ``wal_dir``.

    ``live_seqs`` are the live segments, oldest first; every one but the
    newest is sealed (docs/wal-format.md). Raises ``SegmentCorrupted`` if a
    sealed segment does not verify, ``OSError`` if a file went away under it
    (a segment collected meanwhile: the next call catches up).
    """
    written = []
    for seq in live_seqs[:-1]:
        path = wal_dir / f"{seq:016x}{SEGMENT_SUFFIX}"
        target = index_path(path)
        if target.exists():
            continue
        index = _index_of(path)
        _write_durably(target, segments.encode_index(index))
        written.append(seq)
    keep = {f"{seq:016x}{INDEX_SUFFIX}" for seq in live_seqs}
    for stale in wal_dir.glob(f"*{INDEX_SUFFIX}"):
        if stale.name not in keep:
            stale.unlink(missing_ok=True)
    return written


def uncache_segments(
    wal_dir: Path, live_seqs: list[int], cached_segments: int, uncached: set[int]
) -> list[int]:
    """Drop from the page cache the sealed segments older than the newest ``cached_segments``
    sealed ones, each once (``uncached`` holds the sequences dropped already; collected ones
    leave it). Returns the sequences dropped now.

    Why: on virtual machines that hand freed guest pages back to the host, a page
    the kernel takes fresh for the log costs ~2 ms per MiB to touch, against a
    tenth of that for one freed a moment ago. A log that is only appended to
    takes every page fresh; one that lets go of its old segments gets their
    pages back for the next spare segment, if the spare takes them at once
    (freed pages are handed back to the host within seconds): the storage
    node runs this right before each spare segment's zero-fill
    (``raft.host.driver.Driver.before_spare_fill``), in the thread that fills it.
    Segments that old were indexed long before (the indexer runs every
    second). Reads of bodies older than the window come from the disk (the
    entry cache keeps the newest entries). Advisory only: the segments are
    sealed and synced, and nothing else changes.
    """
    sealed = live_seqs[:-1]
    dropped: list[int] = []
    if _fadvise is None:  # not on this platform (macOS): the page cache keeps them
        return dropped
    for seq in sealed[: max(0, len(sealed) - cached_segments)]:
        if seq in uncached:
            continue
        try:
            fd = os.open(wal_dir / f"{seq:016x}{SEGMENT_SUFFIX}", os.O_RDONLY)
        except FileNotFoundError:  # collected meanwhile
            continue
        try:
            _fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        uncached.add(seq)
        dropped.append(seq)
    uncached.intersection_update(live_seqs)
    return dropped


def _index_of(path: Path) -> segments.SegmentIndex:
    """Index the segment file at ``path`` through a read-only map of it: no copy, and
    no fresh memory for a 64 MiB buffer (the pages are in the page cache already)."""
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            return segments.build_index(b"")  # raises SegmentCorrupted
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    # Not closed explicitly: an exception's traceback may still hold a view of it;
    # the map goes with its last reference.
    return segments.build_index(memoryview(mapped))


def _write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_file_ranges(ranges: Iterable[tuple[int, EntryFileRange]]) -> dict[int, bytes]:
    """The bytes of each ``(key, range)``, by key: one open per file, one ``pread``
    per range. Safe on any thread (it shares no file descriptor); raises OSError
    (``FileNotFoundError`` for a file gone) or ValueError for a short read."""
    out: dict[int, bytes] = {}
    handles: dict[str, int] = {}
    try:
        for key, (path, offset, length) in ranges:
            fd = handles.get(path)
            if fd is None:
                fd = handles[path] = os.open(path, os.O_RDONLY)
            data = os.pread(fd, length, offset)
            if len(data) != length:
                raise ValueError(f"{path}: {len(data)} bytes at {offset}, not {length}")
            out[key] = data
    finally:
        for fd in handles.values():
            os.close(fd)
    return out
