"""A simulated disk with fsync, crash and torn-write semantics.

Each sim node has one disk shared by all its raft groups: an append-only
file of framed records (``u32 length, u32 crc32, msgpack payload``). Writes
land in the "page cache" at once; ``fsync`` makes everything written so far
durable. A crash keeps the durable prefix plus a random prefix of the rest
(possibly ending inside a record: a torn write, sometimes with garbage in
the torn part). Recovery reads records until the first incomplete or
corrupt one and cuts the file there, which must never cut durable bytes.

Per group and per Ready the host writes the snapshot first, then entries,
then the hard state, so any surviving prefix is a state the replica really
passed through: a hard state never survives without the entries its commit
index covers.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgpack

from raft.types import ConfState, Entry, EntryType, HardState, Snapshot, SnapshotMetadata

_FRAME = struct.Struct("<II")  # payload length, crc32 of payload

_HARD_STATE = 0
_ENTRIES = 1
_SNAPSHOT_INSTALL = 2  # a snapshot received from the leader: replaces the whole log
_SNAPSHOT_COMPACT = 3  # a local snapshot: entries up to its index are discarded


class DiskCorrupted(AssertionError):
    """Recovery found damage inside the durable (fsynced) prefix: the disk model is broken."""


@dataclass(slots=True)
class GroupImage:
    """What one group's records say after replay: the state a restart starts from."""

    hard_state: HardState = field(default_factory=HardState)
    snapshot: Snapshot | None = None
    entries: list[Entry] = field(default_factory=list)

    def first_index(self) -> int:
        """Index of the first entry (snapshot index + 1)."""
        return (self.snapshot.metadata.index if self.snapshot else 0) + 1

    def last_index(self) -> int:
        """Index of the last entry (the snapshot index when there are none)."""
        return self.first_index() - 1 + len(self.entries)


@dataclass(slots=True)
class CrashReport:
    """What a crash did to the disk."""

    unsynced_bytes: int
    kept_bytes: int
    torn: bool


def _encode_conf(conf: ConfState) -> list[object]:
    return [
        sorted(conf.voters),
        sorted(conf.learners),
        sorted(conf.voters_outgoing),
        sorted(conf.learners_next),
        conf.auto_leave,
    ]


def _decode_conf(raw: list[object]) -> ConfState:
    voters, learners, outgoing, learners_next, auto_leave = raw
    assert isinstance(voters, list)
    assert isinstance(learners, list)
    assert isinstance(outgoing, list)
    assert isinstance(learners_next, list)
    assert isinstance(auto_leave, bool)
    return ConfState(
        frozenset(voters),
        frozenset(learners),
        frozenset(outgoing),
        frozenset(learners_next),
        auto_leave,
    )


def _encode_snapshot(kind: int, group: int, snapshot: Snapshot) -> list[object]:
    meta = snapshot.metadata
    return [kind, group, meta.index, meta.term, _encode_conf(meta.conf_state), snapshot.data]


def _decode_snapshot(raw: list[object]) -> Snapshot:
    index, term, conf, data = raw[2], raw[3], raw[4], raw[5]
    assert isinstance(index, int)
    assert isinstance(term, int)
    assert isinstance(data, bytes)
    assert isinstance(conf, list)
    return Snapshot(SnapshotMetadata(index, term, _decode_conf(conf)), data)


