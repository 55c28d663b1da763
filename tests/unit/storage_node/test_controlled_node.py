"""The controller-mode replica on the raft core: led by the controller's choice,
committing on the SyncStateSet, fencing an old master by epoch."""

from __future__ import annotations

import random

import pytest

from protocol.control_api import ReplicaSetInfo
from raft.core.config import Config
from raft.core.memory_log import MemoryLog
from raft.core.tracker import MembershipConfig
from raft.errors import InvalidConfChange
from raft.types import ConfChange, ConfChangeType, ConfState, Message, MsgType, Role
from storage_node.controlled_node import ControlledNode, commit_config

GROUP = 7


class Pair:
    """Two controlled replicas whose messages are delivered by :meth:`pump`."""

    def __init__(self) -> None:
        self.nodes: dict[int, tuple[ControlledNode, MemoryLog]] = {}
        for n in (1, 2):
            log = MemoryLog(ConfState(frozenset({1, 2})))
            config = Config(id=n, election_tick=10, heartbeat_tick=1)
            self.nodes[n] = (ControlledNode(config, log, random.Random(n).randrange), log)
        self.cut: set[int] = set()  # nodes whose messages are lost

    def node(self, n: int) -> ControlledNode:
        return self.nodes[n][0]

    def view(self, master: int, epoch: int, members: list[int], set_epoch: int) -> None:
        for n in self.nodes:
            self.node(n).follow(ReplicaSetInfo(GROUP, [1, 2], master, epoch, members, set_epoch), 0)

    def pump(self) -> None:
        for _ in range(50):
            moved = False
            for node, log in self.nodes.values():
                if not node.has_ready():
                    continue
                ready = node.ready()
                if ready.hard_state is not None:
                    log.set_hard_state(ready.hard_state)
                log.append(ready.entries)
                for message in ready.messages:
                    if message.from_ not in self.cut and message.to not in self.cut:
                        self.node(message.to).step(message)
                node.advance(ready)
                moved = True
            if not moved:
                return


def test_the_named_master_leads_at_its_epoch_and_commits_with_its_set() -> None:
    pair = Pair()
    pair.view(1, 3, [1], 1)
    pair.pump()
    master, slave = pair.node(1), pair.node(2)
    assert (master.role, master.epoch, slave.role, slave.lead) == (Role.LEADER, 3, Role.FOLLOWER, 1)
    assert master.raft.tracker.config == MembershipConfig(
        voters=frozenset({1}), learners=frozenset({2})
    )
    # The slave answered: the master asks to add it, and counts it from then on.
    asked = master.sync_state_request(10, 500)
    assert asked is not None
    assert asked.sync_state_set == [1, 2]
    assert master.raft.tracker.config.voters == frozenset({1, 2})
    pair.cut = {2}
    master.propose(b"a")
    pair.pump()
    assert master.raft.log.committed < master.raft.log.last_index()  # waits for the slave
    pair.cut = set()
    master.tick()
    pair.pump()
    assert master.raft.log.committed == master.raft.log.last_index()


def test_followers_never_campaign_and_votes_transfers_and_conf_changes_are_refused() -> None:
    pair = Pair()
    for _ in range(100):
        pair.node(1).tick()
    assert not pair.node(1).has_ready()
    pair.node(1).campaign()
    assert pair.node(1).role == Role.FOLLOWER
    pair.node(1).step(Message(MsgType.VOTE, to=1, from_=2, term=9, log_term=9, index=9))
    assert pair.node(1).raft.term == 0
    with pytest.raises(InvalidConfChange, match="the controller decides"):
        pair.node(1).propose_conf_change(ConfChange(ConfChangeType.REMOVE_NODE, 2))


def test_an_old_master_is_fenced_by_the_new_epoch() -> None:
    pair = Pair()
    pair.view(1, 1, [1, 2], 2)
    pair.pump()
    old = pair.node(1)
    # The controller elects node 2 at epoch 2; node 1 (paused) never hears of it.
    pair.node(2).follow(ReplicaSetInfo(GROUP, [1, 2], 2, 2, [2], 3), 0)
    pair.pump()
    assert pair.node(2).role == Role.LEADER
    assert old.role == Role.FOLLOWER  # the new master's appends reached it
    # Had it still led: its proposal is refused by the slave's epoch.
    stale = Pair()
    stale.view(1, 1, [1, 2], 2)
    stale.pump()
    committed = stale.node(1).raft.log.committed
    stale.cut = {1}
    stale.node(2).follow(ReplicaSetInfo(GROUP, [1, 2], 2, 2, [2], 3), 0)
    stale.pump()
    stale.cut = set()
    stale.node(1).propose(b"stale")
    stale.pump()
    assert stale.node(1).role == Role.FOLLOWER
    assert stale.node(1).epoch == 2
    slave_log = stale.nodes[2][1]
    assert all(e.data != b"stale" for e in slave_log.entries(1, slave_log.last_index() + 1))
    assert stale.node(1).raft.log.committed == committed  # nothing of its own committed


def test_three_members_commit_on_all_of_them() -> None:
    config = commit_config(1, frozenset({1, 2, 3}), frozenset({1, 2, 3}))
    assert config.voters == frozenset({1, 2})
    assert config.voters_outgoing == frozenset({1, 3})
    with pytest.raises(ValueError, match="at most 3 replicas"):
        commit_config(1, frozenset({1, 2, 3, 4}), frozenset({1, 2, 3, 4}))


def test_below_min_in_sync_every_replica_must_hold_an_entry() -> None:
    pair = Pair()
    pair.node(1).min_in_sync = 2
    pair.view(1, 1, [1], 1)
    pair.pump()
    master = pair.node(1)
    assert master.raft.tracker.config.voters == frozenset({1, 2})
    pair.cut = {2}
    master.propose(b"a")
    pair.pump()
    assert master.raft.log.committed < master.raft.log.last_index()


def _in_sync_pair() -> Pair:
    """Node 1 master at epoch 1 with the SyncStateSet {1, 2}, both holding its log."""
    pair = Pair()
    pair.view(1, 1, [1], 1)
    pair.pump()
    asked = pair.node(1).sync_state_request(0, 500)
    assert asked is not None
    assert asked.sync_state_set == [1, 2]
    pair.node(1).follow(ReplicaSetInfo(GROUP, [1, 2], 1, 1, [1, 2], 2), 0)
    pair.pump()
    return pair


def test_a_slave_keeping_up_with_a_steady_stream_stays_in_the_set() -> None:
    # Sampled every 100 ms, the slave always lacks the entry just proposed (it is in
    # flight), yet it holds every entry of the sample before: it is in sync.
    pair = _in_sync_pair()
    master = pair.node(1)
    for now_ms in range(100, 5_000, 100):
        master.propose(b"m")
        assert master.sync_state_request(now_ms, 500) is None, master.sync_report(now_ms)
        pair.pump()
    assert "2: match" in master.sync_report(5_000)


def test_a_slave_that_stops_reaching_the_log_is_dropped_after_the_lag_bound() -> None:
    pair = _in_sync_pair()
    master = pair.node(1)
    pair.cut = {2}
    for now_ms in range(100, 500, 100):
        master.propose(b"m")
        assert master.sync_state_request(now_ms, 500) is None  # it held the log at 0 ms
    asked = master.sync_state_request(500, 500)
    assert asked is not None
    assert asked.sync_state_set == [1], master.sync_report(500)
