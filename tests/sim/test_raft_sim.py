"""Seeded whole-cluster simulation runs of the raft core.

``make test`` runs seeds 0..199; ``make sim SEEDS=N`` runs 0..N-1
(``RIP5_SIM_SEEDS``). A failure names its seed and the command that replays
it exactly; the replay prints the run's shape and its last events.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raft.core import leader
from raft.core.log import RaftLog
from raft.core.replica import Raft
from raft.types import Message
from tests.sim import replica as sim_replica
from tests.sim.cluster import run_seed
from tests.sim.disk import SimDisk

SEEDS = int(os.environ.get("RIP5_SIM_SEEDS", "200"))
REPLAY_SEED = int(os.environ.get("RIP5_SIM_SEED", "0"))
TRACE_LINES = int(os.environ.get("RIP5_SIM_TRACE", "40"))
REPO_ROOT = Path(__file__).resolve().parents[2]
REPLAY_TEST = "tests/sim/test_raft_sim.py::test_replay"


@pytest.mark.sim
@pytest.mark.parametrize("seed", range(SEEDS))
def test_seed(seed: int) -> None:
    """No invariant breaks, the history is linearizable, and the cluster recovers."""
    result = run_seed(seed)
    if result.failure is not None:
        pytest.fail(result.report(REPLAY_TEST), pytrace=False)
    assert result.steps > 0


@pytest.mark.sim
def test_replay() -> None:
    """Rerun one seed (RIP5_SIM_SEED, default 0) and show its trace if it fails."""
    result = run_seed(REPLAY_SEED)
    if result.failure is not None:
        pytest.fail(result.report(REPLAY_TEST, TRACE_LINES), pytrace=False)


@pytest.mark.sim
def test_a_failure_report_names_the_seed_and_how_to_replay_it() -> None:
    """The report of a failed run: seed, cause, a replay command that selects exactly
    one existing test, the run's shape, and the last events when asked."""
    result = dataclasses.replace(run_seed(2), failure="invented violation")
    lines = result.report(REPLAY_TEST, trace_lines=3).splitlines()
    assert lines[0] == "seed 2 failed: invented violation"
    assert lines[1] == f"replay: RIP5_SIM_SEED=2 .venv/bin/python -m pytest {REPLAY_TEST}"
    assert lines[2].startswith("run shape: RunOptions(seed=2")
    assert lines[4] == "last 3 events (sim ms, event, ...):"
    assert lines[5:] == result.recent_trace[-3:]
    assert len(lines[5:]) == 3
    path, _, test_name = REPLAY_TEST.partition("::")
    assert Path(REPO_ROOT, path).resolve() == Path(__file__).resolve()
    assert callable(globals()[test_name])
    assert "events (sim ms" not in result.report(REPLAY_TEST)


@pytest.mark.sim
def test_same_seed_same_trace() -> None:
    """A seed fixes everything: two runs produce the same event trace digest."""
    for seed in range(5):
        first, second = run_seed(seed), run_seed(seed)
        assert first.trace_digest == second.trace_digest, f"seed {seed} is not deterministic"
        assert (first.steps, first.ops, first.messages) == (
            second.steps,
            second.ops,
            second.messages,
        )
    assert run_seed(0).trace_digest != run_seed(1).trace_digest


@pytest.mark.sim
def test_replay_in_another_process_is_identical() -> None:
    """A replay is a new process with another hash seed: the trace must not change."""
    code = "from tests.sim.cluster import run_seed; print(run_seed(3).trace_digest)"
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        digests.add(out.stdout.strip())
    assert digests == {run_seed(3).trace_digest}


@pytest.mark.sim
def test_runs_exercise_faults_and_clients() -> None:
    """The seeds really crash nodes, elect leaders and complete client operations."""
    results = [run_seed(seed) for seed in range(20)]
    failed = [r.report(REPLAY_TEST) for r in results if r.failure is not None]
    if failed:
        pytest.fail("\n".join(failed), pytrace=False)
    assert sum(r.crashes for r in results) >= 20
    assert sum(r.elections for r in results) >= 40
    assert sum(r.ops_ok for r in results) >= 200
    assert any(r.options.node.compact_every for r in results)
    totals = {key: sum(r.stats[key] for r in results) for key in results[0].stats}
    keys = ("reads_ok", "appends_ok", "snapshots_sent", "torn_recoveries", "mid_ready_crashes")
    for key in (*keys, "conf_changes", "joint_changes"):
        assert totals[key] > 0, totals


@pytest.mark.sim
def test_a_removed_member_that_missed_its_removal_is_not_elected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seed 6125 with early appends: node 1, removed from group 3 by a joint change,
    lost to a torn write the commit of the joint entry, campaigned in its old
    configuration and won with node 2's vote while nodes 3 and 4 elected node 3
    in the same term. Voters now refuse a voter their applied configuration took
    out (Raft._counts_as_voter)."""
    monkeypatch.setattr(sim_replica, "EARLY_SEND", True)
    result = run_seed(6125)
    if result.failure is not None:
        pytest.fail(result.report(REPLAY_TEST, TRACE_LINES), pytrace=False)


@pytest.mark.sim
def test_a_host_that_skips_fsync_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the host on purpose (fsync does nothing): crashes must expose it.

    Proves the whole pipeline (crash model, recovery, checkers) catches a
    durability bug, not only the checkers in isolation.
    """
    monkeypatch.setattr(SimDisk, "fsync", lambda self: None)
    failures = [r.failure for r in (run_seed(seed) for seed in range(20)) if r.failure]
    assert len(failures) >= 3, failures
    assert any("InvariantViolation" in f for f in failures), failures


@pytest.mark.sim
def test_a_core_that_votes_for_stale_logs_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the core on purpose (every log counts as up to date, §5.4.1 off)."""
    monkeypatch.setattr(RaftLog, "is_up_to_date", lambda self, last_index, term: True)
    failures = [r.failure for r in (run_seed(seed) for seed in range(15)) if r.failure]
    assert len(failures) >= 3, failures
    assert all("InvariantViolation" in f for f in failures), failures


@pytest.mark.sim
def test_reads_served_without_a_quorum_check_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the core on purpose: a leader answers ReadIndex at once (no heartbeat round).

    A deposed leader then serves stale reads; the linearizability check must
    see them. (Patches a private function of raft.core.leader: adjust if it moves.)
    """

    def answer_at_once(r: Raft, m: Message) -> None:
        r.answer_read(m.from_, m.context, r.log.committed)

    monkeypatch.setattr(leader, "_read_index", answer_at_once)
    failures = [r.failure for r in (run_seed(seed) for seed in range(40)) if r.failure]
    assert failures
    assert all(f.startswith("history:") for f in failures), failures
