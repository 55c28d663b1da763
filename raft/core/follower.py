"""The step functions of followers and (pre-)candidates.

A follower accepts the leader's appends, heartbeats and snapshots, forwards
proposals, reads and transfer requests to the leader, and campaigns when
told to (TIMEOUT_NOW). A candidate counts votes, and yields to any leader
of its term (§5.2).

PURE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raft.core.quorum import VoteResult
from raft.core.tracker import MembershipConfig
from raft.errors import ProposalDropped
from raft.types import NONE, Message, MsgType, ReadState, Role, Snapshot

if TYPE_CHECKING:
    from raft.core.replica import Raft

MT = MsgType


def step_candidate(r: Raft, m: Message) -> None:
    """Handle ``m`` as a candidate or pre-candidate."""
    kind = m.type
    if kind in (MT.PROP, MT.READ_INDEX):
        raise ProposalDropped("no leader: an election is in progress")
    if kind in (MT.APP, MT.HEARTBEAT, MT.SNAP):
        # A leader of our term exists (§5.2).
        r.become_follower(m.term, m.from_)
        step_follower(r, m)
        return
    expected = MT.PRE_VOTE_RESP if r.role == Role.PRE_CANDIDATE else MT.VOTE_RESP
    if kind != expected:
        return
    r.tracker.record_vote(m.from_, not m.reject)
    result = r.tracker.vote_result(r.tracker.votes)
    if result == VoteResult.WON:
        if r.role == Role.PRE_CANDIDATE:
            r.campaign(MT.VOTE)
        else:
            r.become_leader()
    elif result == VoteResult.LOST:
        r.become_follower(r.term, NONE)


def step_follower(r: Raft, m: Message) -> None:
    """Handle ``m`` as a follower."""
    kind = m.type
    if kind == MT.PROP:
        if r.lead == NONE:
            raise ProposalDropped("no leader known")
        r.send(Message(MT.PROP, to=r.lead, from_=r.id, entries=m.entries))
    elif kind == MT.APP:
        r.election_elapsed = 0
        r.lead = m.from_
        _handle_append(r, m)
    elif kind == MT.HEARTBEAT:
        r.election_elapsed = 0
        r.lead = m.from_
        r.log.commit_to(m.commit)
        r.send(Message(MT.HEARTBEAT_RESP, to=m.from_, from_=r.id, term=r.term, context=m.context))
    elif kind == MT.SNAP:
        r.election_elapsed = 0
        r.lead = m.from_
        _handle_snapshot(r, m)
    elif kind == MT.TRANSFER_LEADER:
        if r.lead != NONE:
            r.send(Message(MT.TRANSFER_LEADER, to=r.lead, from_=m.from_))
    elif kind == MT.TIMEOUT_NOW:
        # The leader asks us to take over now, skipping pre-vote.
        r.hup(transfer=True)
    elif kind == MT.READ_INDEX:
        if r.lead == NONE:
            raise ProposalDropped("no leader known to confirm the read")
        r.send(Message(MT.READ_INDEX, to=r.lead, from_=m.from_ or r.id, context=m.context))
    elif kind == MT.READ_INDEX_RESP:
        r.read_states.append(ReadState(m.index, m.context))


def _handle_append(r: Raft, m: Message) -> None:
    log = r.log
    if m.index < log.committed:
        r.send(Message(MT.APP_RESP, to=m.from_, from_=r.id, term=r.term, index=log.committed))
        return
    last_new = log.maybe_append(m.index, m.log_term, m.commit, m.entries)
    if last_new is not None:
        r.send(Message(MT.APP_RESP, to=m.from_, from_=r.id, term=r.term, index=last_new))
        return
    # Reject with a hint: the last index at or before m.index whose term
    # is <= m.log_term, so the leader can skip a whole conflicting term.
    hint_index, hint_term = log.find_conflict_by_term(min(m.index, log.last_index()), m.log_term)
    r.send(
        Message(
            MT.APP_RESP,
            to=m.from_,
            from_=r.id,
            term=r.term,
            index=m.index,
            reject=True,
            reject_hint=hint_index,
            log_term=hint_term,
        )
    )


def _handle_snapshot(r: Raft, m: Message) -> None:
    snapshot = m.snapshot
    if snapshot is not None and _restore(r, snapshot):
        index = r.log.last_index()
    else:
        index = r.log.committed
    r.send(Message(MT.APP_RESP, to=m.from_, from_=r.id, term=r.term, index=index))


def _restore(r: Raft, snapshot: Snapshot) -> bool:
    meta = snapshot.metadata
    if meta.index <= r.log.committed:
        return False
    conf = MembershipConfig.from_conf_state(meta.conf_state)
    if r.id not in conf.members():
        # A snapshot that does not include us cannot be ours to apply.
        return False
    if r.log.match_term(meta.index, meta.term):
        # We hold the snapshot's last entry: fast-forward the commit only.
        r.log.commit_to(meta.index)
        return False
    r.log.restore(snapshot)
    r.tracker.progress = {}
    r.switch_to_config(conf)
    return True
