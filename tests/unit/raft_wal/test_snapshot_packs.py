"""Snapshot packs of the WAL against real files: one file per batch, reference
counting, recovery of leftovers, installs, crash points and the pack format."""

from __future__ import annotations

from pathlib import Path

import crc32c
import pytest

from protocol import segments
from raft.errors import StorageFailed
from raft.types import ConfState, Entry, Snapshot, SnapshotMetadata
from raft.wal import format as fmt
from raft.wal import logstore as logstore_module
from raft.wal.logstore import LogStore

CONF = ConfState(voters=frozenset({1, 2, 3}))


def entries(term: int, lo: int, hi: int, size: int = 100) -> list[Entry]:
    """Entries [lo, hi) of ``term`` whose data names them."""
    return [
        Entry(term=term, index=i, data=f"{term}:{i}:".encode().ljust(size, b"x"))
        for i in range(lo, hi)
    ]


def snap(index: int, data: bytes, term: int = 1) -> Snapshot:
    """A snapshot at (term, index) of three voters."""
    return Snapshot(SnapshotMetadata(index=index, term=term, conf_state=CONF), data)


def packs(path: Path) -> list[str]:
    """The file names in the snapshot folder, sorted."""
    return sorted(p.name for p in (path / "snap").iterdir())


def open_store(path: Path, segment_bytes: int = 64 << 10) -> LogStore:
    return LogStore.open(path, segment_bytes=segment_bytes)


def store_with_groups(path: Path, groups: range) -> LogStore:
    store = open_store(path)
    for g in groups:
        store.append(g, entries(1, 1, 21))
    store.commit()
    return store


def compact_in_one_pack(store: LogStore, items: list[tuple[int, Snapshot]]) -> None:
    """What the driver does: one pack for every snapshot, recorded once durable."""
    pack = store.begin_snapshot_pack()
    pack.write_durably(items)
    for group_id, snapshot in items:
        assert store.note_local_snapshot(group_id, snapshot)
        store.compact(group_id, snapshot.metadata.index)
    store.end_snapshot_pack(pack)
    store.commit()


def test_a_compaction_writes_one_pack_for_all_its_groups(tmp_path: Path) -> None:
    store = store_with_groups(tmp_path, range(1, 33))
    compact_in_one_pack(store, [(g, snap(10, b"g%d" % g)) for g in range(1, 33)])
    assert packs(tmp_path) == [f"{1:016x}.pack"]
    for g in range(1, 33):
        assert store.group(g).snapshot() == snap(10, b"g%d" % g)
        assert store.group(g).first_index() == 11
    store.close()
    again = open_store(tmp_path)
    assert [again.group(g).snapshot() for g in range(1, 33)] == [
        snap(10, b"g%d" % g) for g in range(1, 33)
    ]
    again.close()


def test_a_pack_lives_until_no_group_snapshot_is_in_it(tmp_path: Path) -> None:
    store = store_with_groups(tmp_path, range(1, 4))
    compact_in_one_pack(store, [(g, snap(5, b"first")) for g in (1, 2, 3)])
    first = packs(tmp_path)
    compact_in_one_pack(store, [(g, snap(10, b"second")) for g in (1, 2)])
    assert packs(tmp_path) == sorted([*first, f"{2:016x}.pack"])  # group 3 still in pack 1
    store.close()
    # Reopened: the counts are rebuilt from the replayed groups.
    store = open_store(tmp_path)
    assert store.snapshot_packs.live_packs() == [1, 2]
    store.save_local_snapshot(3, snap(12, b"third"))
    store.flush()
    assert len(packs(tmp_path)) == 3  # pack 1 goes only once the record superseding it is synced
    store.sync()
    store.maybe_collect_garbage()
    assert packs(tmp_path) == [f"{2:016x}.pack", f"{3:016x}.pack"]
    assert store.group(3).snapshot() == snap(12, b"third")
    assert store.group(1).snapshot() == snap(10, b"second")
    store.close()


