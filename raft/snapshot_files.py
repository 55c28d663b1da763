"""One snapshot file per group and snapshot, next to the WAL (SHELL: file I/O).

``<snap-dir>/<group:08x>-<term:016x>-<index:016x>.snap``, in the layout of
:func:`raft.wal_format.encode_snapshot_file`.

Contract with the WAL: a SNAPSHOT record is encoded only after its file is
durable (written, fsynced, renamed into place and the directory synced), so
a record never names a file that a crash could lose.

Thread-safety: :meth:`SnapshotFiles.write_durably` touches only files, so
the driver runs it in a worker thread for many groups at once (one
directory sync for the batch) while the event loop goes on.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from raft import wal_format as fmt
from raft.errors import StorageFailed
from raft.spares import fsync_dir
from raft.types import Snapshot, SnapshotMetadata


class SnapshotFiles:
    """The snapshot files of one node's WAL."""

    def __init__(self, directory: Path) -> None:
        """``directory`` exists (the log store creates it)."""
        self.directory = directory

    def path(self, group_id: int, term: int, index: int) -> Path:
        """Where the snapshot of ``group_id`` at (term, index) lives."""
        return self.directory / f"{group_id:08x}-{term:016x}-{index:016x}.snap"

    def write_durably(self, items: Sequence[tuple[int, Snapshot]]) -> None:
        """Write each (group, snapshot), fsync each, rename each into place; sync the directory.

        All files are written before the first fsync: the first one's journal
        commit then carries most of the others' data and metadata, so a batch
        of a thousand small snapshots costs far fewer than a thousand flushes.
        """
        written: list[tuple[Path, Path, int]] = []
        try:
            for group_id, snapshot in items:
                meta = snapshot.metadata
                path = self.path(group_id, meta.term, meta.index)
                blob = fmt.encode_snapshot_file(
                    group_id, meta.term, meta.index, meta.conf_state, snapshot.data
                )
                tmp = path.with_suffix(".tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                written.append((tmp, path, fd))
                view = memoryview(blob)
                while view:
                    view = view[os.write(fd, view) :]
            for _tmp, _path, fd in written:
                os.fsync(fd)
        finally:
            for _tmp, _path, fd in written:
                os.close(fd)
        for tmp, path, _fd in written:
            os.rename(tmp, path)
        if written:
            fsync_dir(self.directory)

    def remove_all_but(self, keep: Iterable[Path]) -> None:
        """Delete every snapshot or temporary file not in ``keep`` (run once recovered).

        Leftovers of a crash or a stop: files older than a group's newest
        snapshot not deleted yet, and files of a compaction never recorded.
        """
        wanted = set(keep)
        for path in self.directory.iterdir():
            if path.suffix in (".snap", ".tmp") and path not in wanted:
                path.unlink()

    def read(self, group_id: int, term: int, index: int) -> Snapshot:
        """The snapshot of ``group_id`` at (term, index); StorageFailed if unreadable."""
        path = self.path(group_id, term, index)
        try:
            _gid, term, index, conf, data = fmt.decode_snapshot_file(path.read_bytes())
        except (OSError, fmt.FormatError) as exc:
            raise StorageFailed(f"snapshot of group {group_id} is unreadable: {exc}") from exc
        return Snapshot(SnapshotMetadata(index=index, term=term, conf_state=conf), data)
