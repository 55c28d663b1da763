"""MemoryLog, the in-memory LogReader used by tests and the simulation."""

from __future__ import annotations

import pytest

from raft.core.memory_log import MemoryLog
from raft.errors import LogCompacted, LogUnavailable, RaftError
from raft.types import ConfState, Entry, HardState, Snapshot, SnapshotMetadata

CONF = ConfState(frozenset({1, 2, 3}))


def filled(last: int) -> MemoryLog:
    log = MemoryLog(CONF)
    log.append([Entry(1 + i // 3, i, data=b"d%d" % i) for i in range(1, last + 1)])
    return log


def test_a_fresh_log_is_empty_with_its_membership() -> None:
    log = MemoryLog(CONF)
    assert log.initial_state() == (HardState(), CONF)
    assert (log.first_index(), log.last_index(), log.term(0)) == (1, 0, 0)
    assert MemoryLog().initial_state()[1] == ConfState()
    log.set_hard_state(HardState(3, 2, 0))
    log.set_conf_state(ConfState(frozenset({1})))
    assert log.initial_state() == (HardState(3, 2, 0), ConfState(frozenset({1})))


def test_append_replaces_the_suffix_and_refuses_gaps() -> None:
    log = filled(5)
    log.append([Entry(9, 4)])
    assert (log.last_index(), log.term(4)) == (4, 9)
    log.append([])
    with pytest.raises(RaftError):
        log.append([Entry(9, 7)])


def test_reads_respect_bounds_and_size() -> None:
    log = filled(6)
    assert [e.index for e in log.entries(2, 5)] == [2, 3, 4]
    assert [e.index for e in log.entries(2, 5, max_bytes=4)] == [2, 3]
    with pytest.raises(LogUnavailable):
        log.entries(2, 8)
    with pytest.raises(LogUnavailable):
        log.term(7)


def test_snapshot_and_compaction() -> None:
    log = filled(9)
    snap = log.create_snapshot(6, CONF, b"state")
    assert snap.metadata.term == log.term(6)
    log.compact(6)
    log.compact(3)  # already compacted: nothing to do
    assert (log.first_index(), log.term(6), log.snapshot()) == (7, snap.metadata.term, snap)
    with pytest.raises(LogCompacted):
        log.entries(6, 8)
    with pytest.raises(LogCompacted):
        log.term(5)
    with pytest.raises(RaftError):
        log.create_snapshot(5, CONF, b"")
    with pytest.raises(RaftError):
        log.compact(8)  # no snapshot covers 8
    # Appending entries the snapshot covers keeps only the new ones.
    log.append([Entry(3, 5), Entry(3, 6), Entry(3, 7)])
    assert (log.last_index(), log.term(7)) == (7, 3)
    log.append([Entry(3, 4)])
    assert log.last_index() == 7


def test_apply_snapshot_replaces_everything() -> None:
    log = filled(4)
    conf = ConfState(frozenset({1, 2}), frozenset({5}))
    log.apply_snapshot(Snapshot(SnapshotMetadata(10, 4, conf), b"img"))
    assert (log.first_index(), log.last_index(), log.term(10)) == (11, 10, 4)
    assert log.initial_state()[1] == conf
    with pytest.raises(RaftError):
        log.apply_snapshot(Snapshot(SnapshotMetadata(9, 4, conf)))
