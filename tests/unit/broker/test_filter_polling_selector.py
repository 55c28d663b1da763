"""Tag filters, the long-polling plan, and queue selection."""

from __future__ import annotations

import pytest

from broker.domain import Message
from broker.errors import BrokerError, Reason
from broker.processor.filter import FilterKind, parse_filter, parse_tag_expression
from broker.processor.polling import plan_poll_ms
from broker.processor.selector import select_queue
from protocol import errors as codes
from protocol.filters import MessageFilter
from protocol.vocabulary import MessageType


@pytest.mark.parametrize("expression", ["", "*", "  *  "])
def test_match_all(expression: str) -> None:
    tag_filter = parse_tag_expression(expression)
    assert tag_filter.matches("a")
    assert tag_filter.matches("")


def test_tag_alternatives() -> None:
    tag_filter = parse_tag_expression("a || b||c ")
    assert tag_filter.tags == frozenset({"a", "b", "c"})
    assert tag_filter.matches("b")
    assert not tag_filter.matches("d")
    assert not tag_filter.matches("")  # an untagged message matches no specific tag
    assert not tag_filter.matches("a ")
    assert tag_filter.expression() == "a||b||c"
    assert parse_tag_expression("*").expression() == "*"


def test_empty_alternatives_are_illegal() -> None:
    with pytest.raises(BrokerError) as caught:
        parse_tag_expression("||")
    assert caught.value.reason is Reason.ILLEGAL_FILTER_EXPRESSION


def test_sql_is_checked_and_kept_as_one_value() -> None:
    sql = parse_filter(FilterKind.SQL, "a > 1")
    assert sql == MessageFilter(FilterKind.SQL, "a > 1")
    assert sql.matches("", [("a", "2")], ())
    assert not sql.matches("", [("a", "1")], ())
    assert not sql.matches("x")  # a missing property is no match
    assert parse_filter(FilterKind.UNSPECIFIED, "x").matches("x")
    assert parse_filter(FilterKind.TAG, " b || a ") == MessageFilter(FilterKind.TAG, "a||b")


def test_bad_sql_is_refused_with_its_position() -> None:
    with pytest.raises(BrokerError) as caught:
        parse_filter(FilterKind.SQL, "a > 1 AND\n  b <")
    assert caught.value.reason is Reason.ILLEGAL_FILTER_EXPRESSION
    assert caught.value.code is codes.BAD_REQUEST
    assert "line 2, column 6" in caught.value.message


@pytest.mark.parametrize(
    ("requested", "remaining", "expected"),
    [
        (20_000, 23_000, 20_000),  # push consumer: poll 20 s, deadline poll + 3 s
        (3_000, 6_000, 5_000),  # clamped up to 5 s, fits
        (30_000, 33_000, 20_000),  # clamped down to 20 s
        (20_000, 8_000, 7_500),  # shrunk to end before the deadline
        (None, 11_000, 9_500),  # absent: remaining - request timeout / 2
        (None, None, 20_000),
        (1_000, None, 5_000),
    ],
)
def test_poll_plan(requested: int | None, remaining: int | None, expected: int) -> None:
    poll_ms = plan_poll_ms(requested, remaining)
    assert poll_ms == expected
    if remaining is not None:
        assert poll_ms < remaining


def test_too_little_time_left_is_illegal() -> None:
    with pytest.raises(BrokerError) as caught:
        plan_poll_ms(20_000, 4_999)
    assert caught.value.reason is Reason.ILLEGAL_POLLING_TIME


def test_fifo_groups_stick_to_one_queue() -> None:
    queues = [0, 1, 2, 3]
    chosen = {
        group: select_queue(
            Message("t", b"x", "id", MessageType.FIFO, message_group=group), queues, turn
        )
        for turn, group in enumerate(["g1", "g2", "g3", "g1"] * 5)
    }
    for group in ("g1", "g2", "g3"):
        message = Message("t", b"x", "id", MessageType.FIFO, message_group=group)
        assert {select_queue(message, queues, turn) for turn in range(10)} == {chosen[group]}


def test_named_queue_then_round_robin() -> None:
    assert select_queue(Message("t", b"x", "id", queue_id=2), [0, 1, 2], 0) == 2
    assert select_queue(Message("t", b"x", "id", queue_id=9), [0, 1, 2], 4) == 1
    assert [select_queue(Message("t", b"x", "id"), [0, 1, 2], t) for t in range(4)] == [0, 1, 2, 0]
