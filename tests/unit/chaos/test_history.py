"""A chaos history survives its JSON lines; bad lines are named."""

from __future__ import annotations

import pytest

from rip5.chaos.history import (
    Delivery,
    FaultWindow,
    History,
    Intent,
    Outcome,
    Send,
    from_lines,
    to_lines,
)
from rip5.chaos.workload import outcome_of_code


def test_a_history_reads_back_as_written() -> None:
    history = History(
        "txn",
        10,
        20,
        (
            Send("a", Intent.COMMIT, 11, 12, Outcome.ACKED, 2, ended=Outcome.UNKNOWN),
            Send("b", Intent.FIFO, 11, 13, Outcome.UNKNOWN, 1, "g", 4, error="UNAVAILABLE"),
            Send("c", Intent.TIMER, 11, 13, Outcome.ACKED, due_ms=5000),
        ),
        (Delivery("a", 15, "consumer-0", acked=False),),
        (FaultWindow("kill", "storage-1", 12, 14, "SIGKILL"),),
        ("receive UNAVAILABLE: 3",),
    )
    assert from_lines(list(to_lines(history))) == history


def test_a_bad_line_is_named() -> None:
    lines = list(to_lines(History("queue", 0, 1)))
    with pytest.raises(ValueError, match="line 2"):
        from_lines([*lines, '{"kind": "send", "message_id": "x"}'])
    with pytest.raises(ValueError, match="no header"):
        from_lines([])


def test_send_outcomes_from_v2_status_codes() -> None:
    assert outcome_of_code(20000) is Outcome.ACKED
    assert outcome_of_code(40402) is Outcome.FAILED  # TOPIC_NOT_FOUND: nothing stored
    assert outcome_of_code(40800) is Outcome.UNKNOWN  # REQUEST_TIMEOUT: maybe stored
    assert outcome_of_code(50001) is Outcome.UNKNOWN
