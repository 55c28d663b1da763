"""Each checker accepts correct histories and reports deliberately broken ones."""

from __future__ import annotations

import pytest

from raft.types import Entry
from tests.sim.checkers import COMPACTED, GroupInvariants, InvariantViolation
from tests.sim.history import History, Operation, OpKind
from tests.sim.linearizability import check_queue, check_register


def _log(*terms: int) -> dict[int, int]:
    return dict(enumerate(terms, start=1))


def _term_at(log: dict[int, int]):  # type: ignore[no-untyped-def]
    return lambda i: 0 if i == 0 else log.get(i)


def _e(index: int, term: int, data: bytes = b"") -> Entry:
    return Entry(term, index, data=data or f"{index}@{term}".encode())


# -- election safety -------------------------------------------------------------


def test_two_leaders_in_one_term_are_caught() -> None:
    inv = GroupInvariants(1)
    inv.became_leader(1, 3, _term_at({}))
    inv.became_leader(1, 3, _term_at({}))  # the same leader again is fine
    inv.became_leader(2, 4, _term_at({}))
    with pytest.raises(InvariantViolation, match="election safety"):
        inv.became_leader(3, 4, _term_at({}))


# -- log matching ----------------------------------------------------------------


def test_log_matching_accepts_agreeing_replicas() -> None:
    inv = GroupInvariants(1)
    inv.entries_written(1, [_e(1, 1), _e(2, 1)], 0, [])
    inv.entries_written(2, [_e(1, 1)], 0, [])
    inv.entries_written(2, [_e(2, 1)], 1, [])
    inv.entries_written(3, [_e(1, 1), _e(2, 2)], 0, [])  # different term at 2: a different entry


def test_same_index_and_term_with_other_data_is_caught() -> None:
    inv = GroupInvariants(1)
    inv.entries_written(1, [_e(1, 1, b"a")], 0, [])
    with pytest.raises(InvariantViolation, match="log matching"):
        inv.entries_written(2, [_e(1, 1, b"b")], 0, [])


def test_same_entry_after_a_different_prefix_is_caught() -> None:
    inv = GroupInvariants(1)
    inv.entries_written(1, [_e(1, 1), _e(2, 2, b"x")], 0, [])
    with pytest.raises(InvariantViolation, match="log matching"):
        # node 2 has term 1 at index 1?? no: it claims (2, 2) follows a term-3 entry
        inv.entries_written(2, [_e(2, 2, b"x")], 3, [])


def test_overwriting_a_committed_entry_is_caught() -> None:
    inv = GroupInvariants(1)
    log = _log(1, 1, 1)
    inv.entries_written(1, [_e(1, 1), _e(2, 1), _e(3, 1)], 0, [])
    inv.commit_advanced(1, 2, _term_at(log), 1)
    inv.entries_written(2, [_e(3, 2)], 1, [_e(3, 1)])  # index 3 was not committed: fine
    with pytest.raises(InvariantViolation, match="overwrote committed entry 2"):
        inv.entries_written(2, [_e(2, 2)], 1, [_e(2, 1)])


# -- leader completeness -----------------------------------------------------------


def test_leader_without_a_committed_entry_is_caught() -> None:
    inv = GroupInvariants(1)
    inv.entries_written(1, [_e(1, 1), _e(2, 1)], 0, [])
    inv.commit_advanced(1, 2, _term_at(_log(1, 1)), 1)
    inv.became_leader(2, 2, _term_at(_log(1, 1, 2)))
    inv.became_leader(3, 3, _term_at(dict.fromkeys((1, 2), COMPACTED)))  # in its snapshot: fine
    with pytest.raises(InvariantViolation, match="leader completeness"):
        inv.became_leader(3, 4, _term_at(_log(1)))


def test_a_stale_leader_of_an_older_term_need_not_hold_newer_commits() -> None:
    inv = GroupInvariants(1)
    inv.entries_written(1, [_e(1, 1), _e(2, 5)], 0, [])
    inv.commit_advanced(1, 2, _term_at(_log(1, 5)), 5)  # index 2 committed in term 5
    inv.became_leader(2, 4, _term_at(_log(1)))  # elected in term 4, votes delivered late
    with pytest.raises(InvariantViolation, match="leader completeness"):
        inv.became_leader(3, 6, _term_at(_log(1)))


def test_committing_beyond_the_log_or_a_different_term_is_caught() -> None:
    inv = GroupInvariants(1)
    with pytest.raises(InvariantViolation, match="beyond its last entry"):
        inv.commit_advanced(1, 3, _term_at(_log(1, 1)), 1)
    inv = GroupInvariants(1)
    inv.commit_advanced(1, 2, _term_at(_log(1, 1)), 1)
    with pytest.raises(InvariantViolation, match="commits term 2 at 2"):
        inv.commit_advanced(2, 2, _term_at(_log(1, 2)), 1)


# -- state machine safety ----------------------------------------------------------


def test_applying_different_entries_at_one_index_is_caught() -> None:
    inv = GroupInvariants(1)
    inv.commit_advanced(1, 2, _term_at(_log(1, 1)), 1)
    inv.entry_applied(1, _e(1, 1, b"a"))
    inv.entry_applied(2, _e(1, 1, b"a"))
    with pytest.raises(InvariantViolation, match="state machine safety"):
        inv.entry_applied(3, _e(1, 1, b"b"))