def test_unrecorded_packs_and_leftovers_are_removed_on_open(tmp_path: Path) -> None:
    """A compaction stopped between its pack and its records leaves a pack nobody needs."""
    store = store_with_groups(tmp_path, range(5, 7))
    compact_in_one_pack(store, [(5, snap(4, b"four"))])
    orphan = store.begin_snapshot_pack()
    orphan.write_durably([(5, snap(8, b"eight")), (6, snap(8, b"eight"))])  # never recorded
    (tmp_path / "snap" / f"{9:016x}.tmp").write_bytes(b"torn")
    (tmp_path / "snap" / "00000005-0000000000000001-0000000000000002.snap").write_bytes(b"v1")
    (tmp_path / "snap" / "notes.txt").write_bytes(b"not ours")
    store.commit()
    store.close()
    again = open_store(tmp_path)
    assert again.group(5).snapshot() == snap(4, b"four")
    assert again.group(6).snapshot() == Snapshot()
    assert packs(again.directory) == [f"{1:016x}.pack", "notes.txt"]
    # Ids are never reused: the next pack is newer than the removed orphan (2).
    assert again.begin_snapshot_pack().pack_id == 3
    again.close()


def test_a_pack_whose_records_fail_to_reach_the_wal_is_cleaned_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash point between the durable pack and the WAL write that names it."""
    store = store_with_groups(tmp_path, range(1, 3))
    store.save_local_snapshot(1, snap(7, b"seven"))

    def crash(fd: int, chunks: object, offset: int) -> int:
        raise OSError("simulated crash")

    monkeypatch.setattr(logstore_module, "pwrite_all", crash)
    with pytest.raises(StorageFailed):
        store.flush()
    assert len(packs(tmp_path)) == 1  # the pack was made durable first
    monkeypatch.undo()
    store.close()
    again = open_store(tmp_path)
    assert again.group(1).snapshot() == Snapshot()
    assert again.group(1).first_index() == 1
    assert packs(tmp_path) == []
    again.close()


def test_snapshots_saved_in_one_round_share_a_pack_and_read_before_it_is_written(
    tmp_path: Path,
) -> None:
    store = store_with_groups(tmp_path, range(1, 3))
    store.save_local_snapshot(1, snap(5, b"one"))
    store.install_snapshot(2, snap(40, b"two", term=3))
    store.save_local_snapshot(1, snap(6, b"one again"))  # supersedes within the same pack
    assert packs(tmp_path) == []
    assert store.group(1).snapshot() == snap(6, b"one again")  # served from memory
    store.commit()
    assert packs(tmp_path) == [f"{1:016x}.pack"]
    assert store.group(2).first_index() == 41
    store.close()
    again = open_store(tmp_path)
    assert again.group(1).snapshot() == snap(6, b"one again")
    assert again.group(2).snapshot() == snap(40, b"two", term=3)
    assert again.group(2).first_index() == 41
    again.close()


def test_the_snapshot_survives_the_segment_of_its_record(tmp_path: Path) -> None:
    """CHECKPOINT records carry the location, so old segments are collected freely."""
    store = open_store(tmp_path, segment_bytes=8192)
    store.append(1, entries(1, 1, 11))
    store.save_local_snapshot(1, snap(10, b"image"))
    store.compact(1, 10)
    store.commit()
    first_segment = store.segment_seqs()[0]
    store.append(1, entries(1, 11, 400))
    store.save_local_snapshot(1, snap(300, b"later"))
    store.compact(1, 300)
    store.commit()
    assert first_segment not in store.segment_seqs()
    store.close()
    again = open_store(tmp_path, segment_bytes=8192)
    assert again.group(1).snapshot() == snap(300, b"later")
    assert again.snapshot_packs.live_packs() == [2]
    assert packs(tmp_path) == [f"{2:016x}.pack"]
    again.close()


def test_a_dropped_group_releases_its_pack(tmp_path: Path) -> None:
    store = store_with_groups(tmp_path, range(1, 3))
    compact_in_one_pack(store, [(1, snap(5, b"a")), (2, snap(5, b"b"))])
    store.drop_group(1)
    store.commit()
    assert packs(tmp_path) == [f"{1:016x}.pack"]
    store.drop_group(2)
    store.commit()
    assert packs(tmp_path) == []
    store.close()


def test_a_failed_pack_write_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_with_groups(tmp_path, range(1, 2))
    pack = store.begin_snapshot_pack()

    def full(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("raft.wal.snapshot_packs.os.fsync", full)
    with pytest.raises(OSError, match="disk full"):
        pack.write_durably([(1, snap(5, b"x"))])
    monkeypatch.undo()
    assert packs(tmp_path) == []
    with pytest.raises(ValueError, match="in no durable pack"):
        store.note_local_snapshot(1, snap(5, b"x"))  # no durable pack holds it
    store.end_snapshot_pack(pack)
    store.commit()
    assert packs(tmp_path) == []
    # An empty pack writes no file at all.
    empty = store.begin_snapshot_pack()
    empty.write_durably([])
    store.end_snapshot_pack(empty)
    store.commit()
    assert packs(tmp_path) == []
    store.close()


def test_a_missing_or_damaged_pack_is_a_storage_failure(tmp_path: Path) -> None:
    store = store_with_groups(tmp_path, range(1, 3))
    compact_in_one_pack(store, [(1, snap(5, b"a" * 50)), (2, snap(5, b"b" * 50))])
    store.close()
    path = tmp_path / "snap" / f"{1:016x}.pack"
    blob = bytearray(path.read_bytes())
    blob[-10] ^= 0xFF  # inside group 2's data
    path.write_bytes(bytes(blob))
    damaged = open_store(tmp_path)
    assert damaged.group(1).snapshot() == snap(5, b"a" * 50)
    with pytest.raises(StorageFailed, match="unreadable"):
        damaged.group(2).snapshot()
    damaged.close()
    path.unlink()
    with pytest.raises(StorageFailed, match="missing"):
        open_store(tmp_path)


def test_a_location_naming_another_snapshot_is_refused(tmp_path: Path) -> None:
    store = store_with_groups(tmp_path, range(1, 3))
    compact_in_one_pack(store, [(1, snap(5, b"a")), (2, snap(5, b"b"))])
    g1 = store.snapshot_packs.location_of  # none pinned any more
    assert g1(1, 1, 5) is None
    loc = store._group_state(1).snapshot_location
    with pytest.raises(StorageFailed, match="holds group 1"):
        store.snapshot_packs.read(2, 1, 5, loc)
    store.close()


def test_pack_format_round_trips_and_rejects_damage() -> None:
    header = fmt.encode_pack_header(7, 3)
    assert len(header) == fmt.PACK_HEADER_BYTES
    assert fmt.decode_pack_header(header) == (7, 3)
    with pytest.raises(fmt.FormatError):
        fmt.decode_pack_header(header[:10])
    with pytest.raises(fmt.FormatError):
        fmt.decode_pack_header(b"X" + header[1:])
    head, data = fmt.encode_snapshot_entry(4, 2, 9, CONF, b"payload")
    assert fmt.decode_snapshot_entry(head + data) == (4, 2, 9, CONF, b"payload")
    for bad in (head[:5], b"X" + head[1:] + data, head + data + b"!", head + b"Payload"):
        with pytest.raises(fmt.FormatError):
            fmt.decode_snapshot_entry(bad)
    location = fmt.SnapshotLocation(3, 32, 77)
    assert fmt.decode_snapshot_marker(fmt.encode_snapshot_marker(CONF, location)) == (
        CONF,
        location,
    )
    with pytest.raises(fmt.FormatError):
        fmt.decode_snapshot_marker(fmt.encode_conf_state(CONF))  # a format-1 payload


def test_a_snapshot_record_that_seals_the_segment_keeps_its_pack(tmp_path: Path) -> None:
    """Sealing writes the round's pack (unpinning it) before the record naming it is encoded."""
    store = open_store(tmp_path, segment_bytes=4096)
    store.append(1, entries(1, 1, 11))
    room = store._room()
    # An entry that leaves 8 bytes: the SNAPSHOT record goes to the next segment.
    store.append(1, [Entry(term=1, index=11, data=b"y" * (room - fmt.RECORD_HEADER_BYTES - 8))])
    sealed = store.segment_seqs()[-1]
    store.save_local_snapshot(1, snap(11, b"image"))
    assert store.segment_seqs()[-1] == sealed + 1
    store.commit()
    assert packs(tmp_path) == [f"{1:016x}.pack"]
    store.close()
    again = open_store(tmp_path, segment_bytes=4096)
    assert again.group(1).snapshot() == snap(11, b"image")
    again.close()


