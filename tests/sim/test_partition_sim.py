"""Seeded simulation runs of the partition state machine over raft (see tests/sim/partition.py).

``make test`` runs seeds 0..(RIP5_PARTITION_SEEDS, default 60)-1; a failure
names its seed and the command that replays it with its trace.
"""

from __future__ import annotations

import os
import re

import pytest

from storage_node.partition.dedup import DedupWindow
from storage_node.partition.pop import GroupQueue
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


@pytest.mark.sim
def test_an_ack_that_does_nothing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the state machine on purpose: an ack answers success but finishes nothing
    (the message stays leased and comes back). The model must see it."""

    def ack_nothing(self: GroupQueue, queue_offset: int, generation: int, clock_ms: int) -> bool:
        lease = self.leases.get(queue_offset)
        return lease is not None and lease.generation == generation and lease.is_invisible(clock_ms)

    monkeypatch.setattr(GroupQueue, "finish_current", ack_nothing)
    failures = [r.failure for r in (run_partition_seed(seed) for seed in range(6)) if r.failure]
    assert len(failures) >= 3, failures
    # The acked one is not done: it is delivered again, which the model sees as a
    # delivery of a done offset, or, after a commit moved the offset back over it
    # (the model then holds it fresh), as a delivery whose attempt is not the first.
    assert all("done" in f or re.search(r"attempt \d+ after 0 deliveries", f) for f in failures), (
        failures
    )


@pytest.mark.sim
def test_a_lease_check_ignoring_the_generation_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the state machine on purpose: an ack with a stale handle (an earlier
    delivery's generation) finishes the current lease. The model must see it."""

    def any_generation(self: GroupQueue, queue_offset: int, generation: int, clock_ms: int) -> bool:
        lease = self.leases.get(queue_offset)
        if lease is None or not lease.is_invisible(clock_ms):
            return False
        self._finish_quietly(queue_offset)
        return True

    monkeypatch.setattr(GroupQueue, "finish_current", any_generation)
    failures = [r.failure for r in (run_partition_seed(seed) for seed in range(24)) if r.failure]
    assert len(failures) >= 3, failures
    assert all("ack of ReceiptHandle" in f for f in failures), failures  # a stale ack succeeded


def _partition_failures(seeds: int) -> list[str]:
    return [r.failure for r in (run_partition_seed(s) for s in range(seeds)) if r.failure]


@pytest.mark.sim
def test_a_dedup_window_that_forgets_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the state machine on purpose: the dedup window never knows a message id,
    so a resent batch (same ids) is stored again at new offsets. The model must see it."""
    monkeypatch.setattr(DedupWindow, "lookup", lambda self, topic, message_id: None)
    monkeypatch.setattr(DedupWindow, "knows_any", lambda self, keys: False)
    monkeypatch.setattr(DedupWindow, "knows_any_of", lambda self, topic, ids: False)
    failures = _partition_failures(12)
    assert len(failures) >= 3, failures
    assert all("resent" in f and "first stored at offset" in f for f in failures), failures


@pytest.mark.sim
def test_a_fifo_receive_ignoring_message_groups_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Break the state machine on purpose: a FIFO group's receive hands out a message
    while an earlier one of its message group is in flight. The model must see it."""
    receive = GroupQueue.receive

    def unordered(self: GroupQueue, queue: object, **options: object) -> object:
        options["fifo"] = False
        return receive(self, queue, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(GroupQueue, "receive", unordered)
    failures = _partition_failures(12)
    assert len(failures) >= 3, failures
    assert all("(fifo)" in f for f in failures), failures  # the FIFO model saw it