def test_applying_out_of_order_or_uncommitted_is_caught() -> None:
    inv = GroupInvariants(1)
    inv.commit_advanced(1, 3, _term_at(_log(1, 1, 1)), 1)
    inv.entry_applied(1, _e(1, 1))
    with pytest.raises(InvariantViolation, match="applied 3 after 1"):
        inv.entry_applied(1, _e(3, 1))
    inv = GroupInvariants(1)
    inv.commit_advanced(1, 1, _term_at(_log(1, 1)), 1)
    inv.entry_applied(1, _e(1, 1))
    with pytest.raises(InvariantViolation, match="before anyone committed it"):
        inv.entry_applied(1, _e(2, 1))
    inv.restarted(1)
    inv.entry_applied(1, _e(1, 1))  # a restarted replica applies from the start again


# -- linearizability -----------------------------------------------------------------


class _H:
    """A tiny history builder with explicit times."""

    def __init__(self) -> None:
        self.h = History()

    def append(
        self, value: int, t0: int, t1: int | None, pos: int = 0, fail: bool = False
    ) -> Operation:
        op = self.h.invoke(1, 1, OpKind.APPEND, value, t0)
        if t1 is None:
            History.unknown(op)
        elif fail:
            History.fail(op, t1)
        else:
            History.append_ok(op, t1, pos)
        return op

    def read(self, t0: int, t1: int, length: int, last: int) -> Operation:
        op = self.h.invoke(2, 1, OpKind.READ, 0, t0)
        History.read_ok(op, t1, length, last)
        return op


def _good() -> _H:
    h = _H()
    h.append(10, 1, 4, pos=1)
    h.append(20, 2, 6, pos=2)  # concurrent with 10
    h.read(5, 7, 1, 10)  # may miss 20 (still in flight)
    h.append(30, 8, None)  # unknown, took effect
    h.append(40, 9, 12, fail=True)
    h.read(13, 14, 3, 30)
    return h


def test_a_linearizable_history_passes_both_checkers() -> None:
    h = _good()
    assert check_queue(h.h.ops, [10, 20, 30]) == []
    assert check_register(h.h.ops) is True


def test_lost_acknowledged_append_is_caught() -> None:
    assert any("acknowledged append lost" in v for v in check_queue(_good().h.ops, [10, 30]))


def test_failed_append_that_took_effect_is_caught() -> None:
    violations = check_queue(_good().h.ops, [10, 20, 30, 40])
    assert any("failed append took effect" in v for v in violations)


def test_duplicate_and_phantom_values_are_caught() -> None:
    violations = check_queue(_good().h.ops, [10, 20, 20, 30, 99])
    assert any("applied twice" in v for v in violations)
    assert any("never appended" in v for v in violations)


def test_real_time_order_of_appends_is_checked() -> None:
    h = _H()
    h.append(1, 1, 2, pos=2)
    h.append(2, 3, 4, pos=1)  # invoked after 1 completed, yet earlier in the queue
    assert any("real-time order" in v for v in check_queue(h.h.ops, [2, 1]))
    h.read(5, 6, 2, 1)  # the register ends with the later write, 2: this read is wrong
    assert check_register(h.h.ops) is False
    h.h.invoke(2, 1, OpKind.READ, 0, 7)  # a read still pending is left out
    assert check_register(h.h.ops[:2]) is True


def test_stale_read_is_caught_by_both_checkers() -> None:
    h = _H()
    h.append(1, 1, 2, pos=1)
    h.append(2, 3, 4, pos=2)
    h.read(5, 6, 1, 1)  # misses 2, which completed before the read began
    assert any("stale read" in v for v in check_queue(h.h.ops, [1, 2]))
    assert check_register(h.h.ops) is False


def test_read_from_the_future_is_caught() -> None:
    h = _H()
    h.append(1, 1, 2, pos=1)
    h.read(3, 4, 2, 2)  # sees 2, which was invoked after the read returned
    h.append(2, 5, 6, pos=2)
    assert any("from the future" in v for v in check_queue(h.h.ops, [1, 2]))
    assert check_register(h.h.ops) is False


def test_reads_going_backwards_are_caught() -> None:
    h = _H()
    h.append(1, 1, 20, pos=1)
    h.append(2, 2, 21, pos=2)
    h.read(3, 4, 2, 2)
    h.read(5, 6, 1, 1)  # both appends are concurrent with both reads, but reads regress
    assert any("backwards" in v for v in check_queue(h.h.ops, [1, 2]))
    # As a register (last value only) this is fine: write 2, read, write 1, read.
    # The queue model is stronger because the order of all appends is observable.
    assert check_register(h.h.ops) is True


def test_read_of_a_value_never_committed_is_caught() -> None:
    h = _H()
    h.append(1, 1, 2, pos=1)
    h.read(3, 4, 1, 7)
    assert any("never committed" in v for v in check_queue(h.h.ops, [1]))
    assert check_register(h.h.ops) is False


def test_register_search_handles_unknown_writes() -> None:
    h = _H()
    h.append(1, 1, 2, pos=1)
    h.append(2, 3, None)  # unknown: never took effect
    h.append(3, 4, None)  # unknown: took effect
    h.read(5, 6, 1, 1)
    h.read(7, 8, 3, 3)
    h.read(9, 10, 3, 3)
    assert check_register(h.h.ops) is True
    assert check_queue(h.h.ops, [1, 3]) != []  # the read of length 3 disagrees with [1, 3]
    assert check_queue([op for op in h.h.ops if op.read_length != 3], [1, 3]) == []


def test_register_search_budget() -> None:
    h = _H()
    for v in range(1, 40):  # many concurrent unknown writes: a large search space
        h.append(v, v, None)
    h.read(100, 101, 0, 999)  # unsatisfiable, so the search must exhaust
    assert check_register(h.h.ops, budget_steps=1000) is None
