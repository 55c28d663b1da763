"""The raft log: storage plus unstable entries, and its invariants."""

from __future__ import annotations

import pytest

from raft.core.log import RaftLog, Unstable, limit_size
from raft.core.memory_log import MemoryLog
from raft.errors import LogCompacted, LogUnavailable, RaftError
from raft.types import ConfState, Entry, Snapshot, SnapshotMetadata


def entries(first: int, last: int, term: int = 1, data: bytes = b"x") -> list[Entry]:
    return [Entry(term, i, data=data) for i in range(first, last + 1)]


def stored_log(last: int, snapshot_index: int = 0) -> tuple[RaftLog, MemoryLog]:
    storage = MemoryLog(ConfState(frozenset({1})))
    if snapshot_index:
        storage.apply_snapshot(Snapshot(SnapshotMetadata(snapshot_index, 1)))
    storage.append(entries(snapshot_index + 1, last))
    return RaftLog(storage), storage


def test_limit_size_keeps_at_least_one_entry() -> None:
    big = [Entry(1, 1, data=b"a" * 10), Entry(1, 2, data=b"b")]
    assert limit_size(big, 5) == big[:1]
    assert limit_size(big, 11) == big
    assert limit_size(big, None) == big
    assert limit_size([], 5) == []


def test_reads_span_storage_and_unstable_entries() -> None:
    log, _ = stored_log(5, snapshot_index=2)
    log.append(entries(6, 8, term=2))
    assert (log.first_index(), log.last_index(), log.last_term()) == (3, 8, 2)
    assert [e.index for e in log.entries(4)] == [4, 5, 6, 7, 8]
    assert [e.index for e in log.slice(4, 7, bytes_max=2)] == [4, 5]
    assert [e.index for e in log.slice(6, 9, bytes_max=2)] == [6, 7]
    assert log.slice(5, 5) == []
    assert log.entries(9) == []
    assert log.term(2) == 1
    with pytest.raises(LogCompacted):
        log.term(1)
    with pytest.raises(LogCompacted):
        log.slice(2, 4)
    with pytest.raises(LogUnavailable):
        log.term(9)
    assert log.term_or_zero(9) == 0


def test_find_conflict_and_conflict_by_term() -> None:
    log, _ = stored_log(3)
    log.append(entries(4, 6, term=3))
    assert log.find_conflict(entries(2, 3)) == 0
    assert log.find_conflict(entries(5, 7, term=3)) == 7
    assert log.find_conflict([Entry(2, 5)]) == 5
    # The leader's term at the probe is 2: our entries of term 3 cannot match.
    assert log.find_conflict_by_term(6, 2) == (3, 1)
    assert log.find_conflict_by_term(6, 3) == (6, 3)
    assert log.find_conflict_by_term(9, 1) == (9, 0)  # unknown index


def test_find_conflict_by_term_stops_at_the_start_and_at_compaction() -> None:
    log, _ = stored_log(2)
    log.append(entries(3, 3, term=5))
    assert log.find_conflict_by_term(3, 0) == (0, 0)
    compacted, _ = stored_log(6, snapshot_index=4)
    compacted.append(entries(7, 7, term=9))
    assert compacted.find_conflict_by_term(7, 0) == (3, 0)


def test_maybe_append_truncates_only_a_conflicting_uncommitted_suffix() -> None:
    log, _ = stored_log(3)
    log.append(entries(4, 5, term=2))
    assert log.maybe_append(5, 9, 5, []) is None  # no entry 5 of term 9
    assert log.maybe_append(3, 1, 4, [Entry(3, 4), Entry(3, 5), Entry(3, 6)]) == 6
    assert [e.term for e in log.entries(4)] == [3, 3, 3]
    assert log.committed == 4
    with pytest.raises(RaftError):
        log.maybe_append(2, 1, 4, [Entry(7, 3)])  # would rewrite committed entry 3


def test_append_and_commit_guard_their_invariants() -> None:
    log, _ = stored_log(3)
    log.commit_to(3)
    assert log.append([]) == 3
    with pytest.raises(RaftError):
        log.append([Entry(2, 3)])
    with pytest.raises(RaftError):
        log.commit_to(4)
    log.commit_to(2)  # never lowers
    assert log.committed == 3
    assert not log.maybe_commit(3, 1)
    log.append(entries(4, 4, term=2))
    assert not log.maybe_commit(4, 1)  # not of the given term
    assert log.maybe_commit(4, 2)


def test_applying_and_applied_bounds() -> None:
    log, _ = stored_log(4)
    log.commit_to(4)
    assert [e.index for e in log.next_committed_entries(None)] == [1, 2, 3, 4]
    log.accept_applying(4)
    log.accept_applying(2)  # never lowers
    assert not log.has_next_committed_entries()
    log.applied_to(4)
    with pytest.raises(RaftError):
        log.applied_to(3)
    with pytest.raises(RaftError):
        log.applied_to(5)


def test_unstable_entries_become_stable_only_with_a_matching_term() -> None:
    log, storage = stored_log(2)
    log.append(entries(3, 5, term=2))
    log.unstable.accept_in_progress()
    assert log.unstable.next_entries() == []
    log.stable_to(4, 1)  # entry 4 is of term 2: ignored
    assert log.unstable.offset == 3
    log.stable_to(1, 1)  # already stable: ignored
    assert log.unstable.offset == 3
    storage.append(entries(3, 4, term=2))
    log.stable_to(4, 2)
    assert (log.unstable.offset, len(log.unstable.entries)) == (5, 1)


def test_truncating_inside_the_unstable_entries_resends_the_new_suffix() -> None:
    unstable = Unstable(5)
    unstable.truncate_and_append(entries(5, 8))
    unstable.accept_in_progress()
    unstable.truncate_and_append(entries(7, 7, term=2))
    assert [(e.index, e.term) for e in unstable.entries] == [(5, 1), (6, 1), (7, 2)]
    assert [e.index for e in unstable.next_entries()] == [7]
    unstable.truncate_and_append(entries(3, 3, term=3))
    assert (unstable.offset, unstable.offset_in_progress) == (3, 3)


def test_unstable_snapshot_shadows_storage_until_persisted() -> None:
    log, storage = stored_log(3)
    snap = Snapshot(SnapshotMetadata(10, 4, ConfState(frozenset({1}))))
    log.restore(snap)
    assert (log.first_index(), log.last_index(), log.committed) == (11, 10, 10)
    assert log.term(10) == 4
    with pytest.raises(LogCompacted):
        log.term(9)
    assert log.snapshot() is snap
    assert not log.has_next_committed_entries()
    assert log.unstable.next_snapshot() is snap
    log.unstable.accept_in_progress()
    assert log.unstable.next_snapshot() is None
    log.stable_snapshot_to(9)  # not this snapshot
    assert log.unstable.snapshot is snap
    storage.apply_snapshot(snap)
    log.stable_snapshot_to(10)
    assert log.unstable.snapshot is None
    with pytest.raises(LogCompacted):
        log.term(8)
