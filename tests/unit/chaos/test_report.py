"""The reliability page: one row per run, failed runs named with the command replaying them."""

from __future__ import annotations

from rip5.chaos.checkers import check
from rip5.chaos.history import Delivery, History, Intent, Outcome, Send
from rip5.chaos.matrix import page
from rip5.chaos.report import matrix_row


def test_a_failed_run_is_named_with_its_findings_and_replay_command() -> None:
    sends = (Send("t", Intent.TIMER, 0, 5, Outcome.ACKED, due_ms=1_000),)
    early = check(History("timer", 0, 2_000, sends, (Delivery("t", 900, "c"),)))
    fine = check(History("queue", 0, 2_000, (), ()))
    rows = [matrix_row("clock-jump", 7, early), matrix_row("kill", 7, fine)]
    assert rows[0][-1] == "FAILED (seed 7: 1 early)"
    assert rows[1][-1] == "OK"
    text = page(rows, command="rip5 chaos matrix", duration_s=12, seed=7, started="x", load="1")
    assert "| clock-jump | timer | 1 | 0 | 0 | 0 | 0 | - | 0 | FAILED (seed 7: 1 early) |" in text
    assert (
        "`rip5 chaos run --model timer --fault clock-jump --seed 7 --duration 12 "
        "--interval 12 --hold 4`" in text
    )
    assert "written by `rip5 chaos matrix`" in text
