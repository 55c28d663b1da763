"""The shared WAL against real files: recovery, torn tails, groups, overwrite, compaction, GC."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from raft.errors import LogCompacted, LogUnavailable, StorageFailed
from raft.types import (
    ConfState,
    Entry,
    EntryType,
    HardState,
    Snapshot,
    SnapshotMetadata,
)
from raft.wal import format as fmt
from raft.wal.logstore import LogStore

SEGMENT_BYTES = 64 << 10


def entries(term: int, lo: int, hi: int, size: int = 100, tag: bytes = b"") -> list[Entry]:
    """Entries [lo, hi) of ``term`` whose data names them."""
    return [
        Entry(term=term, index=i, data=(tag + f"{term}:{i}:".encode()).ljust(size, b"x"))
        for i in range(lo, hi)
    ]


def open_store(path: Path, **kwargs: int) -> LogStore:
    kwargs.setdefault("segment_bytes", SEGMENT_BYTES)
    return LogStore.open(path, **kwargs)


def all_entries(store: LogStore, group_id: int) -> list[Entry]:
    log = store.group(group_id)
    return log.entries(log.first_index(), log.last_index() + 1)


def test_roundtrip_after_reopen(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    written = entries(1, 1, 51)
    written[3] = Entry(term=1, index=4, type=EntryType.CONF_CHANGE, data=b"cc")
    store.append(7, written)
    store.set_hard_state(7, HardState(term=1, vote=2, commit=40))
    store.set_conf_state(7, 4, ConfState(voters=frozenset({1, 2, 3})))
    store.commit()
    assert all_entries(store, 7) == written
    store.close()

    again = open_store(tmp_path)
    log = again.group(7)
    assert log.first_index() == 1
    assert log.last_index() == 50
    assert log.entries(1, 51) == written
    assert log.term(4) == 1
    assert log.term(0) == 0
    hard, conf = log.initial_state()
    assert hard == HardState(term=1, vote=2, commit=40)
    assert conf == ConfState(voters=frozenset({1, 2, 3}))
    assert log.snapshot().is_empty()
    with pytest.raises(LogUnavailable):
        log.entries(1, 52)
    again.close()


def test_entries_honours_max_bytes(tmp_path: Path) -> None:
    store = open_store(tmp_path, cache_bytes_per_group=1000)
    store.append(1, entries(1, 1, 21, size=100))
    store.commit()
    log = store.group(1)
    # From disk (beyond the cache) and from the cache: the limit and "at least one" hold.
    assert [e.index for e in log.entries(1, 21, max_bytes=250)] == [1, 2]
    assert [e.index for e in log.entries(18, 21, max_bytes=150)] == [18]
    assert [e.index for e in log.entries(5, 6, max_bytes=1)] == [5]
    assert log.entries(1, 21) == entries(1, 1, 21, size=100)
    store.close()


def test_the_node_wide_cache_budget_evicts_the_oldest_runs(tmp_path: Path) -> None:
    """Past ``cache_bytes_total`` the oldest appended runs leave the cache, whatever
    their group; evicted entries are read from disk, unchanged."""
    store = open_store(tmp_path, cache_bytes_per_group=500, cache_bytes_total=2_500)
    store.append(1, entries(1, 1, 11, tag=b"1"))  # run A; the group keeps 6..10
    store.append(1, entries(1, 11, 21, tag=b"1"))  # run B; the group keeps 16..20
    store.append(2, entries(1, 1, 11, tag=b"2"))  # run C: 3,000 B queued, A goes
    # A's entries had left the group's own budget already: nothing to drop.
    assert store._groups[1].cache_from == 16
    # A run crossing into a new segment (the slow path) is queued too: B and C go,
    # the newest run stays even above the budget.
    store.append(3, entries(1, 1, 3, size=31_000, tag=b"3"))
    assert (store._groups[1].cache_from, store._groups[2].cache_from) == (21, 11)
    assert store._groups[1].cache_bytes == store._groups[2].cache_bytes == 0
    store.append(2, entries(1, 11, 13, tag=b"2"))  # its group's budget had emptied run D
    assert [store._groups[g].cache_from for g in (1, 2, 3)] == [21, 11, 3]
    assert store._groups[2].cache_bytes == 200
    store.commit()
    assert all_entries(store, 1) == entries(1, 1, 21, tag=b"1")
    assert all_entries(store, 2) == entries(1, 1, 13, tag=b"2")
    assert all_entries(store, 3) == entries(1, 1, 3, size=31_000, tag=b"3")
    store.close()


def _write_history(path: Path) -> tuple[list[Entry], int]:
    """Two groups interleaved; return group 1's entries and where its last record starts."""
    store = open_store(path)
    for term in (1, 2):
        store.append(1, entries(term, 1 + (term - 1) * 10, 1 + term * 10))
        store.append(2, entries(term, 1 + (term - 1) * 5, 1 + term * 5, tag=b"g2"))
        store.set_hard_state(1, HardState(term=term, vote=1, commit=term * 5))
        store.commit()
    last = Entry(term=2, index=21, data=b"the last record")
    store.append(1, [last])
    location = store.locate(1, 21)
    store.commit()
    store.close()
    return entries(1, 1, 11) + entries(2, 11, 21) + [last], location.offset - 32


