"""The leader's step function: proposals, replication feedback, reads, transfers.

Each function takes the replica's ``Raft`` state; ``Raft.step`` calls
``step_leader`` after the term rules. Replication follows the Progress
states of raft.core.progress; commit follows §5.3/§5.4.2 (only entries of the
leader's term are committed by counting).

PURE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raft.core import confchange
from raft.core.progress import Progress, ProgressState
from raft.core.quorum import VoteResult
from raft.errors import InvalidConfChange, ProposalDropped
from raft.types import NONE, ConfChange, ConfChangeV2, Entry, EntryType, Message, MsgType

if TYPE_CHECKING:
    from raft.core.replica import Raft

MT = MsgType


def step_leader(r: Raft, m: Message) -> None:
    """Handle ``m`` as the leader (the term rules have already been applied)."""
    kind = m.type
    if kind == MT.BEAT:
        r.bcast_heartbeat()
        return
    if kind == MT.CHECK_QUORUM:
        if not r.tracker.quorum_active():
            r.become_follower(r.term, NONE)
        for node_id, member in r.tracker.progress.items():
            if node_id != r.id:
                member.recent_active = False
        return
    if kind == MT.PROP:
        propose_entries(r, m.entries)
        return
    if kind == MT.READ_INDEX:
        _read_index(r, m)
        return
    pr = r.tracker.progress.get(m.from_)
    if pr is None:
        return
    if kind == MT.APP_RESP:
        _append_response(r, m, pr)
    elif kind == MT.HEARTBEAT_RESP:
        _heartbeat_response(r, m, pr)
    elif kind == MT.SNAP_STATUS:
        if pr.state != ProgressState.SNAPSHOT:
            return
        if m.reject:
            pr.pending_snapshot = 0
        pr.become_probe()
        # Wait for a heartbeat response before probing again.
        pr.msg_app_flow_paused = True
    elif kind == MT.UNREACHABLE:
        if pr.state == ProgressState.REPLICATE:
            pr.become_probe()
    elif kind == MT.TRANSFER_LEADER:
        _transfer(r, m.from_, pr)


def propose_entries(r: Raft, entries: tuple[Entry, ...] | list[Entry]) -> None:
    """Append proposed entries (index and term are assigned here); leader only.

    Raises ProposalDropped while leadership is being transferred or when too
    many bytes are uncommitted. (A leader removed from the group steps down
    when it applies the change, so a leader is always a member.)
    """
    if r.lead_transferee != NONE:
        raise ProposalDropped(f"leadership is moving to {r.lead_transferee}")
    term = r.term
    index = r.log.last_index()
    stamped: list[Entry] = []
    pending_conf_index = r.pending_conf_index
    for entry in entries:
        index += 1
        kind = entry.type
        if kind != EntryType.NORMAL:
            if pending_conf_index > r.log.applied or not _conf_change_allowed(r, entry):
                # Keep the slot, drop the change (its proposer times out and retries).
                stamped.append(Entry(term, index))
                continue
            pending_conf_index = index
        stamped.append(Entry(term, index, kind, entry.data))
    r.append_entries(stamped)
    # Only once appended: a dropped proposal must not block the next change.
    r.pending_conf_index = pending_conf_index
    r.bcast_append()


def _conf_change_allowed(r: Raft, entry: Entry) -> bool:
    """True if the change would apply cleanly to the current configuration.

    Every change before it is applied (the caller checks that), and replicas
    apply changes in log order, so it will apply cleanly everywhere.
    """
    try:
        check_conf_change(r, confchange.decode_entry(entry))
    except InvalidConfChange:
        return False
    return True


def check_conf_change(r: Raft, change: ConfChange | ConfChangeV2) -> None:
    """Raise InvalidConfChange (naming why) unless ``change`` fits the configuration."""
    config = r.tracker.config
    if isinstance(change, ConfChangeV2):
        confchange.apply_change_v2(config, change)
    else:
        confchange.apply_change(config, change)


def propose_payloads(r: Raft, payloads: list[bytes] | tuple[bytes, ...]) -> None:
    """Append NORMAL entries holding ``payloads``; the leader's fast path.

    Raises ProposalDropped like ``propose_entries``.
    """
    if r.lead_transferee != NONE:
        raise ProposalDropped(f"leadership is moving to {r.lead_transferee}")
    term = r.term
    first = r.log.last_index() + 1
    normal = EntryType.NORMAL
    r.append_entries([Entry(term, first + i, normal, data) for i, data in enumerate(payloads)])
    r.appends_due = True


def _append_response(r: Raft, m: Message, pr: Progress) -> None:
    pr.recent_active = True
    if m.reject:
        next_probe = m.reject_hint
        if m.log_term > 0:
            # Skip every entry of ours whose term exceeds the follower's
            # term at the hint: none of them can match.
            next_probe = r.log.find_conflict_by_term(m.reject_hint, m.log_term)[0]
        if pr.maybe_decr_to(m.index, next_probe):
            if pr.state == ProgressState.REPLICATE:
                pr.become_probe()
            r.maybe_send_append(m.from_)
        return
    was_paused = pr.is_paused()
    # A probe answered at the known match also confirms the follower's
    # log, unless the follower needs a snapshot (it ignored one it
    # cannot use; retrying at once would only resend it).
    probed = (
        pr.match == m.index
        and pr.state == ProgressState.PROBE
        and pr.match + 1 >= r.log.first_index()
    )
    if not (pr.maybe_update(m.index) or probed):
        return
    if pr.state == ProgressState.PROBE:
        pr.become_replicate()
    elif pr.state == ProgressState.SNAPSHOT:
        if pr.match + 1 >= r.log.first_index():
            pr.become_probe()
            pr.become_replicate()
    else:
        pr.inflights.free_le(m.index)
    if not r.maybe_commit() and was_paused:
        r.maybe_send_append(m.from_)
    r.send_remaining_appends(m.from_, pr)
    if m.from_ == r.lead_transferee and pr.match == r.log.last_index():
        _send_timeout_now(r, m.from_)


def _heartbeat_response(r: Raft, m: Message, pr: Progress) -> None:
    pr.recent_active = True
    pr.msg_app_flow_paused = False
    if pr.match < r.log.last_index() or pr.state == ProgressState.PROBE:
        r.maybe_send_append(m.from_)
    if not m.context:
        return
    acks = r.read_only.recv_ack(m.from_, m.context)
    if acks is None or r.tracker.vote_result(acks) != VoteResult.WON:
        return
    for request in r.read_only.advance(m.context):
        r.answer_read(request.from_, request.context, request.index)


def _read_index(r: Raft, m: Message) -> None:
    if r.tracker.is_singleton():
        r.answer_read(m.from_, m.context, r.log.committed)
        return
    if r.log.term_or_zero(r.log.committed) != r.term:
        # Our commit index may lag the previous leader's until an entry
        # of this term commits (§6.4 of the thesis).
        r.pending_read_index.append(m)
        return
    r.confirm_read(m)


def _transfer(r: Raft, transferee: int, pr: Progress) -> None:
    if pr.is_learner:
        return
    if r.lead_transferee != NONE:
        if r.lead_transferee == transferee:
            return
        r.lead_transferee = NONE
    if transferee == r.id:
        return
    # The transfer must finish within an election timeout.
    r.election_elapsed = 0
    r.lead_transferee = transferee
    if pr.match == r.log.last_index():
        _send_timeout_now(r, transferee)
    else:
        r.maybe_send_append(transferee)


def _send_timeout_now(r: Raft, to: int) -> None:
    r.send(Message(MT.TIMEOUT_NOW, to=to, from_=r.id, term=r.term))
