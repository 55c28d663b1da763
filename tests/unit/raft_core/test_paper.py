"""Rules of the Raft paper (Ongaro & Ousterhout, "In Search of an Understandable
Consensus Algorithm", extended version) and of the thesis, one test per rule.
"""

from __future__ import annotations

import random

import pytest

from raft.core import leader
from raft.core.config import Config
from raft.core.memory_log import MemoryLog
from raft.core.node import RawNode
from raft.core.progress import ProgressState
from raft.core.replica import Raft
from raft.errors import ProposalDropped, RaftError
from raft.types import (
    ConfChange,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MsgType,
    Role,
    Snapshot,
    SnapshotMetadata,
)
from tests.unit.raft_core.network import Network

MT = MsgType


def voters(*ids: int) -> ConfState:
    return ConfState(frozenset(ids))


def new_raft(node_id: int = 1, log: MemoryLog | None = None, **options: object) -> Raft:
    storage = log if log is not None else MemoryLog(voters(1, 2, 3))
    config = Config(id=node_id, **options)  # type: ignore[arg-type]
    return Raft(config, storage, random.Random(node_id).randrange)


# -- §5.1: terms ----------------------------------------------------------------


def test_5_1_a_higher_term_turns_any_role_into_a_follower() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    leader_node = net.node(1)
    leader_node.step(Message(MT.APP_RESP, to=1, from_=2, term=5))
    assert (leader_node.role, leader_node.raft.term, leader_node.lead) == (Role.FOLLOWER, 5, 0)


def test_5_1_a_stale_term_message_is_rejected_or_ignored() -> None:
    r = new_raft(pre_vote=False, check_quorum=False)
    r.become_follower(4, 2)
    r.step(Message(MT.APP, to=1, from_=2, term=3, index=0, log_term=0))
    assert r.msgs == []  # ignored without pre-vote/check-quorum
    r.config = Config(id=1, pre_vote=True)
    r.step(Message(MT.HEARTBEAT, to=1, from_=2, term=3))
    assert [(m.type, m.term) for m in r.msgs] == [(MT.APP_RESP, 4)]
    r.msgs.clear()
    r.step(Message(MT.PRE_VOTE, to=1, from_=3, term=3))
    assert [(m.type, m.reject) for m in r.msgs] == [(MT.PRE_VOTE_RESP, True)]


# -- §5.2: leader election ------------------------------------------------------


def test_5_2_election_timeouts_are_randomized_within_one_to_two_timeouts() -> None:
    r = new_raft(election_tick=10)
    seen = set()
    for term in range(1, 60):
        r.become_follower(term, 0)
        seen.add(r.randomized_election_timeout)
    assert min(seen) >= 10
    assert max(seen) < 20
    assert len(seen) > 3


def test_5_2_a_lone_voter_elects_itself_at_once() -> None:
    for pre_vote in (True, False):
        log = MemoryLog(voters(1))
        node = RawNode(Config(id=1, pre_vote=pre_vote), log, random.Random(1).randrange)
        node.campaign()
        assert node.is_leader()
        rd = node.ready()
        log.append(rd.entries)
        assert [e.index for e in rd.committed_entries] == [1]
        node.advance(rd)


def test_5_2_a_candidate_that_loses_the_vote_becomes_follower() -> None:
    r = new_raft(pre_vote=False)
    r.hup()
    assert r.role == Role.CANDIDATE
    r.step(Message(MT.VOTE_RESP, to=1, from_=2, term=1, reject=True))
    assert r.role == Role.CANDIDATE
    r.step(Message(MT.VOTE_RESP, to=1, from_=3, term=1, reject=True))
    assert (r.role, r.term) == (Role.FOLLOWER, 1)


def test_5_2_a_candidate_yields_to_a_leader_of_its_term() -> None:
    r = new_raft(pre_vote=False)
    r.hup()
    r.step(Message(MT.HEARTBEAT, to=1, from_=2, term=1))
    assert (r.role, r.lead) == (Role.FOLLOWER, 2)
    r.hup()
    with pytest.raises(ProposalDropped):
        r.step(Message(MT.PROP, entries=(Entry(0, 0, data=b"x"),)))
    r.step(Message(MT.TIMEOUT_NOW, to=1, from_=2, term=2))  # ignored by a candidate
    r.step(Message(MT.PRE_VOTE_RESP, to=1, from_=2, term=2))  # not our election
    assert r.role == Role.CANDIDATE


def test_5_2_each_replica_votes_once_per_term() -> None:
    r = new_raft(pre_vote=False, check_quorum=False)
    r.step(Message(MT.VOTE, to=1, from_=2, term=1))
    r.step(Message(MT.VOTE, to=1, from_=3, term=1))
    r.step(Message(MT.VOTE, to=1, from_=2, term=1))  # a retry of the granted vote
    assert [(m.to, m.reject) for m in r.msgs] == [(2, False), (3, True), (2, False)]
    assert r.vote == 2