def _segment_file(path: Path) -> Path:
    (segment,) = sorted(p for p in (path / "wal").iterdir() if not p.name.startswith("spare-"))
    return segment


@pytest.mark.parametrize("mode", ["truncate", "corrupt"])
def test_torn_tail_loses_only_the_last_record(tmp_path: Path, mode: str) -> None:
    rng = random.Random(20261122)
    template = tmp_path / "template"
    history, last_offset = _write_history(template)
    record_bytes = 32 + len(b"the last record")
    positions = sorted(set(rng.sample(range(record_bytes), 24)) | {0, 4, 8, record_bytes - 1})
    for position in positions:
        case = tmp_path / f"{mode}-{position}"
        shutil.copytree(template, case)
        segment = _segment_file(case)
        blob = bytearray(segment.read_bytes())
        if mode == "truncate":
            blob = blob[: last_offset + position]
        else:
            blob[last_offset + position] ^= 0x5A
        segment.write_bytes(bytes(blob))

        store = open_store(case)
        assert all_entries(store, 1) == history[:-1], f"{mode} at byte {position}"
        assert all_entries(store, 2) == entries(1, 1, 6, tag=b"g2") + entries(2, 6, 11, tag=b"g2")
        assert store.group(1).initial_state()[0] == HardState(term=2, vote=1, commit=10)
        # The store goes on: new records after the cut survive the next reopen.
        store.append(1, [Entry(term=3, index=21, data=b"after the cut")])
        store.commit()
        store.close()
        reopened = open_store(case)
        assert all_entries(reopened, 1)[-1] == Entry(term=3, index=21, data=b"after the cut")
        assert all_entries(reopened, 1)[:-1] == history[:-1]
        reopened.close()


def test_intact_tail_survives_reopen(tmp_path: Path) -> None:
    history, _ = _write_history(tmp_path)
    store = open_store(tmp_path)
    assert all_entries(store, 1) == history
    store.close()


def test_corruption_in_a_sealed_segment_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=8192)
    store.append(1, entries(1, 1, 200))
    store.commit()
    store.close()
    segments = sorted(p for p in (tmp_path / "wal").iterdir() if not p.name.startswith("spare-"))
    assert len(segments) > 2
    blob = bytearray(segments[0].read_bytes())
    blob[200] ^= 0xFF
    segments[0].write_bytes(bytes(blob))
    with pytest.raises(StorageFailed, match="corrupt"):
        open_store(tmp_path, segment_bytes=8192)


@pytest.mark.parametrize(
    "where",
    ["a record's payload", "a record header's kind", "the segment header's sequence"],
)
def test_damage_anywhere_in_a_sealed_segment_names_segment_and_offset(
    tmp_path: Path, where: str
) -> None:
    """Whatever byte of a sealed segment is damaged, the refusal says the same thing an
    operator (and storage_node/data_loss.py's log line) can act on: segment and offset."""
    store = open_store(tmp_path, segment_bytes=8192)
    store.append(1, entries(1, 1, 200))
    store.commit()
    store.close()
    segments = sorted(p for p in (tmp_path / "wal").iterdir() if not p.name.startswith("spare-"))
    first_record = fmt.SEGMENT_HEADER_BYTES
    position = {
        "a record's payload": first_record + fmt.RECORD_HEADER_BYTES + 3,
        "a record header's kind": first_record + 8,  # <IIB: crc, payload_len, kind
        "the segment header's sequence": 12,
    }[where]
    blob = bytearray(segments[0].read_bytes())
    blob[position] ^= 0xFF
    segments[0].write_bytes(bytes(blob))
    named = rf"WAL segment {segments[0].name} is corrupt at offset"
    with pytest.raises(StorageFailed, match=named):
        open_store(tmp_path, segment_bytes=8192)