class SimDisk:
    """One node's durable storage; see the module docstring for the fault model."""

    def __init__(self) -> None:
        self._data = bytearray()
        self._synced = 0
        self.fsyncs = 0

    # -- writing ---------------------------------------------------------------

    def _append(self, record: list[object]) -> None:
        payload = msgpack.packb(record, use_bin_type=True)
        self._data += _FRAME.pack(len(payload), zlib.crc32(payload))
        self._data += payload

    def write_hard_state(self, group: int, hard_state: HardState) -> None:
        """Append a hard state record for ``group``."""
        self._append([_HARD_STATE, group, hard_state.term, hard_state.vote, hard_state.commit])

    def write_entries(self, group: int, entries: Sequence[Entry]) -> None:
        """Append entries; on replay they replace any at the same or higher index."""
        if entries:
            packed = [[e.term, e.index, int(e.type), e.data] for e in entries]
            self._append([_ENTRIES, group, packed])

    def write_snapshot(self, group: int, snapshot: Snapshot) -> None:
        """Append a snapshot received from the leader (it replaces the whole log)."""
        self._append(_encode_snapshot(_SNAPSHOT_INSTALL, group, snapshot))

    def write_compaction(self, group: int, snapshot: Snapshot) -> None:
        """Append a local snapshot; entries up to its index are discarded on replay."""
        self._append(_encode_snapshot(_SNAPSHOT_COMPACT, group, snapshot))

    def fsync(self) -> None:
        """Make every byte written so far durable."""
        self._synced = len(self._data)
        self.fsyncs += 1

    @property
    def unsynced_bytes(self) -> int:
        """Bytes a crash right now could lose."""
        return len(self._data) - self._synced

    @property
    def size_bytes(self) -> int:
        """Bytes in the file (durable or not)."""
        return len(self._data)

    # -- faults and recovery -----------------------------------------------------

    def crash(
        self, rng: random.Random, keep_rate: float = 0.5, garbage_rate: float = 0.3
    ) -> CrashReport:
        """Lose what was not fsynced, except perhaps a random prefix of it (maybe torn).

        With probability ``keep_rate`` a random prefix of the unsynced bytes
        survives (the OS flushed some pages); it may end inside a record, and
        with probability ``garbage_rate`` the cut-off point is followed by
        random bytes instead of nothing.
        """
        unsynced = self.unsynced_bytes
        kept = 0
        if unsynced and rng.random() < keep_rate:
            kept = rng.randint(0, unsynced)
        end = self._synced + kept
        torn = False
        del self._data[end:]
        if unsynced > kept and rng.random() < garbage_rate:
            garbage = min(unsynced - kept, rng.randint(1, 16))
            self._data += bytes(rng.getrandbits(8) for _ in range(garbage))
            torn = True
        valid = self._valid_prefix()
        torn = torn or valid < len(self._data)
        return CrashReport(unsynced, kept, torn)

    def _valid_prefix(self) -> int:
        """Length of the longest prefix made of complete records with good checksums."""
        data = self._data
        offset = 0
        while offset + _FRAME.size <= len(data):
            length, crc = _FRAME.unpack_from(data, offset)
            end = offset + _FRAME.size + length
            if end > len(data) or zlib.crc32(data[offset + _FRAME.size : end]) != crc:
                break
            offset = end
        return offset

    def recover(self) -> dict[int, GroupImage]:
        """Cut a torn tail, then replay the records into one image per group.

        Raises ``DiskCorrupted`` if the cut would reach into fsynced bytes.
        """
        valid = self._valid_prefix()
        if valid < self._synced:
            raise DiskCorrupted(
                f"durable bytes damaged: valid prefix {valid} < synced {self._synced}"
            )
        del self._data[valid:]
        self._synced = valid
        images: dict[int, GroupImage] = {}
        offset = 0
        while offset < valid:
            (length, _crc) = _FRAME.unpack_from(self._data, offset)
            start = offset + _FRAME.size
            record = msgpack.unpackb(bytes(self._data[start : start + length]), raw=False)
            offset = start + length
            group = record[1]
            image = images.get(group)
            if image is None:
                image = images[group] = GroupImage()
            _replay(image, record)
        return images


def _replay(image: GroupImage, record: list[object]) -> None:
    kind = record[0]
    if kind == _HARD_STATE:
        term, vote, commit = record[2], record[3], record[4]
        assert isinstance(term, int)
        assert isinstance(vote, int)
        assert isinstance(commit, int)
        image.hard_state = HardState(term, vote, commit)
    elif kind == _ENTRIES:
        raw = record[2]
        assert isinstance(raw, list)
        entries = [Entry(t, i, EntryType(k), d) for t, i, k, d in raw]
        first = image.first_index()
        entries = [e for e in entries if e.index >= first]
        if entries:
            start = entries[0].index
            if start > image.last_index() + 1:
                raise DiskCorrupted(f"entries at {start} leave a gap after {image.last_index()}")
            del image.entries[start - first :]
            image.entries.extend(entries)
    elif kind == _SNAPSHOT_INSTALL:
        image.snapshot = _decode_snapshot(record)
        image.entries = []
    elif kind == _SNAPSHOT_COMPACT:
        snapshot = _decode_snapshot(record)
        first = image.first_index()
        keep_from = snapshot.metadata.index + 1
        image.entries = image.entries[max(0, keep_from - first) :]
        image.snapshot = snapshot
    else:
        raise DiskCorrupted(f"unknown record kind {kind!r}")