def test_a_sparse_pack_is_repacked_into_the_next_compaction(tmp_path: Path) -> None:
    """A group never snapshotted again does not keep a mostly dead pack alive."""
    store = store_with_groups(tmp_path, range(1, 5))
    compact_in_one_pack(store, [(g, snap(5, b"first %d" % g)) for g in range(1, 5)])
    compact_in_one_pack(store, [(g, snap(10, b"second")) for g in (1, 2, 3)])
    assert store.snapshot_packs.live_packs() == [1, 2]  # pack 1: 1 of 4 entries live
    compact_in_one_pack(store, [(1, snap(12, b"third"))])
    # Group 4's snapshot was copied into pack 3 and recorded there: pack 1 is gone.
    assert packs(tmp_path) == [f"{2:016x}.pack", f"{3:016x}.pack"]
    assert store.group(4).snapshot() == snap(5, b"first 4")
    store.close()
    again = open_store(tmp_path)
    assert again.group(4).snapshot() == snap(5, b"first 4")
    assert again.snapshot_packs.live_packs() == [2, 3]
    again.close()


def test_a_repack_source_outlives_a_group_moving_away_meanwhile(tmp_path: Path) -> None:
    store = store_with_groups(tmp_path, range(1, 5))
    compact_in_one_pack(store, [(g, snap(5, b"first")) for g in range(1, 5)])
    compact_in_one_pack(store, [(g, snap(10, b"second")) for g in (1, 2, 3)])
    pack = store.begin_snapshot_pack()  # will carry group 4 out of pack 1
    store.save_local_snapshot(4, snap(15, b"newer"))  # meanwhile, on the loop
    store.commit()
    assert f"{1:016x}.pack" in packs(tmp_path)  # held: the pack write still reads it
    pack.write_durably([])
    store.end_snapshot_pack(pack)  # group 4 moved on: nothing recorded
    store.commit()
    assert store.group(4).snapshot() == snap(15, b"newer")
    assert f"{1:016x}.pack" not in packs(tmp_path)
    assert store.snapshot_packs.live_packs() == [2, 4]
    store.close()


def test_the_offline_segment_reader_accepts_formats_1_and_2_only() -> None:
    """Format 2 changed snapshot records only; protocol.segments reads entries of both."""

    def header(version: int) -> bytes:
        body = fmt.SEGMENT_HEADER.pack(fmt.SEGMENT_MAGIC, 7, version, 0)[:-4]
        return (body + crc32c.crc32c(body).to_bytes(4, "little")).ljust(32, b"\0")

    assert [segments.segment_seq(header(v)) for v in (1, 2)] == [7, 7]
    with pytest.raises(segments.SegmentCorrupted, match="version 3"):
        segments.segment_seq(header(3))
    assert segments.segment_seq(fmt.encode_segment_header(9)) == 9