def test_conflicting_append_replaces_the_suffix(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append(3, entries(1, 1, 11))
    store.commit()
    store.append(3, entries(2, 6, 9))  # a new leader overwrites 6..10 with 6..8
    store.commit()
    expected = entries(1, 1, 6) + entries(2, 6, 9)
    assert all_entries(store, 3) == expected
    assert store.group(3).last_index() == 8
    with pytest.raises(ValueError, match="outside"):
        store.append(3, entries(2, 10, 11))  # a gap
    store.close()
    again = open_store(tmp_path)
    assert all_entries(again, 3) == expected
    again.close()


def test_many_groups_interleaved_across_segments(tmp_path: Path) -> None:
    rng = random.Random(7)
    store = open_store(tmp_path, segment_bytes=16384)
    expected: dict[int, list[Entry]] = {g: [] for g in range(1, 17)}
    for _round in range(60):
        for g in rng.sample(sorted(expected), 5):
            nxt = len(expected[g]) + 1
            batch = entries(
                1, nxt, nxt + rng.randint(1, 4), size=rng.randint(1, 200), tag=b"%d" % g
            )
            store.append(g, batch)
            expected[g].extend(batch)
            store.set_hard_state(g, HardState(term=1, vote=g, commit=nxt))
        store.commit()
    assert len(store.segment_seqs()) > 3
    store.close()
    again = open_store(tmp_path, segment_bytes=16384)
    for g, written in expected.items():
        assert all_entries(again, g) == written
        assert again.group(g).initial_state()[0].vote == g
    again.close()


def test_snapshot_compaction_and_segment_gc(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=4096, spare_segments_max=1)
    store.append(2, entries(1, 1, 3))
    store.append(1, entries(1, 1, 101))
    store.commit()
    segments_before = store.segment_seqs()
    assert len(segments_before) > 2
    conf = ConfState(voters=frozenset({1, 2, 3}))
    store.save_local_snapshot(
        1, Snapshot(SnapshotMetadata(index=90, term=1, conf_state=conf), b"S")
    )
    store.compact(1, 90)
    store.commit()
    # Group 2's two entries sit in the first segment: nothing can be collected yet.
    assert store.segment_seqs()[0] == segments_before[0]
    store.save_local_snapshot(2, Snapshot(SnapshotMetadata(index=2, term=1, conf_state=conf), b"T"))
    store.compact(2, 2)
    store.commit()
    segments_after = store.segment_seqs()
    assert segments_after[0] > segments_before[0]
    log = store.group(1)
    assert log.first_index() == 91
    assert log.term(90) == 1
    with pytest.raises(LogCompacted):
        log.entries(90, 92)
    assert log.entries(91, 101) == entries(1, 91, 101)
    assert log.snapshot().data == b"S"
    with pytest.raises(ValueError, match="beyond the snapshot"):
        store.compact(1, 95)
    store.close()

    again = open_store(tmp_path, segment_bytes=4096, spare_segments_max=1)
    log = again.group(1)
    assert log.first_index() == 91
    assert log.entries(91, 101) == entries(1, 91, 101)
    assert log.snapshot() == Snapshot(SnapshotMetadata(index=90, term=1, conf_state=conf), b"S")
    assert log.initial_state()[1] == conf
    assert again.group(2).last_index() == 2
    assert again.group(2).entries(3, 3) == []
    # Recycled segments are reused: the spare count stays bounded.
    spares = [p for p in (tmp_path / "wal").iterdir() if p.name.startswith("spare-")]
    assert len(spares) <= 1
    again.close()


def test_installed_snapshot_replaces_the_log(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append(5, entries(1, 1, 11))
    store.commit()
    conf = ConfState(voters=frozenset({1, 2}))
    snap = Snapshot(SnapshotMetadata(index=40, term=3, conf_state=conf), b"image")
    store.install_snapshot(5, snap)
    store.append(5, entries(3, 41, 43))
    store.commit()
    store.close()
    again = open_store(tmp_path)
    log = again.group(5)
    assert log.first_index() == 41
    assert log.term(40) == 3
    assert log.entries(41, 43) == entries(3, 41, 43)
    assert log.snapshot() == snap
    assert log.initial_state()[1] == conf
    assert [p.suffix for p in (tmp_path / "snap").iterdir()] == [".pack"]  # a pack of one
    again.close()


def test_locate_points_at_the_entry_bytes(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.append(9, [Entry(term=1, index=1, data=b"header|message-body|tail")])
    store.commit()
    location = store.locate(9, 1)
    assert store.read_at(location, 7, 12) == b"message-body"
    segment = store._segments[location.segment_seq].path
    raw = segment.read_bytes()
    assert raw[location.offset : location.offset + location.length] == b"header|message-body|tail"
    store.close()


def test_record_framing_detects_every_flipped_byte() -> None:
    salt = fmt.salt_of(3)
    chunks: list[bytes] = []
    fmt.encode_record(chunks, salt, fmt.RecordKind.ENTRY, 12, 4, 99, b"payload", 1)
    out = b"".join(chunks)
    header = fmt.decode_record_header(out, 0)
    assert header is not None
    assert (header.group_id, header.term, header.index, header.entry_type) == (12, 4, 99, 1)
    assert fmt.record_intact(out, 0, header, salt)
    assert not fmt.record_intact(out, 0, header, fmt.salt_of(4))  # a recycled segment's record
    for i in range(len(out)):
        damaged = bytearray(out)
        damaged[i] ^= 0x01
        try:
            h = fmt.decode_record_header(damaged, 0)
        except fmt.FormatError:
            continue
        assert h is None or not fmt.record_intact(damaged, 0, h, salt)


def test_a_dropped_group_keeps_only_its_term_and_vote(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=4096, spare_segments_max=1)
    store.append(1, entries(3, 1, 101))
    store.append(2, entries(1, 1, 3))
    store.set_hard_state(1, HardState(term=3, vote=2, commit=100))
    conf = ConfState(voters=frozenset({1, 2, 3}))
    store.set_conf_state(1, 0, conf)
    store.save_local_snapshot(
        1, Snapshot(SnapshotMetadata(index=50, term=3, conf_state=conf), b"S")
    )
    store.commit()
    segments_before = store.segment_seqs()
    snapshot_files = list((tmp_path / "snap").iterdir())
    assert snapshot_files
    store.drop_group(1)
    store.drop_group(9)  # never hosted: nothing to do
    store.commit()
    # Group 1's entries no longer hold the older segments: they are collected.
    assert len(store.segment_seqs()) < len(segments_before)
    assert not any(p.exists() for p in snapshot_files)
    dropped = store.group(1)
    assert dropped.last_index() == 0
    assert dropped.initial_state() == (HardState(term=3, vote=2, commit=0), ConfState())
    store.close()

    # Reopened: the drop is replayed after the group's records; a new replica of the
    # group starts empty at the same term, with the same vote.
    again = open_store(tmp_path, segment_bytes=4096, spare_segments_max=1)
    log = again.group(1)
    assert log.last_index() == 0
    assert log.snapshot().is_empty()
    hard, conf_after = log.initial_state()
    assert hard == HardState(term=3, vote=2, commit=0)
    assert not conf_after.voters
    again.append(1, entries(4, 1, 3))
    again.commit()
    assert all_entries(again, 1) == entries(4, 1, 3)
    assert again.group(2).entries(1, 3) == entries(1, 1, 3)
    again.close()


def test_a_flush_of_many_chunks_and_short_writes_keep_every_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More chunks than one pwritev takes (IOV_MAX), and writes the kernel cuts short."""
    store = open_store(tmp_path, segment_bytes=1 << 20)
    real_pwritev = os.pwritev
    calls: list[int] = []

    def short_pwritev(fd: int, buffers: list[bytes], offset: int) -> int:
        calls.append(len(buffers))
        # Write only part of the first chunk: the store must finish the rest.
        return real_pwritev(fd, [bytes(buffers[0])[:7]], offset)

    written = entries(1, 1, 1201, size=40)  # 2 chunks per entry: 3 pwritev calls
    store.append(1, written)
    monkeypatch.setattr(os, "pwritev", short_pwritev)
    store.flush()
    monkeypatch.undo()
    assert calls == [1024, 1024, 352]
    store.set_hard_state(1, HardState(term=1, vote=1, commit=1200))
    store.commit()
    store.close()
    again = open_store(tmp_path, segment_bytes=1 << 20)
    assert all_entries(again, 1) == written
    again.close()


def test_the_sync_observer_hears_each_sync_with_something_to_sync(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    heard: list[int] = []
    store.sync_observer = heard.append
    store.sync()  # nothing flushed: nothing synced, nothing heard
    assert heard == []
    store.io_hook = lambda operation: None
    store.append(7, entries(1, 1, 3))
    store.commit()
    assert len(heard) == 1
    assert heard[0] > 0
    store.close()


def test_a_write_that_fails_while_sealing_a_segment_fails_the_store(tmp_path: Path) -> None:
    """ENOSPC on the write of a full segment's SEAL record: StorageFailed (which
    the driver turns into a node that stops and probes its disk), never a raw
    OSError, and the store refuses everything after it."""
    store = open_store(tmp_path, segment_bytes=8192)
    store.append(1, entries(1, 1, 3, size=40))
    store.commit()

    def full(operation: str) -> None:
        if operation == "write":
            raise OSError(28, "No space left on device (injected)")

    store.io_hook = full
    with pytest.raises(StorageFailed, match=r"while sealing a segment: .*No space left"):
        store.append(1, entries(1, 3, 400, size=40))  # more than a segment's room
    store.io_hook = None
    with pytest.raises(StorageFailed, match="failed earlier"):
        store.append(1, entries(1, 3, 4))
