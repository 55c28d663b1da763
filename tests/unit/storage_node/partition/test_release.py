"""Release: grants handed back undelivered are visible at once and not counted."""

from __future__ import annotations

from protocol import errors
from storage_node.partition.commands import Release
from storage_node.partition.results import ReleaseResult

from .harness import Harness, record


def _release(h: Harness, *handles: object) -> int:
    result = h.apply(Release(h.now_ms, "g", handles))  # type: ignore[arg-type]
    assert isinstance(result, ReleaseResult)
    return result.released


def test_released_grants_come_again_at_once_with_the_same_attempt() -> None:
    h = Harness()
    h.append(record("a"), record("b"), record("c"))
    first = h.receive(invisible_ms=60_000)
    handles = [d.handle for d in first.deliveries]
    assert _release(h, *handles[1:]) == 2
    again = h.receive(invisible_ms=60_000)
    assert [d.handle.queue_offset for d in again.deliveries] == [1, 2]
    assert [d.delivery_attempt for d in again.deliveries] == [1, 1]
    # A released handle no longer acks; the one kept still does.
    outcomes = h.ack(handles[0], handles[1]).outcomes
    assert [o.error for o in outcomes] == [None, errors.INVALID_RECEIPT_HANDLE]


def test_a_stale_handle_is_skipped() -> None:
    h = Harness()
    h.append(record("a"))
    handle = h.receive().deliveries[0].handle
    h.ack(handle)
    assert _release(h, handle) == 0


def test_a_released_redelivery_is_not_dead_lettered_early() -> None:
    h = Harness()
    h.append(record("a"))
    h.receive(invisible_ms=1_000, max_attempts=2)
    h.advance(1_000)
    second = h.receive(invisible_ms=1_000, max_attempts=2)
    assert [d.delivery_attempt for d in second.deliveries] == [2]
    assert _release(h, second.deliveries[0].handle) == 1
    third = h.receive(invisible_ms=1_000, max_attempts=2)
    assert [d.delivery_attempt for d in third.deliveries] == [2]  # still its second attempt
    assert third.dead_lettered == ()
