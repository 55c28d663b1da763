"""Seeded chaos over real RawNodes: the safety properties of Raft §5.4 hold.

Each seed runs a 3- or 5-voter group through random ticks, proposals, message
drops, duplication and reordering, partitions, crashes with restart from the
persisted log, compaction (so snapshots flow) and leader transfers. After
every step it checks:

- election safety: at most one leader per term;
- state machine safety: no two replicas apply different entries at an index;
- applied entries come out in index order without gaps.

At the end the network heals and the group must elect a leader and apply a
last proposal everywhere (liveness under a healed network). A failure names
its seed; rerun with that seed to replay it exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random

import pytest

from raft.core.memory_log import MemoryLog
from raft.core.node import RawNode
from raft.errors import ProposalDropped
from raft.types import (
    ConfChange,
    ConfChangeTransition,
    ConfChangeType,
    ConfChangeV2,
    Entry,
    Message,
    MsgType,
    Role,
)
from tests.unit.raft_core.network import Network, Replica

SEEDS = range(int(os.environ.get("RIP5_RAFT_CHAOS_SEEDS", "40")))


class Chaos:
    """One seeded run and its invariant checks."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        size = self.rng.choice([3, 5])
        self.ids = list(range(1, size + 1))
        # Half of the 5-replica runs start with two learners and swap members
        # through joint consensus while the faults go on.
        self.membership_changes = size == 5 and self.rng.random() < 0.5
        learners = self.ids[3:] if self.membership_changes else []
        self.net = Network(
            [i for i in self.ids if i not in learners],
            learners=learners,
            seed=seed,
            pre_vote=self.rng.random() < 0.7,
            check_quorum=self.rng.random() < 0.7,
            max_inflight_msgs=self.rng.choice([1, 4, 64]),
            max_size_per_msg_bytes=self.rng.choice([8, 64, 1 << 20]),
        )
        self.leaders: dict[int, int] = {}
        self.applied: dict[int, Entry] = {}
        self.last_applied: dict[int, int] = dict.fromkeys(self.ids, 0)
        self.down: set[int] = set()
        self.partition: set[int] = set()
        self.proposed = 0
        self.checked: dict[int, int] = {}
        self.changes_proposed = 0

    def fail(self, what: str) -> None:
        raise AssertionError(f"seed {self.seed}: {what}")

    def check(self) -> None:
        for node_id, replica in self.net.replicas.items():
            node = replica.node
            if node.role == Role.LEADER:
                term = node.raft.term
                other = self.leaders.setdefault(term, node_id)
                if other != node_id:
                    self.fail(f"two leaders in term {term}: {other} and {node_id}")
            for entry in replica.applied[self.consumed(node_id) :]:
                if entry.index <= self.last_applied[node_id]:
                    self.fail(f"{node_id} applied {entry.index} after {self.last_applied[node_id]}")
                self.last_applied[node_id] = entry.index
                known = self.applied.setdefault(entry.index, entry)
                if known != entry:
                    self.fail(f"index {entry.index}: {node_id} applied {entry}, another {known}")
            self.mark_consumed(node_id)

    def consumed(self, node_id: int) -> int:
        """How many of ``node_id``'s applied entries were checked already."""
        return self.checked.get(node_id, 0)

    def mark_consumed(self, node_id: int) -> None:
        self.checked[node_id] = len(self.net.replicas[node_id].applied)

    def keep(self, m: Message) -> bool:
        if m.to in self.down or m.from_ in self.down:
            return False
        if (m.to in self.partition) != (m.from_ in self.partition):
            return False
        return self.rng.random() > 0.1

    def deliver_some(self) -> None:
        net = self.net
        batch = net.in_flight
        net.in_flight = []
        self.rng.shuffle(batch)
        for m in batch:
            if not self.keep(m):
                if m.type == MsgType.SNAP and m.from_ not in self.down:
                    # The sending host learns that the snapshot did not arrive.
                    net.node(m.from_).report_snapshot(m.to, False)
                continue
            if m.type == MsgType.SNAP:
                net.node(m.from_).report_snapshot(m.to, True)
            if self.rng.random() < 0.05:
                net.in_flight.append(m)  # duplicate: deliver again later
            net.replicas[m.to].node.step(m)

    def restart(self, node_id: int) -> None:
        replica = self.net.replicas[node_id]
        # The harness applied everything it was handed: say so on restart.
        applied = replica.node.raft.log.applied
        log: MemoryLog = replica.log
        config = replica.node.raft.config
        replica.node = RawNode(
            dataclasses.replace(config, applied=max(applied, log.first_index() - 1)),
            log,
            self.net.rng.randrange,
        )

    def step(self) -> None:
        rng = self.rng
        net = self.net
        action = rng.random()
        up = [i for i in self.ids if i not in self.down]
        if action < 0.45:
            for node_id in up:
                net.node(node_id).tick()
        elif action < 0.65:
            node_id = rng.choice(up)
            self.proposed += 1
            with contextlib.suppress(ProposalDropped):
                net.node(node_id).propose(b"p%d" % self.proposed)
        elif action < 0.7:
            self.partition = set(rng.sample(self.ids, rng.randint(0, len(self.ids) // 2)))
        elif action < 0.73 and len(self.down) < (len(self.ids) - 1) // 2:
            victim = rng.choice(up)
            self.down.add(victim)
            net.in_flight = [m for m in net.in_flight if m.to != victim]
        elif action < 0.78 and self.down:
            node_id = self.down.pop()
            self.restart(node_id)
        elif action < 0.8:
            node_id = rng.choice(up)
            replica: Replica = net.replicas[node_id]
            # Snapshot at the applied index, where the host knows the membership.
            applied = replica.node.raft.log.applied
            if applied > replica.log.first_index():
                replica.log.create_snapshot(applied, replica.conf_state, b"")
                replica.log.compact(applied)
        elif action < 0.82:
            node_id = rng.choice(up)
            net.node(node_id).transfer_leader(rng.choice(self.ids))
        elif action < 0.86 and self.membership_changes:
            self.swap_members(rng.choice(up))
        for node_id in up:
            net.process_ready(node_id)
        self.deliver_some()
        self.check()

    def swap_members(self, node_id: int) -> None:
        """Propose demoting a voter and promoting a learner in one joint change."""
        conf = self.net.replicas[node_id].conf_state
        if conf.voters_outgoing or not conf.learners:
            return
        promote = self.rng.choice(sorted(conf.learners))
        demote = self.rng.choice(sorted(conf.voters))
        change = ConfChangeV2(
            (
                ConfChange(ConfChangeType.ADD_VOTER, promote),
                ConfChange(ConfChangeType.ADD_LEARNER, demote),
            ),
            self.rng.choice([ConfChangeTransition.AUTO, ConfChangeTransition.JOINT_IMPLICIT]),
        )
        with contextlib.suppress(ProposalDropped):
            self.net.node(node_id).propose_conf_change(change)
        self.changes_proposed += 1

    def heal_and_finish(self) -> None:
        net = self.net
        for node_id in list(self.down):
            self.restart(node_id)
        self.down.clear()
        self.partition = set()
        # A client retries its write until every replica applied it (a
        # leader deposed before committing it loses it legitimately).
        for round_ in range(600):
            for node_id in self.ids:
                net.node(node_id).tick()
            if round_ % 25 == 0:
                for node_id in self.ids:
                    if net.node(node_id).is_leader():
                        with contextlib.suppress(ProposalDropped):
                            net.node(node_id).propose(b"final")
            net.stabilize()
            self.check()
            if all(any(e.data == b"final" for e in net.replicas[i].applied) for i in self.ids):
                return
        self.fail("the healed group did not apply a write everywhere")


@pytest.mark.parametrize("seed", SEEDS)
def test_chaos_keeps_raft_safety(seed: int) -> None:
    chaos = Chaos(seed)
    for _ in range(400):
        chaos.step()
    chaos.heal_and_finish()
    assert any(e.data == b"final" for e in chaos.applied.values())
