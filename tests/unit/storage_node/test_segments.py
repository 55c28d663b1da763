"""Sealed segments with their index are readable offline (protocol.segments)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol import segments
from protocol.records import MessageRecord, encode_batch
from raft.types import ConfState, Entry, HardState, Snapshot, SnapshotMetadata
from raft.wal.logstore import LogStore
from storage_node.partition.commands import Op
from storage_node.store import segment_files as segment_store
from storage_node.store.segment_files import (
    index_path,
    index_sealed_segments,
    index_segments,
    uncache_segments,
)


def append_entry(group: int, index: int) -> bytes:
    records = [
        MessageRecord(f"topic-{group}", 0, f"g{group}-e{index}-m{k}", b"body" * (index + k))
        for k in range(3)
    ]
    return bytes([Op.APPEND]) + encode_batch(records, 10_000 + index)


def write_log(directory: Path, entries_per_group: int = 60) -> LogStore:
    """Two groups interleaved over several small segments, committed as they go."""
    store = LogStore.open(directory, segment_bytes=8192)
    for index in range(1, entries_per_group + 1):
        for group in (1, 2):
            data = append_entry(group, index) if index % 5 else b"\x09not-an-append"
            store.append(group, [Entry(term=1, index=index, data=data)])
            store.set_hard_state(group, HardState(term=1, vote=1, commit=index))
        store.commit()
    return store


def segment_files(directory: Path) -> list[Path]:
    return sorted(p for p in (directory / "wal").glob("*.wal") if not p.name.startswith("spare"))


def test_every_sealed_segment_gets_an_index_and_reads_back_offline(tmp_path: Path) -> None:
    store = write_log(tmp_path)
    written = index_sealed_segments(store)
    live = store.segment_seqs()
    store.close()
    assert written == live[:-1]
    assert len(written) >= 3
    seen: dict[tuple[int, int], list[str]] = {}
    for seq in written:
        path = tmp_path / "wal" / f"{seq:016x}.wal"
        index = segments.decode_index(index_path(path).read_bytes())
        assert index.segment_seq == seq
        for stored in segments.read_batches(path.read_bytes(), index):
            assert stored.batch.store_timestamp_ms == 10_000 + stored.log_index
            seen[(stored.group_id, stored.log_index)] = [r.message_id for r in stored.records]
    assert seen, "no message read back"
    for (group, log_index), ids in seen.items():
        assert ids == [f"g{group}-e{log_index}-m{k}" for k in range(3)]
        assert log_index % 5  # non-APPEND entries are not messages


def test_the_index_matches_what_a_scan_finds_and_round_trips(tmp_path: Path) -> None:
    store = write_log(tmp_path)
    index_sealed_segments(store)
    store.close()
    path = segment_files(tmp_path)[0]
    data = path.read_bytes()
    built = segments.build_index(data)
    assert segments.decode_index(segments.encode_index(built)) == built
    assert segments.decode_index(index_path(path).read_bytes()) == built
    for entry in built.entries:
        assert segments.entry_data(data, entry) in (
            append_entry(entry.group_id, entry.index),
            b"\x09not-an-append",
        )
    assert set(built.commits) == {1, 2}


def test_damage_is_detected_with_its_cause(tmp_path: Path) -> None:
    store = write_log(tmp_path)
    index_sealed_segments(store)
    store.close()
    path = segment_files(tmp_path)[0]
    data = bytearray(path.read_bytes())
    index_bytes = index_path(path).read_bytes()
    index = segments.decode_index(index_bytes)
    data[index.entries[0].data_offset + 3] ^= 0x40
    with pytest.raises(segments.SegmentCorrupted, match="checksum mismatch"):
        list(segments.read_batches(bytes(data), index))
    with pytest.raises(segments.SegmentCorrupted, match="no intact record"):
        segments.build_index(bytes(data))
    broken = bytearray(index_bytes)
    broken[50] ^= 1
    with pytest.raises(segments.SegmentCorrupted, match="index checksum"):
        segments.decode_index(bytes(broken))
    other = segment_files(tmp_path)[1].read_bytes()
    with pytest.raises(segments.SegmentCorrupted, match="read with the index of"):
        segments.verify(other, index)
    with pytest.raises(segments.SegmentCorrupted, match="bad magic"):
        segments.segment_seq(b"x" * 64)


def test_a_damaged_or_emptied_sealed_file_fails_the_indexer_with_its_cause(
    tmp_path: Path,
) -> None:
    store = write_log(tmp_path)
    seqs = store.segment_seqs()
    store.close()
    first, second = segment_files(tmp_path)[:2]
    data = bytearray(first.read_bytes())
    data[200] ^= 0x40
    first.write_bytes(bytes(data))
    with pytest.raises(segments.SegmentCorrupted, match="no intact record"):
        index_segments(tmp_path / "wal", seqs)
    first.unlink()  # the indexer reads the file through a map: an empty one must not trip it
    second.write_bytes(b"")
    with pytest.raises(segments.SegmentCorrupted, match="truncated"):
        index_segments(tmp_path / "wal", seqs[1:])


def test_an_unsealed_segment_is_not_indexed(tmp_path: Path) -> None:
    store = write_log(tmp_path, entries_per_group=2)
    assert index_sealed_segments(store) == []
    current = segment_files(tmp_path)[-1].read_bytes()
    with pytest.raises(segments.SegmentCorrupted, match=r"no intact record|without a SEAL"):
        segments.build_index(current)
    store.close()


def test_indexes_of_collected_segments_are_removed(tmp_path: Path) -> None:
    store = write_log(tmp_path)
    index_sealed_segments(store)
    first = segment_files(tmp_path)[0]
    assert index_path(first).exists()
    for group in (1, 2):
        meta = SnapshotMetadata(55, 1, ConfState(voters=frozenset({1})))
        store.save_local_snapshot(group, Snapshot(meta, b"state"))
        store.compact(group, 55)
    store.commit()
    index_sealed_segments(store)
    assert not index_path(first).exists()
    assert {p.stem for p in (tmp_path / "wal").glob("*.idx")} <= {
        f"{seq:016x}" for seq in store.segment_seqs()
    }
    store.close()


def test_the_offline_reader_names_the_partition_append_code() -> None:
    assert segments.APPEND_OP == Op.APPEND


def test_sealed_segments_older_than_the_window_leave_the_page_cache_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = write_log(tmp_path)
    live = store.segment_seqs()
    store.close()
    assert len(live) >= 5
    advised: list[tuple[str, int]] = []

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        assert (offset, length) == (0, 0)  # the whole file
        advised.append((os.readlink(f"/proc/self/fd/{fd}"), advice))

    monkeypatch.setattr(segment_store, "_fadvise", record)
    uncached: set[int] = set()
    wal = tmp_path / "wal"
    # The current segment and the newest two sealed ones stay cached.
    assert uncache_segments(wal, live, 2, uncached) == live[:-3]
    assert advised == [(str(wal / f"{seq:016x}.wal"), os.POSIX_FADV_DONTNEED) for seq in live[:-3]]
    assert uncache_segments(wal, live, 2, uncached) == []  # each once
    assert uncache_segments(wal, live, 1, uncached) == [live[-3]]  # the window moved
    # A collected segment is skipped, and forgotten once it leaves the live list.
    (wal / f"{live[-2]:016x}.wal").unlink()
    assert uncache_segments(wal, live, 0, uncached) == []
    assert uncache_segments(wal, live[1:], 0, uncached) == []
    assert live[0] not in uncached


def test_segments_let_go_of_after_indexing_stay_identical_and_readable(tmp_path: Path) -> None:
    store = write_log(tmp_path)
    live = store.segment_seqs()
    store.close()
    before = {path.name: path.read_bytes() for path in segment_files(tmp_path)}
    uncached: set[int] = set()
    index_segments(tmp_path / "wal", live)
    uncache_segments(tmp_path / "wal", live, 0, uncached)  # the real advice
    assert uncached == set(live[:-1])
    for path in segment_files(tmp_path)[:-1]:
        data = path.read_bytes()
        assert data == before[path.name]
        index = segments.decode_index(index_path(path).read_bytes())
        segments.verify(data, index)
