"""Election and log replication through the public RawNode API (Raft §5.2, §5.3)."""

from __future__ import annotations

from raft.types import Role
from tests.unit.raft_core.network import Network


def test_campaign_elects_a_leader_and_commits_its_empty_entry() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    for node_id in (1, 2, 3):
        status = net.node(node_id).status()
        assert status.lead == 1
        assert status.term == 1
        assert status.commit == 1
    assert net.node(2).role == Role.FOLLOWER


def test_proposals_replicate_and_apply_in_order_everywhere() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    for i in range(20):
        net.node(1).propose(b"e%d" % i)
    net.node(2).propose(b"forwarded")
    net.stabilize()
    expected = [b"e%d" % i for i in range(20)] + [b"forwarded"]
    for node_id in (1, 2, 3):
        assert net.data_applied(node_id) == expected


def test_a_leader_sends_a_follower_the_entries_it_lacks_and_then_nothing() -> None:
    """``send_remaining_appends`` pipelines what a follower lacks; a follower sent up to
    the last entry is owed nothing, and ``maybe_send_append`` without ``send_if_empty``
    sends it nothing."""
    net = Network([1, 2, 3])
    net.elect(1)
    net.stabilize()
    raft = net.node(1).raft
    pr = raft.tracker.progress[2]
    last = raft.log.last_index()
    assert pr.next == last + 1
    assert not raft.maybe_send_append(2, send_if_empty=False)
    raft.send_remaining_appends(2, pr)
    assert raft.msgs == []
    net.node(1).propose(b"a")
    net.node(1).propose(b"b")
    raft.send_remaining_appends(2, pr)
    assert [[e.data for e in m.entries] for m in raft.msgs] == [[b"a", b"b"]]
    assert pr.next == last + 3
    raft.send_remaining_appends(2, pr)
    assert len(raft.msgs) == 1
    net.stabilize()
    assert [r.log.last_index() for r in net.replicas.values()] == [last + 2] * 3
