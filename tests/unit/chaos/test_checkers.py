"""The chaos checkers over hand-made histories: each finding, and what is not one."""

from __future__ import annotations

from rip5.chaos.checkers import check, percentile
from rip5.chaos.history import Delivery, FaultWindow, History, Intent, Outcome, Send


def send(
    message_id: str,
    outcome: Outcome = Outcome.ACKED,
    intent: Intent = Intent.NORMAL,
    at: int = 0,
    **extra: object,
) -> Send:
    return Send(message_id, intent, at, at + 5, outcome, **extra)  # type: ignore[arg-type]


def history(sends: list[Send], deliveries: list[Delivery], **extra: object) -> History:
    return History("queue", 0, 10_000, tuple(sends), tuple(deliveries), **extra)  # type: ignore[arg-type]


def test_every_acked_message_consumed_once_is_ok() -> None:
    verdict = check(
        history([send("a"), send("b")], [Delivery("a", 10, "c"), Delivery("b", 12, "c")])
    )
    assert verdict.ok
    assert (verdict.invoked, verdict.acked, verdict.consumed, verdict.lost) == (2, 2, 2, 0)


def test_an_acked_message_never_consumed_is_lost() -> None:
    verdict = check(history([send("a"), send("b")], [Delivery("a", 10, "c")]))
    assert not verdict.ok
    assert verdict.lost == 1
    assert verdict.samples["lost"] == ["b"]


def test_an_unknown_send_that_was_stored_is_neither_lost_nor_duplicated() -> None:
    sends = [send("a", Outcome.UNKNOWN), send("b", Outcome.FAILED)]
    verdict = check(history(sends, [Delivery("a", 10, "c")]))
    assert verdict.ok
    assert (verdict.unknown, verdict.failed, verdict.unknown_stored) == (1, 1, 1)
    assert verdict.duplicated == 0
    assert verdict.lost == 0


def test_a_second_delivery_after_a_successful_ack_is_a_duplicate() -> None:
    deliveries = [Delivery("a", 10, "c1"), Delivery("a", 20, "c2")]
    verdict = check(history([send("a")], deliveries))
    assert verdict.duplicated == 1
    assert not verdict.ok


def test_a_redelivery_after_a_failed_ack_is_at_least_once_not_a_duplicate() -> None:
    deliveries = [Delivery("a", 10, "c1", acked=False), Delivery("a", 20, "c2")]
    verdict = check(history([send("a")], deliveries))
    assert verdict.ok
    assert (verdict.duplicated, verdict.redelivered) == (0, 1)


def test_fifo_order_is_checked_per_message_group() -> None:
    sends = [
        send("a1", intent=Intent.FIFO, group="a", sequence=0),
        send("a2", intent=Intent.FIFO, group="a", sequence=1),
        send("b1", intent=Intent.FIFO, group="b", sequence=0),
        send("b2", intent=Intent.FIFO, group="b", sequence=1),
    ]
    # b before a interleaves groups (fine); a2 before a1 is wrong.
    deliveries = [Delivery(m, t, "c") for m, t in (("b1", 1), ("a2", 2), ("b2", 3), ("a1", 4))]
    verdict = check(history(sends, deliveries))
    assert verdict.out_of_order == 1
    assert verdict.samples["out_of_order"] == ["a1"]


def test_a_redelivered_fifo_message_is_not_out_of_order() -> None:
    sends = [
        send("a1", intent=Intent.FIFO, group="a", sequence=0),
        send("a2", intent=Intent.FIFO, group="a", sequence=1),
    ]
    deliveries = [
        Delivery("a1", 1, "c", acked=False),
        Delivery("a1", 2, "c"),
        Delivery("a2", 3, "c"),
    ]
    assert check(history(sends, deliveries)).out_of_order == 0


def test_transactions_committed_visible_rolled_back_never() -> None:
    sends = [
        send("c", intent=Intent.COMMIT, ended=Outcome.ACKED),
        send("r", intent=Intent.ROLLBACK, ended=Outcome.ACKED),
        send("u", intent=Intent.COMMIT, ended=Outcome.UNKNOWN),
    ]
    verdict = check(history(sends, [Delivery("c", 10, "x"), Delivery("r", 11, "x")]))
    assert verdict.committed_visible == 1
    assert verdict.rolled_back_visible == 1
    assert verdict.lost == 0  # "u" ended unknown: it need not be visible
    assert not verdict.ok
    assert check(history(sends[:1], [])).lost == 1


def test_timers_none_early_and_lateness() -> None:
    sends = [
        send("t1", intent=Intent.TIMER, due_ms=1_000),
        send("t2", intent=Intent.TIMER, due_ms=2_000),
    ]
    on_time = check(history(sends, [Delivery("t1", 1_050, "c"), Delivery("t2", 2_300, "c")]))
    assert on_time.ok
    assert on_time.early == 0
    assert on_time.lateness_p99_ms == 300
    early = check(history(sends, [Delivery("t1", 999, "c"), Delivery("t2", 2_000, "c")]))
    assert early.early == 1
    assert not early.ok


def test_a_delivery_nobody_sent_is_unexpected() -> None:
    verdict = check(history([], [Delivery("ghost", 1, "c")]))
    assert verdict.unexpected == 1
    assert not verdict.ok


def test_recovery_runs_from_the_first_failure_to_the_next_success() -> None:
    sends = [
        send("ok1", at=100),
        send("bad1", Outcome.UNKNOWN, at=1_000),  # completes at 1_005
        send("bad2", Outcome.FAILED, at=1_500),
        send("ok2", at=1_003),  # began before the failure was seen: does not count
        send("ok3", at=2_000),  # completes at 2_005
    ]
    faults = (FaultWindow("kill", "storage-1", 900, 1_200),)
    verdict = check(
        history(sends, [Delivery(s.message_id, 3_000, "c") for s in sends], faults=faults)
    )
    (recovery,) = verdict.recoveries
    assert recovery.first_error_ms == 1_000
    assert recovery.recovered_ms == 2_005
    assert recovery.recovery_ms == 1_005
    assert recovery.slowest_send_ms == 5


def test_a_fault_without_failures_recovers_in_zero() -> None:
    faults = (FaultWindow("pause", "broker-1", 0, 100),)
    slow = Send("a", Intent.NORMAL, 50, 2_050, Outcome.ACKED)
    verdict = check(history([slow], [Delivery("a", 2_060, "c")], faults=faults))
    assert verdict.recoveries[0].recovery_ms == 0
    assert verdict.recoveries[0].slowest_send_ms == 2_000


def test_percentile_of_nothing_is_zero() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 51
    assert percentile(values, 0.99) == 100
    assert percentile([], 0.99) == 0.0
    assert percentile([7.0], 0.5) == 7.0


def test_series_bins_acked_and_failed_sends_per_second() -> None:
    sends = [send("a", at=100), send("b", at=1_100), send("c", Outcome.UNKNOWN, at=1_200)]
    verdict = check(history(sends, []))
    assert [(p.acked, p.failed) for p in verdict.series[:2]] == [(1, 0), (1, 1)]
    assert len(verdict.series) == 10
