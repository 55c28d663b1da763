"""Seeded simulation runs of the nameserver state machine over raft (tests/sim/nameserver.py).

``make test`` runs seeds 0..(RIP5_NAMESERVER_SEEDS, default 100)-1; a failure
names its seed and the command that replays it with its trace.
"""

from __future__ import annotations

import os

import pytest

from tests.sim.nameserver import run_nameserver_seed

SEEDS = int(os.environ.get("RIP5_NAMESERVER_SEEDS", "100"))
REPLAY_SEED = int(os.environ.get("RIP5_SIM_SEED", "0"))
TRACE_LINES = int(os.environ.get("RIP5_SIM_TRACE", "40"))
REPLAY_TEST = "tests/sim/test_nameserver_sim.py::test_nameserver_replay"


@pytest.mark.sim
@pytest.mark.parametrize("seed", range(SEEDS))
def test_nameserver_seed(seed: int) -> None:
    """Replicas agree, revisions and leases hold, no acknowledged change is lost."""
    result = run_nameserver_seed(seed)
    if result.failure is not None:
        pytest.fail(result.report(REPLAY_TEST), pytrace=False)


@pytest.mark.sim
def test_nameserver_replay() -> None:
    """Rerun one seed (RIP5_SIM_SEED) and show its trace if it fails."""
    result = run_nameserver_seed(REPLAY_SEED)
    if result.failure is not None:
        pytest.fail(result.report(REPLAY_TEST, TRACE_LINES), pytrace=False)


@pytest.mark.sim
def test_nameserver_runs_are_deterministic_and_exercise_the_commands() -> None:
    """A seed fixes the run; across seeds, changes, leases and snapshots all happen."""
    first, second = run_nameserver_seed(3), run_nameserver_seed(3)
    assert first.trace_digest == second.trace_digest
    totals: dict[str, int] = {}
    for seed in range(8):
        for key, value in run_nameserver_seed(seed).stats.items():
            totals[key] = totals.get(key, 0) + value
    for key in ("acknowledged", "changes", "lease_grants", "lease_refusals", "topics_at_end"):
        assert totals[key] > 0, f"no {key} in 8 seeds: {totals}"
    assert totals["snapshots_sent"] > 0, totals
