"""The RawNode API contract: inputs, the Ready/advance cycle, status."""

from __future__ import annotations

import random

import pytest

from raft.core.memory_log import MemoryLog
from raft.core.node import Config, RawNode
from raft.errors import BadMessage, ProposalDropped
from raft.types import ConfState, Message, MsgType, Role
from tests.unit.raft_core.network import Network

MT = MsgType


def test_local_only_messages_from_peers_are_refused() -> None:
    net = Network([1, 2, 3])
    with pytest.raises(BadMessage, match="HUP is local"):
        net.node(1).step(Message(MT.HUP, to=1, from_=2))


def test_empty_reads_are_refused() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    with pytest.raises(BadMessage, match="non-empty context"):
        net.node(1).read_index(b"")


def test_responses_from_non_members_are_ignored() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.node(1).step(Message(MT.APP_RESP, to=1, from_=9, term=1, index=5))
    net.node(1).step(Message(MT.HEARTBEAT_RESP, to=1, from_=9, term=1))
    assert net.node(1).raft.msgs == []
    assert 9 not in net.node(1).status().progress


def test_forwarded_work_that_cannot_be_served_is_dropped_quietly() -> None:
    net = Network([1, 2, 3])
    # No leader anywhere: a forwarded proposal or read is dropped, not raised.
    net.node(2).step(Message(MT.PROP, to=2, from_=3, entries=()))
    net.node(2).step(Message(MT.READ_INDEX, to=2, from_=3, context=b"r"))
    with pytest.raises(ProposalDropped):
        net.node(2).propose(b"x")
    with pytest.raises(ProposalDropped):
        net.node(2).read_index(b"r")


def test_an_empty_batch_proposes_nothing() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.node(1).propose_batch([])
    assert not net.node(1).has_ready()


def test_a_follower_forwards_a_batch_in_one_message() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.node(2).propose_batch([b"a", b"b", b"c"])
    ready = net.process_ready(2)
    assert ready is not None
    assert [(m.type, len(m.entries)) for m in ready.messages] == [(MT.PROP, 3)]
    net.stabilize()
    assert net.data_applied(3) == [b"a", b"b", b"c"]


def test_a_second_ready_before_advance_hands_out_only_new_work() -> None:
    log = MemoryLog(ConfState(frozenset({1})))
    node = RawNode(Config(id=1), log, random.Random(1).randrange)
    node.campaign()
    first = node.ready()
    node.propose(b"a")
    second = node.ready()
    assert [e.index for e in first.entries] == [1]
    assert [e.index for e in second.entries] == [2]
    assert [e.index for e in first.committed_entries] == [1]
    assert [e.index for e in second.committed_entries] == [2]
    assert not node.has_ready()
    log.append(first.entries)
    node.advance(first)
    log.append(second.entries)
    node.advance(second)
    assert node.status().applied == 2
    assert not node.has_ready()


def test_status_and_accessors_describe_the_replica() -> None:
    net = Network([1, 2, 3], learners=[4])
    net.elect(1)
    node = net.node(1)
    status = node.status()
    assert (status.id, status.role, status.lead, status.commit) == (1, Role.LEADER, 1, 1)
    assert status.conf_state == ConfState(frozenset({1, 2, 3}), frozenset({4}))
    assert node.conf_state() == status.conf_state == net.node(2).conf_state()
    assert status.progress[4].is_learner
    assert status.progress[2].state == "replicate"
    assert net.node(2).status().progress == {}
    assert (node.id, node.lead) == (1, 1)
    assert node.hard_state() == net.replicas[1].log.initial_state()[0]


def test_quiesce_point_only_when_the_leader_is_in_step_with_every_peer() -> None:
    net = Network([1, 2, 3], learners=[4])
    net.elect(1)
    node = net.node(1)
    status = node.status()
    assert node.quiesce_point() == (status.term, status.last_index)
    assert net.node(2).quiesce_point() is None  # not the leader
    node.propose(b"x")
    assert node.quiesce_point() is None  # appended, not committed
    net.process_ready(1)
    net.deliver(keep=lambda m: m.to != 4)  # the learner does not get it
    net.stabilize(keep=lambda m: m.to != 4 and m.from_ != 4)
    assert node.status().commit == node.status().last_index
    assert node.quiesce_point() is None  # the learner lags
    net.tick(1, 5)  # a heartbeat round: the learner catches up
    net.stabilize()
    status = node.status()
    assert node.quiesce_point() == (status.term, status.last_index)


def test_the_leader_steps_down_when_it_loses_its_quorum() -> None:
    net = Network([1, 2, 3], check_quorum=True, election_tick=5)
    net.elect(1)
    node = net.node(1)
    roles = []
    for _ in range(10):
        node.tick()
        ready = node.ready()  # heartbeats go nowhere
        if ready.soft_state is not None:
            roles.append(ready.soft_state.role)
    assert roles == [Role.FOLLOWER]
    assert node.lead == 0


def test_reports_about_unknown_peers_are_ignored() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.node(1).report_unreachable(9)
    net.node(1).report_snapshot(9, False)
    net.node(1).transfer_leader(9)
    assert net.node(1).raft.lead_transferee == 0
    assert net.node(1).raft.msgs == []
