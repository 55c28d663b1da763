"""A replica whose node lost its data (Config.data_lost) neither votes nor campaigns."""

from __future__ import annotations

from raft.core.memory_log import MemoryLog
from raft.core.node import Config, RawNode
from raft.types import NONE, ConfState, Message, MsgType, Role
from tests.unit.raft_core.network import Network

MT = MsgType
VOTERS = ConfState(frozenset({1, 2, 3}))


def _lost(node_id: int = 3) -> RawNode:
    return RawNode(Config(id=node_id, data_lost=True), MemoryLog(VOTERS), lambda n: 0)


def _answers(node: RawNode) -> list[Message]:
    return list(node.ready().messages)


def test_a_replica_that_lost_its_data_grants_no_vote_nor_pre_vote() -> None:
    node = _lost()
    for kind in (MT.PRE_VOTE, MT.VOTE):
        node.step(Message(kind, to=3, from_=1, term=5, log_term=4, index=10))
        (answer,) = _answers(node)
        assert answer.reject, kind
    assert node.hard_state().vote == NONE
    # The same request is granted by a replica that did not lose its data.
    healthy = RawNode(Config(id=3), MemoryLog(VOTERS), lambda n: 0)
    healthy.step(Message(MT.VOTE, to=3, from_=1, term=5, log_term=4, index=10))
    (answer,) = _answers(healthy)
    assert not answer.reject


def test_a_replica_that_lost_its_data_never_campaigns() -> None:
    node = _lost()
    for _ in range(100):  # many election timeouts
        node.tick()
    node.campaign()
    node.step(Message(MT.TIMEOUT_NOW, to=3, from_=1, term=1))  # a leader transfer
    assert node.role is Role.FOLLOWER
    assert not [m for m in node.ready().messages if m.type in (MT.VOTE, MT.PRE_VOTE)]


def test_a_group_with_a_lost_replica_elects_only_with_the_other_voters() -> None:
    net = Network([1, 2, 3], seed=3)
    lost = net.add(3, VOTERS)  # restarted empty, its state set aside
    lost.node.raft.data_lost = True
    # Node 2 is cut off: node 1 cannot win on node 3's vote alone.
    alone = net.isolate(2)
    net.node(1).campaign()
    net.stabilize(alone)
    assert not net.node(1).is_leader()
    # With node 2 back, node 1 is elected and node 3 follows it, still barred.
    net.elect(1)
    assert net.node(3).lead == 1
    assert net.node(3).data_lost


def test_lifting_records_a_vote_for_the_leader_so_no_second_vote_in_its_term() -> None:
    net = Network([1, 2, 3], seed=4)
    net.replicas[3].node.raft.data_lost = True
    net.elect(1)
    node = net.node(3)
    term = node.hard_state().term
    assert node.hard_state().vote == NONE  # it voted for nobody: it lost its vote
    node.lift_data_lost()
    assert not node.data_lost
    net.stabilize()
    assert net.replicas[3].log.initial_state()[0].vote == 1  # persisted
    # A late vote request of the same term from another candidate is refused.
    node.step(Message(MT.VOTE, to=3, from_=2, term=term, log_term=term, index=100))
    (answer,) = [m for m in node.ready().messages if m.type == MT.VOTE_RESP]
    assert answer.reject
    # It campaigns again once its leader is gone (election timeouts).
    for _ in range(100):
        node.tick()
    assert node.role in (Role.PRE_CANDIDATE, Role.CANDIDATE)


def test_lifting_without_a_known_leader_records_no_vote() -> None:
    node = _lost()
    node.lift_data_lost()
    # No leader known: nothing to record; the replica votes again from here on.
    assert not node.data_lost
    assert node.hard_state().vote == NONE
    node.step(Message(MT.VOTE, to=3, from_=1, term=5, log_term=4, index=10))
    (answer,) = _answers(node)
    assert not answer.reject
    assert node.hard_state().vote == 1