def test_5_2_leaders_and_learners_do_not_campaign() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    term = net.node(1).raft.term
    net.node(1).campaign()
    assert (net.node(1).is_leader(), net.node(1).raft.term) == (True, term)
    learner = new_raft(4, MemoryLog(ConfState(frozenset({1, 2, 3}), frozenset({4}))))
    learner.hup()
    assert learner.role == Role.FOLLOWER


def test_5_2_role_transitions_refuse_misuse() -> None:
    r = new_raft()
    with pytest.raises(RaftError):
        r.become_leader()
    r.hup()
    r.become_leader()
    with pytest.raises(RaftError):
        r.become_candidate()
    with pytest.raises(RaftError):
        r.become_pre_candidate()


# -- §5.3/§5.4: log replication and safety ------------------------------------------


def test_5_4_1_votes_go_only_to_candidates_with_up_to_date_logs() -> None:
    log = MemoryLog(voters(1, 2, 3))
    log.append([Entry(1, 1), Entry(2, 2)])
    log.set_hard_state(HardState(2, 0, 0))
    r = new_raft(1, log, pre_vote=False, check_quorum=False)
    r.step(Message(MT.VOTE, to=1, from_=2, term=3, index=5, log_term=1))  # older last term
    r.step(Message(MT.VOTE, to=1, from_=3, term=3, index=1, log_term=2))  # shorter
    r.step(Message(MT.VOTE, to=1, from_=3, term=3, index=2, log_term=2))  # as recent
    assert [m.reject for m in r.msgs] == [True, True, False]


def test_5_4_2_a_leader_never_commits_an_old_term_entry_by_counting() -> None:
    log = MemoryLog(voters(1, 2, 3))
    log.append([Entry(1, 1, data=b"old")])
    log.set_hard_state(HardState(1, 0, 0))
    r = new_raft(1, log, pre_vote=False)
    r.hup()
    r.step(Message(MT.VOTE_RESP, to=1, from_=2, term=2))
    assert r.role == Role.LEADER
    # 2 acknowledges only the old entry: a majority holds it, but it is of term 1.
    r.step(Message(MT.APP_RESP, to=1, from_=2, term=2, index=1))
    assert r.log.committed == 0
    r.step(Message(MT.APP_RESP, to=1, from_=2, term=2, index=2))
    assert r.log.committed == 2  # committing the term-2 entry commits the old one too


def test_5_3_the_uncommitted_budget_drops_proposals() -> None:
    net = Network([1, 2, 3], max_uncommitted_entries_bytes=10)
    net.elect(1)
    node = net.node(1)
    node.propose(b"x" * 8)
    with pytest.raises(ProposalDropped, match="uncommitted"):
        node.propose(b"y" * 8)
    net.stabilize()
    node.propose(b"z" * 8)  # the budget came back once the first committed


def test_a_restart_refuses_a_commit_index_beyond_the_log() -> None:
    log = MemoryLog(voters(1, 2, 3))
    log.set_hard_state(HardState(1, 0, 5))
    with pytest.raises(RaftError, match="persisted commit 5"):
        new_raft(1, log)


def test_an_unapplied_membership_change_blocks_campaigning() -> None:
    from raft.core.confchange import encode_conf_change

    log = MemoryLog(voters(1, 2, 3))
    change = encode_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, 4))
    log.append([Entry(1, 1), Entry(1, 2, EntryType.CONF_CHANGE, change)])
    log.set_hard_state(HardState(1, 0, 2))
    r = new_raft(1, log, pre_vote=False)
    r.hup()
    assert r.role == Role.FOLLOWER
    r.log.applied_to(2)
    r.hup()
    assert r.role == Role.CANDIDATE


def test_heartbeats_wait_for_the_heartbeat_tick() -> None:
    net = Network([1, 2, 3], heartbeat_tick=2, election_tick=6)
    net.elect(1)
    net.tick(1)
    assert net.node(1).raft.msgs == []
    net.tick(1)
    assert [m.type for m in net.node(1).raft.msgs] == [MT.HEARTBEAT, MT.HEARTBEAT]


# -- §7: snapshots ----------------------------------------------------------------


def test_7_a_follower_holding_the_snapshot_point_only_advances_its_commit() -> None:
    log = MemoryLog(voters(1, 2, 3))
    log.append([Entry(1, i) for i in range(1, 6)])
    log.set_hard_state(HardState(1, 2, 3))
    r = new_raft(1, log)
    snap = Snapshot(SnapshotMetadata(5, 1, voters(1, 2, 3)))
    r.step(Message(MT.SNAP, to=1, from_=2, term=1, snapshot=snap))
    assert (r.log.committed, r.log.unstable.snapshot) == (5, None)
    assert [(m.type, m.index) for m in r.msgs] == [(MT.APP_RESP, 5)]


