"""Seeded simulation runs of the partition state machine over raft (see tests/sim/partition.py).

``make test`` runs seeds 0..(RIP5_PARTITION_SEEDS, default 60)-1; a failure
names its seed and the command that replays it with its trace.
"""

from __future__ import annotations

import os

import pytest

from tests.sim.partition import run_partition_seed

SEEDS = int(os.environ.get("RIP5_PARTITION_SEEDS", "60"))
REPLAY_SEED = int(os.environ.get("RIP5_SIM_SEED", "0"))
TRACE_LINES = int(os.environ.get("RIP5_SIM_TRACE", "40"))
REPLAY_TEST = "tests/sim/test_partition_sim.py::test_partition_replay"


@pytest.mark.sim
@pytest.mark.parametrize("seed", range(SEEDS))
def test_partition_seed(seed: int) -> None:
    """Every pop/ack/FIFO/DLQ invariant holds and no acknowledged append is lost."""
    result = run_partition_seed(seed)
    if result.failure is not None:
        pytest.fail(result.report(REPLAY_TEST), pytrace=False)


@pytest.mark.sim
def test_partition_replay() -> None:
    """Rerun one seed (RIP5_SIM_SEED) and show its trace if it fails."""
    result = run_partition_seed(REPLAY_SEED)
    if result.failure is not None:
        pytest.fail(result.report(REPLAY_TEST, TRACE_LINES), pytrace=False)


@pytest.mark.sim
def test_partition_runs_are_deterministic_and_exercise_the_lifecycle() -> None:
    """A seed fixes the run; across seeds, every part of the lifecycle happens."""
    first, second = run_partition_seed(3), run_partition_seed(3)
    assert first.trace_digest == second.trace_digest
    totals: dict[str, int] = {}
    for seed in range(8):
        for key, value in run_partition_seed(seed).stats.items():
            totals[key] = totals.get(key, 0) + value
    for key in ("appends_ok", "deliveries", "redeliveries", "dead_letters", "acks_ok"):
        assert totals[key] > 0, f"no {key} in 8 seeds: {totals}"
    assert totals["snapshots_sent"] > 0, totals
    assert totals["changes_ok"] > 0, totals
    assert totals["commits"] > 0, totals
    assert totals["acks_across_commits"] > 0, totals  # a commit left a handle valid
