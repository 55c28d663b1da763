"""Preallocated WAL segment files, ready to be renamed into use (SHELL).

A spare is a segment-sized file of zeros made durable ahead of time (or a
collected segment recycled as is: its old records fail the CRC salted with
their segment's sequence), so a rotation never extends a file and the
fdatasync after each round stays cheap.

Thread-safety: every method may be called from any thread; the driver
prepares spares on a worker thread while its loop takes them.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Sequence
from pathlib import Path

SEGMENT_SUFFIX = ".wal"
SPARE_PREFIX = "spare-"
_ZERO_CHUNK = bytes(1 << 20)
_IOV_MAX = 1024
_names = itertools.count()


def segment_path(wal_dir: Path, seq: int) -> Path:
    """Where live segment ``seq`` lies in ``wal_dir``."""
    return wal_dir / f"{seq:016x}{SEGMENT_SUFFIX}"


def pwrite_all(fd: int, chunks: Sequence[bytes], offset: int) -> int:
    """Write ``chunks`` back to back at ``offset`` with ``pwritev`` (IOV_MAX buffers a
    call, nothing copied); finish a short write. Returns the offset after them."""
    for start in range(0, len(chunks), _IOV_MAX):
        part = chunks[start : start + _IOV_MAX]
        size = sum(map(len, part))
        written = os.pwritev(fd, part, offset)
        if written != size:  # a short write (rare): finish it
            rest = b"".join(part)[written:]
            while rest:
                n = os.pwrite(fd, rest, offset + written)
                rest = rest[n:]
                written += n
        offset += size
    return offset


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (creations, renames) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SparePool:
    """The spare segments of one WAL directory."""

    def __init__(self, wal_dir: Path, segment_bytes: int, spares_max: int) -> None:
        self._wal_dir = wal_dir
        self._segment_bytes = segment_bytes
        self._spares_max = spares_max
        self._lock = threading.Lock()
        self._spares: list[Path] = []

    def recover(self) -> None:
        """Drop half-made spares a crash left, and adopt the finished ones."""
        for leftover in self._wal_dir.glob("tmp-*"):
            leftover.unlink()
        spares = sorted(
            p
            for p in self._wal_dir.iterdir()
            if p.name.startswith(SPARE_PREFIX) and p.name.endswith(SEGMENT_SUFFIX)
        )
        with self._lock:
            self._spares = spares

    def has_spare(self) -> bool:
        """Whether a spare is ready for the next rotation."""
        with self._lock:
            return bool(self._spares)

    def maybe_prepare(self) -> bool:
        """Zero-fill one spare if none is ready; return whether it made one.

        Slow (writes and fsyncs a whole segment): run it off the event loop.
        """
        if self.has_spare():
            return False
        name = f"{os.getpid()}-{next(_names)}"
        final = self._wal_dir / f"{SPARE_PREFIX}{name}{SEGMENT_SUFFIX}"
        tmp = self._wal_dir / f"tmp-{name}"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            remaining = self._segment_bytes
            while remaining > 0:
                chunk = min(remaining, len(_ZERO_CHUNK))
                os.write(fd, _ZERO_CHUNK[:chunk])
                remaining -= chunk
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, final)
        fsync_dir(self._wal_dir)
        with self._lock:
            self._spares.append(final)
        return True

    def take(self) -> Path:
        """A spare to rename into use, made now if none is ready."""
        while True:
            with self._lock:
                if self._spares:
                    return self._spares.pop(0)
            self.maybe_prepare()

    def maybe_recycle(self, segment: Path, seq: int) -> bool:
        """Keep a collected segment as a spare if the pool has room; return whether it did.

        The caller fsyncs the directory after its batch of renames.
        """
        with self._lock:
            if len(self._spares) >= self._spares_max:
                return False
        spare = self._wal_dir / f"{SPARE_PREFIX}{seq:016x}{SEGMENT_SUFFIX}"
        os.rename(segment, spare)
        with self._lock:
            self._spares.append(spare)
        return True