def test_7_snapshot_progress_waits_for_an_ack_past_the_log_start() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    raft = net.node(1).raft
    for _ in range(5):
        net.node(1).propose(b"e")
    net.stabilize()
    replica = net.replicas[1]
    replica.log.create_snapshot(6, replica.conf_state, b"")
    replica.log.compact(6)
    pr = raft.tracker.progress[3]
    pr.become_snapshot(6)
    pr.match = 0
    net.node(1).step(Message(MT.APP_RESP, to=1, from_=3, term=raft.term, index=4))
    assert (pr.state, pr.match) == (ProgressState.SNAPSHOT, 4)
    net.node(1).report_snapshot(2, True)  # 2 is not in the snapshot state: ignored
    assert raft.tracker.progress[2].state == ProgressState.REPLICATE


def test_7_no_snapshot_goes_to_a_follower_not_heard_from_lately() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    for _ in range(3):
        net.node(1).propose(b"e")
    net.stabilize()
    replica = net.replicas[1]
    replica.log.create_snapshot(4, replica.conf_state, b"")
    replica.log.compact(4)
    raft = net.node(1).raft
    pr = raft.tracker.progress[3]
    pr.become_probe()
    pr.next, pr.match, pr.recent_active = 2, 0, False
    assert not raft.maybe_send_append(3)
    assert pr.state == ProgressState.PROBE


# -- membership -------------------------------------------------------------------


def test_a_leader_that_removes_itself_steps_down() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.node(1).apply_conf_change(ConfChange(ConfChangeType.REMOVE_NODE, 1))
    assert net.node(1).role == Role.FOLLOWER


def test_no_vote_goes_to_a_voter_a_applied_configuration_took_out() -> None:
    """A configuration takes effect when applied. A voter removed by a change it
    never applied (it crashed before learning that the change committed) still
    campaigns in its old configuration; a replica that applied the removal must
    not help elect it, or it and the new configuration's leader could share a
    term (sim seed 6125)."""
    r = new_raft(1, MemoryLog(voters(1, 2, 3)), pre_vote=False, check_quorum=False)
    r.apply_conf_change(ConfChange(ConfChangeType.ADD_VOTER, 4))
    r.apply_conf_change(ConfChange(ConfChangeType.REMOVE_NODE, 3))
    r.step(Message(MT.VOTE, to=1, from_=3, term=2))  # removed here
    r.step(Message(MT.PRE_VOTE, to=1, from_=3, term=3))
    r.step(Message(MT.VOTE, to=1, from_=4, term=2))  # added here
    assert [(m.type, m.to, m.reject) for m in r.msgs] == [
        (MT.VOTE_RESP, 3, True),
        (MT.PRE_VOTE_RESP, 3, True),
        (MT.VOTE_RESP, 4, False),
    ]
    assert r.vote == 4
    # A voter demoted to learner is taken out as well; one added back is a voter again.
    r.apply_conf_change(ConfChange(ConfChangeType.ADD_LEARNER, 2))
    r.apply_conf_change(ConfChange(ConfChangeType.ADD_VOTER, 3))
    r.msgs.clear()
    r.step(Message(MT.PRE_VOTE, to=1, from_=2, term=3))
    r.step(Message(MT.PRE_VOTE, to=1, from_=3, term=3))
    assert [(m.to, m.reject) for m in r.msgs] == [(2, True), (3, False)]


def test_a_candidate_this_replica_does_not_know_yet_keeps_its_vote() -> None:
    """Node 4 joined by a change this replica has not applied: refusing it could
    leave a group whose leader died mid-change with no one able to win (this
    replica cannot win its old configuration if the other old members are gone)."""
    r = new_raft(2, MemoryLog(voters(1, 2, 3)), pre_vote=False, check_quorum=False)
    r.step(Message(MT.VOTE, to=2, from_=4, term=2))
    assert [(m.to, m.reject) for m in r.msgs] == [(4, False)]


def test_removing_a_lagging_voter_can_commit_at_once() -> None:
    net = Network([1, 2])
    net.elect(1)
    net.node(1).propose(b"waiting")
    net.process_ready(1)
    net.in_flight.clear()  # 2 never gets it
    raft = net.node(1).raft
    committed = raft.log.committed
    net.node(1).apply_conf_change(ConfChange(ConfChangeType.REMOVE_NODE, 2))
    assert raft.log.committed == committed + 1


