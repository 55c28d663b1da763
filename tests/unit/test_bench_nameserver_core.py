"""The nameserver core bench runs end to end (its figures are not asserted:
performance is read from the bench, never from a timed test)."""

from __future__ import annotations

import pytest

from rip5.bench import nameserver_core


def test_the_bench_runs_and_reports_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--groups", "8", "--nodes", "4", "--topics", "3", "--runs", "2", "--ops", "50"]
    assert nameserver_core.main(argv) == 0
    out = capsys.readouterr().out
    for figure in ("heartbeat", "leader report", "route", "snapshot", "restore", "leader plan"):
        assert figure in out


def test_the_bench_state_is_placed() -> None:
    state = nameserver_core.build(groups=6, nodes=4, topics=2)
    assert all(len(g.replicas) == 3 for g in state.raft_groups("bench"))
    assert len(state.route("topic1").queues) == 8
