"""Seeded simulation runs of the nameserver state machine over raft (tests/sim/nameserver.py).

``make test`` runs seeds 0..(RIP5_NAMESERVER_SEEDS, default 100)-1; a failure
names its seed and the command that replays it with its trace.
"""

from __future__ import annotations

import os

import pytest

from nameserver import commands as c
from nameserver.records import ChangeKind, Lease
from nameserver.state import MetadataState
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


def _nameserver_failures(seeds: int) -> list[str]:
    return [r.failure for r in (run_nameserver_seed(s) for s in range(seeds)) if r.failure]


@pytest.mark.sim
def test_a_lease_granted_over_its_holder_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the state machine on purpose: an acquire is granted even while another
    owner holds the lease unexpired (two holders at once). The lease model must see it."""

    def grant_always(self: MetadataState, command: c.AcquireLease) -> Lease:
        # Only exclusivity is broken: fencing tokens are as the real machine's.
        known = self._leases.get(command.name)
        same_tenure = (
            known is not None and known.owner == command.owner and known.expires_ms > command.now_ms
        )
        token = known.token if known is not None and same_tenure else self._revision + 1
        lease = Lease(command.name, command.owner, command.now_ms + command.ttl_ms, token)
        self._leases[lease.name] = lease
        self._changed(ChangeKind.LEASE, lease.name, lease)
        return lease

    monkeypatch.setattr(MetadataState, "_acquire_lease", grant_always)
    failures = _nameserver_failures(8)
    assert len(failures) >= 3, failures
    assert all("AcquireLease" in f and "granted while the model has" in f for f in failures)


@pytest.mark.sim
def test_a_renewal_of_an_expired_lease_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the state machine on purpose: a renewal ignores that the lease expired
    (and may have gone to another owner since). The lease model must see it."""

    def renew_always(self: MetadataState, command: c.RenewLease) -> Lease:
        known = self._leases.get(command.name)
        lease = Lease(
            command.name,
            command.owner,
            command.now_ms + command.ttl_ms,
            known.token if known is not None else 1,
        )
        self._leases[lease.name] = lease
        self._changed(ChangeKind.LEASE, lease.name, lease)
        return lease

    monkeypatch.setattr(MetadataState, "_renew_lease", renew_always)
    failures = _nameserver_failures(8)
    assert len(failures) >= 3, failures
    assert all("RenewLease" in f and "granted while the model has" in f for f in failures)


@pytest.mark.sim
def test_a_delete_that_keeps_the_topic_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break the state machine on purpose: a topic delete answers OK and keeps the topic."""

    def keep(self: MetadataState, command: c.DeleteTopic) -> None:
        self.topic(command.name)  # still refuses an unknown topic, as the real one

    monkeypatch.setattr(MetadataState, "_delete_topic", keep)
    failures = _nameserver_failures(8)
    assert len(failures) >= 3, failures
    assert all("topics [" in f and "model [" in f for f in failures), failures


@pytest.mark.sim
def test_a_new_tenure_keeping_the_old_fencing_token_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Break the state machine on purpose: an acquire by a new owner (or after expiry)
    keeps the lease's old token, so a stale holder's writes cannot be fenced off."""
    acquire = MetadataState._acquire_lease

    def stale_token(self: MetadataState, command: c.AcquireLease) -> Lease:
        known = self._leases.get(command.name)
        lease = acquire(self, command)
        if known is not None and known.token != lease.token:
            lease = Lease(lease.name, lease.owner, lease.expires_ms, known.token)
            self._leases[lease.name] = lease
        return lease

    monkeypatch.setattr(MetadataState, "_acquire_lease", stale_token)
    failures = _nameserver_failures(8)
    assert len(failures) >= 3, failures
    assert all("began a tenure with token" in f for f in failures), failures