def test_removing_the_transferee_aborts_the_transfer() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.node(1).propose(b"x")
    net.process_ready(1)
    net.in_flight.clear()
    net.node(1).transfer_leader(3)
    assert net.node(1).raft.lead_transferee == 3
    net.node(1).transfer_leader(3)  # the same request again changes nothing
    net.node(1).transfer_leader(1)  # to itself: aborts the current one and stops
    assert net.node(1).raft.lead_transferee == 0
    net.node(1).transfer_leader(3)
    net.node(1).apply_conf_change(ConfChange(ConfChangeType.REMOVE_NODE, 3))
    assert net.node(1).raft.lead_transferee == 0


def test_leadership_is_never_transferred_to_a_learner() -> None:
    net = Network([1, 2, 3], learners=[4])
    net.elect(1)
    net.node(1).transfer_leader(4)
    assert net.node(1).raft.lead_transferee == 0


# -- local reports and reads --------------------------------------------------------


def test_unreachable_followers_drop_back_to_probing() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    raft = net.node(1).raft
    assert raft.tracker.progress[2].state == ProgressState.REPLICATE
    net.node(1).report_unreachable(2)
    assert raft.tracker.progress[2].state == ProgressState.PROBE
    net.node(1).report_unreachable(2)
    assert raft.tracker.progress[2].state == ProgressState.PROBE


def test_a_lone_voter_serves_reads_at_once() -> None:
    log = MemoryLog(voters(1))
    node = RawNode(Config(id=1), log, random.Random(1).randrange)
    node.campaign()
    node.read_index(b"r")
    rd = node.ready()
    assert [(rs.index, rs.request_ctx) for rs in rd.read_states] == [(1, b"r")]


def test_a_repeated_read_context_is_confirmed_once() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    net.node(1).read_index(b"same")
    net.node(1).read_index(b"same")
    net.stabilize()
    assert [rs.request_ctx for rs in net.replicas[1].read_states] == [b"same"]


def test_proposals_bypass_forwarding_on_the_leader() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    leader.propose_payloads(net.node(1).raft, [b"a", b"b"])
    net.stabilize()
    assert net.data_applied(3) == [b"a", b"b"]


# -- joint consensus (thesis §4.3) ---------------------------------------------------


def test_a_malformed_forwarded_conf_change_becomes_an_empty_entry() -> None:
    net = Network([1, 2, 3])
    net.elect(1)
    bad = Entry(0, 0, EntryType.CONF_CHANGE, b"bad")
    net.node(1).step(Message(MT.PROP, to=1, from_=2, entries=(bad,)))
    last = net.node(1).raft.log.last_index()
    assert net.node(1).raft.log.term(last) == net.node(1).raft.term
    assert net.node(1).raft.log.entries(last)[0].type == EntryType.NORMAL


def test_auto_leave_waits_for_room_in_the_uncommitted_budget() -> None:
    from raft.core.confchange import decode_entry
    from raft.types import ConfChangeTransition, ConfChangeV2

    log = MemoryLog(voters(1))
    node = RawNode(Config(id=1, max_uncommitted_entries_bytes=10), log, random.Random(1).randrange)
    node.campaign()
    node.propose_conf_change(
        ConfChangeV2(
            (ConfChange(ConfChangeType.ADD_LEARNER, 2),), ConfChangeTransition.JOINT_IMPLICIT
        )
    )

    def handle(big_proposal: bool = False) -> None:
        rd = node.ready()
        log.append(rd.entries)
        for entry in rd.committed_entries:
            if entry.type != EntryType.NORMAL:
                log.set_conf_state(node.apply_conf_change(decode_entry(entry)))
        if big_proposal:
            # A large proposal arrives before the joint config is advanced.
            node.propose(b"x" * 20)
        node.advance(rd)

    handle(big_proposal=True)
    assert node.raft.tracker.config.is_joint()
    assert node.raft.log.last_index() == 3  # the leave was dropped: over budget
    handle()
    handle()
    assert not node.raft.tracker.config.is_joint()
    assert node.status().conf_state == ConfState(frozenset({1}), frozenset({2}))


def test_a_change_that_can_never_apply_is_refused_before_it_is_appended() -> None:
    from raft.errors import InvalidConfChange
    from raft.types import ConfChangeV2

    net = Network([1, 2, 3])
    net.elect(1)
    last = net.node(1).raft.log.last_index()
    remove_all = ConfChangeV2(tuple(ConfChange(ConfChangeType.REMOVE_NODE, i) for i in (1, 2, 3)))
    with pytest.raises(InvalidConfChange, match="remove every voter"):
        net.node(1).propose_conf_change(remove_all)
    assert net.node(1).raft.log.last_index() == last
    # Forwarded by a follower (which cannot judge it), it only takes an empty slot.
    net.node(2).propose_conf_change(ConfChange(ConfChangeType.REMOVE_NODE, 0))
    net.stabilize()
    appended = net.node(1).raft.log.entries(last + 1)
    assert [(e.type, e.data) for e in appended] == [(EntryType.NORMAL, b"")]
    assert net.replicas[3].conf_state.voters == {1, 2, 3}
