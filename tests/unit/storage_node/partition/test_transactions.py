"""Transactions: half messages wait for commit or rollback, and for check-back."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.records import MessageRecord
from protocol.vocabulary import MessageType, Placement
from storage_node.errors import BadCommand, NotFound
from storage_node.partition.commands import EndTransaction, NoteTransactionChecks, Tick
from storage_node.partition.results import EndTransactionResult, TransactionChecksResult

from .harness import Harness, record

T0 = 1_000_000


def half(message_id: str, **fields: Any) -> MessageRecord:
    return record(message_id, message_type=MessageType.TRANSACTION, **fields)


def test_a_half_message_is_invisible_until_committed() -> None:
    h = Harness()
    outcome = h.append(half("tx1"), record("plain")).outcomes[0]
    assert (outcome.placement, outcome.queue_offset) == (Placement.HALF, -1)
    assert h.queue_bodies() == [b"plain"]
    assert h.state.half_message("tx1") is not None
    h.advance(100)
    result = h.apply(EndTransaction(h.now_ms, "orders", "tx1", commit=True))
    assert isinstance(result, EndTransactionResult)
    assert result.committed
    assert result.outcome is not None
    assert (result.outcome.placement, result.outcome.queue_offset) == (Placement.QUEUED, 1)
    assert h.queue_bodies() == [b"plain", b"tx1"]
    assert h.state.entry("orders", 0, 1).store_timestamp_ms == T0 + 100
    assert h.state.half_message("tx1") is None
    # A retried send of the committed message reports where it went.
    again = h.append(half("tx1")).outcomes[0]
    assert (again.placement, again.queue_offset, again.duplicate) == (Placement.QUEUED, 1, True)


def test_a_rolled_back_half_message_is_never_delivered() -> None:
    h = Harness()
    h.append(half("tx1"))
    result = h.apply(EndTransaction(h.now_ms, "orders", "tx1", commit=False))
    assert result == EndTransactionResult(False)
    assert h.state.end_offset("orders", 0) == 0
    assert h.receive().deliveries == ()


def test_ending_an_unknown_or_resolved_transaction_is_not_found() -> None:
    h = Harness()
    h.append(half("tx1"))
    with pytest.raises(NotFound):
        h.apply(EndTransaction(h.now_ms, "other-topic", "tx1", commit=True))
    with pytest.raises(NotFound):
        h.apply(EndTransaction(h.now_ms, "orders", "nope", commit=True))
    h.apply(EndTransaction(h.now_ms, "orders", "tx1", commit=True))
    with pytest.raises(NotFound):
        h.apply(EndTransaction(h.now_ms, "orders", "tx1", commit=True))
    assert h.state.end_offset("orders", 0) == 1


def test_a_committed_half_message_with_a_delivery_time_waits_for_it() -> None:
    h = Harness()
    h.append(half("tx1", delivery_timestamp_ms=T0 + 1000))
    result = h.apply(EndTransaction(h.now_ms, "orders", "tx1", commit=True))
    assert isinstance(result, EndTransactionResult)
    assert result.outcome is not None
    assert result.outcome.placement is Placement.DELAYED
    assert h.state.end_offset("orders", 0) == 0
    h.advance(1000)
    h.apply(Tick(h.now_ms))
    assert h.queue_bodies() == [b"tx1"]


def test_check_back_scan_finds_old_unchecked_half_messages() -> None:
    h = Harness()
    h.append(half("old"))
    h.advance(6000)
    h.append(half("young"))
    due = h.state.half_messages_due(stored_before_ms=h.now_ms - 5000, checked_before_ms=0)
    assert [m.transaction_id for m in due] == ["old"]
    h.apply(NoteTransactionChecks(h.now_ms, ("old",), check_max=2))
    # Checked just now: not due again until the check interval has passed.
    due = h.state.half_messages_due(h.now_ms + 1, checked_before_ms=h.now_ms - 1000)
    assert [m.transaction_id for m in due] == ["young"]
    h.advance(2000)
    due = h.state.half_messages_due(h.now_ms + 1, checked_before_ms=h.now_ms - 1000)
    assert [(m.transaction_id, m.check_count) for m in due] == [("old", 1), ("young", 0)]
    assert due[0].last_check_ms == T0 + 6000
    first = h.state.half_messages_due(h.now_ms + 1, h.now_ms - 1000, limit=1)
    assert [m.transaction_id for m in first] == ["old"]


def test_a_transaction_checked_too_often_is_discarded() -> None:
    h = Harness()
    h.append(half("tx1"), half("tx2"))
    for _ in range(2):
        result = h.apply(NoteTransactionChecks(h.now_ms, ("tx1",), check_max=2))
        assert result == TransactionChecksResult(("tx1",), (), ())
    result = h.apply(NoteTransactionChecks(h.now_ms, ("tx1", "tx2", "zz"), check_max=2))
    assert result == TransactionChecksResult(("tx2",), ("tx1",), ("zz",))
    assert h.state.half_message("tx1") is None
    with pytest.raises(NotFound):
        h.apply(EndTransaction(h.now_ms, "orders", "tx1", commit=True))
    with pytest.raises(BadCommand):
        h.apply(NoteTransactionChecks(h.now_ms, ("tx2",), check_max=0))


def test_half_messages_survive_a_snapshot() -> None:
    h = Harness()
    h.append(half("tx1", tag="t", message_group="g1"))
    h.apply(NoteTransactionChecks(h.now_ms, ("tx1",), check_max=5))
    before = h.state.half_message("tx1")
    h.restart_from_snapshot()
    assert h.state.half_message("tx1") == before
    h.apply(EndTransaction(h.now_ms, "orders", "tx1", commit=True))
    entry = h.state.entry("orders", 0, 0)
    assert (entry.tag, entry.message_group) == ("t", "g1")
