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
