"""A member added with nothing of the log catches up from the leader's snapshot.

The group's initial membership is bootstrapped beside the log, not in it, so
a new learner replaying the log from entry 1 would apply the membership
changes in it to an empty configuration. The leader therefore sends a
learner that holds nothing (match 0) its latest snapshot when it has one
beyond the learner's next entry.
"""

from __future__ import annotations

from raft.types import ConfChange, ConfChangeType, ConfState, EntryType, MsgType
from tests.unit.raft_core.network import Network


def _group_with_entries() -> Network:
    net = Network([1, 2, 3], election_tick=10, heartbeat_tick=1)
    net.elect(1)
    for i in range(5):
        net.node(1).propose(f"m{i}".encode())
    net.stabilize()
    return net


def _add_learner(net: Network, snapshot_at_change: bool) -> None:
    net.add(4, ConfState())
    leader = net.replicas[1]
    leader.node.propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, 4))
    while 4 not in leader.conf_state.learners:
        for node_id in sorted(net.replicas):
            net.process_ready(node_id)
        net.deliver()
    if snapshot_at_change:
        # The host snapshots right at the applied change (as raft.host.multiraft does).
        applied = leader.node.raft.log.applied
        leader.log.create_snapshot(applied, leader.conf_state, b"state")
    net.stabilize()


def test_a_new_learner_starts_from_the_snapshot() -> None:
    net = _group_with_entries()
    _add_learner(net, snapshot_at_change=True)
    sent = [m for _, rd in net.readys for m in rd.messages if m.to == 4]
    first = next(m for m in sent if m.type == MsgType.SNAP or m.entries)
    assert first.type == MsgType.SNAP  # not entries from 1
    learner = net.replicas[4]
    assert learner.conf_state.voters == frozenset({1, 2, 3})
    assert learner.conf_state.learners == frozenset({4})
    assert not [e for e in learner.applied if e.type != EntryType.NORMAL]  # no replay from 1
    # Caught up (match > 0): from now on it is sent entries.
    net.node(1).propose(b"after")
    net.stabilize()
    assert net.data_applied(4) == [b"after"]
