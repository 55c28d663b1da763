"""Seeded simulation runs of controller mode (tests/sim/controller_mode.py).

``make test`` runs seeds 0..(RIP5_CONTROLLER_SEEDS, default 12)-1 with two
replicas and a few with three; a failure names its seed and the command that
replays it with its trace.
"""

from __future__ import annotations

import os

import pytest

from tests.sim.controller_mode import run_controller_seed

SEEDS = int(os.environ.get("RIP5_CONTROLLER_SEEDS", "12"))
REPLAY_SEED = int(os.environ.get("RIP5_SIM_SEED", "0"))
TRACE_LINES = int(os.environ.get("RIP5_SIM_TRACE", "40"))
REPLAY_TEST = "tests/sim/test_controller_mode_sim.py::test_controller_replay"


@pytest.mark.sim
@pytest.mark.parametrize("seed", range(SEEDS))
def test_controller_seed(seed: int) -> None:
    """No acknowledged write lost, one master per epoch, committed prefixes agree."""
    result = run_controller_seed(seed, replicas=2 if seed % 4 else 3)
    if result.failure is not None:
        pytest.fail(result.report(REPLAY_TEST), pytrace=False)


@pytest.mark.sim
def test_controller_replay() -> None:
    """Rerun one seed (RIP5_SIM_SEED) and show its trace if it fails."""
    result = run_controller_seed(REPLAY_SEED, replicas=2 if REPLAY_SEED % 4 else 3)
    if result.failure is not None:
        pytest.fail(result.report(REPLAY_TEST, TRACE_LINES), pytrace=False)


@pytest.mark.sim
def test_controller_runs_are_deterministic_and_exercise_failover() -> None:
    """A seed fixes the run; across seeds, every fault, elections and fencing happen."""
    assert run_controller_seed(5).trace_digest == run_controller_seed(5).trace_digest
    totals: dict[str, int] = {}
    for seed in range(5):
        for key, value in run_controller_seed(seed).stats.items():
            totals[key] = totals.get(key, 0) + value
    for key in (
        "acknowledged",
        "elections",
        "set_changes",
        "fault_crash",
        "fault_pause",
        "fault_isolate",
        "fault_split",
        "fault_delay",
        "fault_controller_down",
    ):
        assert totals.get(key, 0) > 0, f"no {key} in 5 seeds: {totals}"
    assert totals.get("fenced_by_slave", 0) + totals.get("fenced_by_controller", 0) > 0, totals
