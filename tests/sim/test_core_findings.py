"""Minimal reproductions of raft core bugs the simulation found.

Each test pins one finding with the smallest setup that shows it, through
the core tests' own in-memory group harness, so the fix can be checked
without running the simulation.
"""

from __future__ import annotations

from collections.abc import Callable

from raft.types import ConfChange, ConfChangeType, Message, MsgType
from tests.unit.raft_core.network import Network


def _drop_appends_to(node_id: int) -> Callable[[Message], bool]:
    return lambda m: not (m.to == node_id and m.type == MsgType.APP)


def test_lost_appends_with_a_full_inflight_window_are_resent() -> None:
    """Found by sim seeds 12 and 81 (max_inflight_msgs=4, 5% drops): liveness.

    The leader streams appends to a follower in the replicate state until
    its inflight window is full. If every one of those appends is lost, no
    append response ever frees the window; heartbeat responses keep
    arriving, but the leader never sends that follower another append, so
    it stays behind forever (etcd frees one inflight slot on a heartbeat
    response for exactly this case).
    """
    net = Network([1, 2, 3], max_inflight_msgs=2)
    net.elect(1)
    for i in range(4):
        net.node(1).propose(b"x%d" % i)
        net.stabilize(keep=_drop_appends_to(3))
    assert net.data_applied(3) == []
    for _ in range(30):  # heartbeats flow normally now; nothing else is lost
        net.tick(1)
        net.stabilize()
    assert net.data_applied(3) == [b"x0", b"x1", b"x2", b"x3"]


def _snapshot_and_compact(net: Network, node_id: int) -> None:
    replica = net.replicas[node_id]
    applied = replica.applied[-1].index
    replica.log.create_snapshot(applied, replica.conf_state, b"")
    replica.log.compact(applied)


def _add_learner_after_compaction(fresh_snapshot: bool) -> Network:
    net = Network([1, 2, 3])
    net.elect(1)
    for i in range(5):
        net.node(1).propose(b"x%d" % i)
    net.stabilize()
    _snapshot_and_compact(net, 1)  # the leader's snapshot: members {1, 2, 3}
    net.add(4, net.conf_state)  # a spare with an empty log
    net.node(1).propose_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, 4))
    net.stabilize(keep=lambda m: m.to != 4)  # the change commits and applies first
    if fresh_snapshot:
        _snapshot_and_compact(net, 1)  # the host's duty: a snapshot that names 4
    for _ in range(10):
        net.tick(1)
        net.stabilize()
        net.node(1).report_snapshot(4, True)  # any SNAP sent was delivered (no-op otherwise)
    return net


def test_a_member_added_after_the_last_snapshot_needs_a_fresh_one() -> None:
    """Found by sim seed 138 (liveness): a host duty the Ready docs do not state.

    A leader whose log is compacted sends a new member its latest snapshot.
    If that snapshot predates the member's addition, its membership lacks
    the member, which rightly ignores it, and the leader resends it forever.
    The simulation's host therefore snapshots as soon as a member joins
    (etcd's server does the equivalent by building the snapshot it sends
    from its current state).
    """
    stuck = _add_learner_after_compaction(fresh_snapshot=False)
    assert stuck.node(4).status().commit == 0
    caught_up = _add_learner_after_compaction(fresh_snapshot=True)
    assert caught_up.node(4).status().commit == caught_up.node(1).status().commit
