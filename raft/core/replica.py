"""The Raft state machine of one replica: terms, roles, elections, replication.

``Raft.step`` first applies the term rules every role shares (Raft paper
§5.1: a higher term turns the replica into a follower, a lower one is
answered or ignored), then hands the message to the role's step function.
All outputs are appended to ``msgs``; nothing here does I/O.

The leader counts its own log as acknowledged as soon as it appends: that is
safe because the host persists a Ready's entries before it sends the
Ready's messages or applies its committed entries (see ``types.Ready``).

Appends are not sent when proposals arrive; the leader marks replication as
due and ``flush_appends`` (called when a Ready is built) sends each follower
one batched append, so a burst of proposals costs one message per follower.

PURE.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from raft.core import confchange, follower, leader
from raft.core.config import Config
from raft.core.log import RaftLog, payload_bytes
from raft.core.progress import Progress, ProgressState
from raft.core.quorum import VoteResult
from raft.core.read_only import ReadOnly
from raft.core.tracker import MembershipConfig, ProgressTracker
from raft.errors import LogCompacted, ProposalDropped, RaftError
from raft.types import (
    NONE,
    ConfChange,
    ConfChangeV2,
    ConfState,
    Entry,
    EntryType,
    HardState,
    LogReader,
    Message,
    MsgType,
    ReadState,
    Role,
)

CAMPAIGN_TRANSFER = b"CampaignTransfer"
"""Vote context of an election forced by a leader transfer (bypasses the lease)."""

MT = MsgType


def vote_response_type(vote_type: MsgType) -> MsgType:
    """The response type of a VOTE or PRE_VOTE request."""
    return MT.VOTE_RESP if vote_type == MT.VOTE else MT.PRE_VOTE_RESP


class Raft:
    """One replica's consensus state. Driven by RawNode; see raft.core.node for the API."""

    def __init__(self, config: Config, storage: LogReader, rand_int: Callable[[int], int]) -> None:
        config.validate()
        self.id = config.id
        self.config = config
        self._rand_int = rand_int
        self.log = RaftLog(storage)
        hard_state, conf_state = storage.initial_state()
        self.term = 0
        self.vote = NONE
        self.lead = NONE
        self.role = Role.FOLLOWER
        self.is_learner = False
        self.msgs: list[Message] = []
        self.read_states: list[ReadState] = []
        self.tracker = ProgressTracker(config.max_inflight_msgs, config.max_inflight_bytes)
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_timeout = config.election_tick
        self.lead_transferee = NONE
        # Voters that a configuration this replica applied took out (removed or
        # demoted), unless a later one took them back; see _counts_as_voter.
        self.removed_voters: set[int] = set()
        self.pending_conf_index = 0
        self.uncommitted_bytes = 0
        self.read_only = ReadOnly()
        # READ_INDEX requests that arrived before the leader committed an
        # entry of its term (its commit index is not yet known to be current).
        self.pending_read_index: list[Message] = []
        # A leader's appends are due (see the module docstring). Only a leader
        # sets it, and every role change clears it.
        self.appends_due = False
        # See Config.data_lost: no vote granted, no campaign, until lifted.
        self.data_lost = config.data_lost
        self.switch_to_config(MembershipConfig.from_conf_state(conf_state))
        if not hard_state.is_empty():
            self._load_hard_state(hard_state)
        if config.applied > 0:
            self.log.applied_to(config.applied)
        self.become_follower(self.term, NONE)

    def _load_hard_state(self, hard_state: HardState) -> None:
        last = self.log.last_index()
        if hard_state.commit < self.log.committed or hard_state.commit > last:
            raise RaftError(
                f"persisted commit {hard_state.commit} is outside [{self.log.committed}, {last}]"
            )
        self.log.committed = hard_state.commit
        self.term = hard_state.term
        self.vote = hard_state.vote

    # -- observed state --------------------------------------------------------

    def hard_state(self) -> HardState:
        """What must be persisted before sending this replica's messages."""
        return HardState(self.term, self.vote, self.log.committed)

    def promotable(self) -> bool:
        """True if this replica may campaign (a voter with no snapshot pending, whose
        node did not lose its data: Config.data_lost)."""
        return (
            self.id in self.tracker.progress
            and not self.is_learner
            and self.log.unstable.snapshot is None
            and not self.data_lost
        )

    # -- sending ---------------------------------------------------------------

    def send(self, message: Message) -> None:
        """Queue ``message`` for the next Ready."""
        self.msgs.append(message)

    def maybe_send_append(self, to: int, send_if_empty: bool = True) -> bool:
        """Send ``to`` the entries it lacks (or a snapshot); False if nothing was sent."""
        pr = self.tracker.progress[to]
        if pr.is_paused():
            return False
        log = self.log
        prev_index = pr.next - 1
        if pr.is_learner and pr.match == 0 and prev_index < log.snapshot().metadata.index:
            # A member that holds nothing yet starts from the latest snapshot, not
            # from entry 1: the log does not hold the group's initial membership
            # (it is bootstrapped beside it), so replaying it from the start
            # would apply membership changes to the wrong configuration.
            return self._maybe_send_snapshot(to, pr)
        try:
            prev_term = log.term(prev_index)
            if pr.can_send_entries():
                entries = log.entries(pr.next, self.config.max_size_per_msg_bytes)
            else:
                entries = []
        except LogCompacted:
            return self._maybe_send_snapshot(to, pr)
        if not entries and not send_if_empty:
            return False
        committed = log.committed
        self.send(
            Message(
                MT.APP,
                to=to,
                from_=self.id,
                term=self.term,
                log_term=prev_term,
                index=prev_index,
                entries=tuple(entries),
                commit=committed,
            )
        )
        if entries:
            pr.sent_entries(entries[-1].index, payload_bytes(entries))
        elif pr.state == ProgressState.REPLICATE:
            # An empty append through a full window: wait for its answer.
            pr.msg_app_flow_paused = pr.inflights.full()
        pr.sent_commit = committed
        return True

    def _maybe_send_snapshot(self, to: int, pr: Progress) -> bool:
        if not pr.recent_active:
            # Not heard from lately: do not ship a snapshot into the void.
            return False
        snapshot = self.log.snapshot()
        pr.become_snapshot(snapshot.metadata.index)
        self.send(Message(MT.SNAP, to=to, from_=self.id, term=self.term, snapshot=snapshot))
        return True

    def bcast_append(self) -> None:
        """Mark appends (with the current commit index) as due to every follower."""
        self.appends_due = True

    def flush_appends(self) -> None:
        """Send the due appends: entries a follower lacks, or news of the commit index
        (only with ``Config.eager_commit_news``)."""
        if not self.appends_due:
            return
        self.appends_due = False
        committed = self.log.committed
        news = self.config.eager_commit_news  # else commit news rides on what comes next
        for node_id, pr in self.tracker.progress.items():
            if node_id == self.id:
                continue
            if news and pr.sent_commit < committed:
                if self.maybe_send_append(node_id):
                    self.send_remaining_appends(node_id, pr)
            else:
                self.send_remaining_appends(node_id, pr)

    def send_remaining_appends(self, to: int, pr: Progress) -> None:
        """Send ``to`` (whose progress is ``pr``) the entries it lacks, up to its in-flight
        window, as ``maybe_send_append(to, send_if_empty=False)`` until it sends nothing.
        A follower sent up to the last entry is owed nothing (no entries, so no snapshot
        either): that common case costs no call."""
        last_index = self.log.last_index()
        while pr.next <= last_index and self.maybe_send_append(to, send_if_empty=False):
            pass

    def _send_heartbeat(self, to: int, context: bytes) -> None:
        pr = self.tracker.progress[to]
        commit = min(pr.match, self.log.committed)
        self.send(
            Message(
                MT.HEARTBEAT, to=to, from_=self.id, term=self.term, commit=commit, context=context
            )
        )
        pr.sent_commit = max(pr.sent_commit, commit)

    def bcast_heartbeat(self, context: bytes | None = None) -> None:
        """Heartbeat every follower; ``context`` confirms pending reads (default: newest)."""
        if context is None:
            context = self.read_only.last_pending_context()
        for node_id in self.tracker.progress:
            if node_id != self.id:
                self._send_heartbeat(node_id, context)

    # -- role transitions ------------------------------------------------------

    def _reset(self, term: int) -> None:
        if self.term != term:
            self.term = term
            self.vote = NONE
        self.lead = NONE
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_timeout = self.config.election_tick + self._rand_int(
            self.config.election_tick
        )
        self.lead_transferee = NONE
        self.tracker.reset_votes()
        last = self.log.last_index()
        tracker = self.tracker
        for node_id, old in list(tracker.progress.items()):
            pr = tracker.new_progress(last + 1, is_learner=old.is_learner)
            if node_id == self.id:
                pr.match = last
                pr.recent_active = True
            tracker.progress[node_id] = pr
        self.pending_conf_index = 0
        self.uncommitted_bytes = 0
        self.read_only = ReadOnly()
        self.pending_read_index = []
        self.appends_due = False

    def become_follower(self, term: int, lead: int) -> None:
        """Follow ``lead`` (NONE: unknown) in ``term``."""
        self._reset(term)
        self.lead = lead
        self.role = Role.FOLLOWER

    def become_candidate(self) -> None:
        """Start an election in the next term, voting for ourselves."""
        if self.role == Role.LEADER:
            raise RaftError("a leader cannot become a candidate")
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE

    def become_pre_candidate(self) -> None:
        """Poll for an election without raising the term (pre-vote)."""
        if self.role == Role.LEADER:
            raise RaftError("a leader cannot become a pre-candidate")
        self.tracker.reset_votes()
        self.lead = NONE
        self.role = Role.PRE_CANDIDATE

    def become_leader(self) -> None:
        """Lead this term: replicate, and append an empty entry to commit the term."""
        if self.role == Role.FOLLOWER:
            raise RaftError("a follower cannot become leader without an election")
        self._reset(self.term)
        self.lead = self.id
        self.role = Role.LEADER
        self.tracker.progress[self.id].become_replicate()
        # Conservatively, any configuration change in the log may be unapplied.
        self.pending_conf_index = self.log.last_index()
        self.append_entries([Entry(self.term, self.log.last_index() + 1)])
        self.bcast_append()

    # -- elections -------------------------------------------------------------

    def hup(self, transfer: bool = False) -> None:
        """Start an election (pre-vote first unless ``transfer`` forces a real one)."""
        if self.role == Role.LEADER or not self.promotable():
            return
        if self._has_unapplied_conf_changes():
            return
        if transfer or not self.config.pre_vote:
            self.campaign(MT.VOTE, transfer)
        else:
            self.campaign(MT.PRE_VOTE)

    def _has_unapplied_conf_changes(self) -> bool:
        log = self.log
        if log.applied >= log.committed:
            return False
        lo = log.applied + 1
        while lo <= log.committed:
            page = log.slice(lo, log.committed + 1, self.config.max_committed_size_per_ready_bytes)
            for entry in page:
                if entry.type != EntryType.NORMAL:
                    return True
            lo = page[-1].index + 1
        return False

    def campaign(self, vote_type: MsgType, transfer: bool = False) -> None:
        """Ask every voter for a (pre-)vote; a lone voter wins at once."""
        if vote_type == MT.PRE_VOTE:
            self.become_pre_candidate()
            term = self.term + 1
        else:
            self.become_candidate()
            term = self.term
        self.tracker.record_vote(self.id, True)
        if self.tracker.vote_result(self.tracker.votes) == VoteResult.WON:
            if vote_type == MT.PRE_VOTE:
                self.campaign(MT.VOTE)
            else:
                self.become_leader()
            return
        last_index = self.log.last_index()
        last_term = self.log.last_term()
        context = CAMPAIGN_TRANSFER if transfer else b""
        for node_id in self.tracker.voter_ids():
            if node_id == self.id:
                continue
            self.send(
                Message(
                    vote_type,
                    to=node_id,
                    from_=self.id,
                    term=term,
                    log_term=last_term,
                    index=last_index,
                    context=context,
                )
            )

    # -- ticks -----------------------------------------------------------------

    def tick(self) -> None:
        """Advance logical time by one tick."""
        if self.role == Role.LEADER:
            self._tick_heartbeat()
        else:
            self._tick_election()

    def _tick_election(self) -> None:
        self.election_elapsed += 1
        if self.promotable() and self.election_elapsed >= self.randomized_election_timeout:
            self.election_elapsed = 0
            self.step(Message(MT.HUP, from_=self.id))

    def _tick_heartbeat(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.config.election_tick:
            self.election_elapsed = 0
            if self.config.check_quorum:
                self.step(Message(MT.CHECK_QUORUM, from_=self.id))
            if self.role == Role.LEADER and self.lead_transferee != NONE:
                # The transferee did not take over within an election timeout.
                self.lead_transferee = NONE
        if self.role != Role.LEADER:
            return
        if self.heartbeat_elapsed >= self.config.heartbeat_tick:
            self.heartbeat_elapsed = 0
            self.step(Message(MT.BEAT, from_=self.id))

    # -- step: the term rules, then the role -------------------------------------

    def step(self, m: Message) -> None:
        """Process one message (from a peer or local); outputs go to ``msgs``.

        Raises ProposalDropped when a local proposal cannot be appended.
        """
        if m.term == 0:
            pass  # local message
        elif m.term > self.term:
            if m.type in (MT.VOTE, MT.PRE_VOTE):
                force = m.context == CAMPAIGN_TRANSFER
                in_lease = (
                    self.config.check_quorum
                    and self.lead != NONE
                    and self.election_elapsed < self.config.election_tick
                )
                if not force and in_lease:
                    # A leader was heard from within the election timeout:
                    # ignore the disruptive candidate (leader lease, §6 of the thesis).
                    return
            if m.type == MT.PRE_VOTE:
                pass  # a pre-vote never changes our term
            elif m.type == MT.PRE_VOTE_RESP and not m.reject:
                pass  # the pre-candidate takes the term when it wins
            elif m.type in (MT.APP, MT.HEARTBEAT, MT.SNAP):
                self.become_follower(m.term, m.from_)
            else:
                self.become_follower(m.term, NONE)
        elif m.term < self.term:
            if (self.config.check_quorum or self.config.pre_vote) and m.type in (
                MT.HEARTBEAT,
                MT.APP,
            ):
                # A stale leader (e.g. after a partition healed) learns the
                # newer term from this response and steps down.
                self.send(Message(MT.APP_RESP, to=m.from_, from_=self.id, term=self.term))
            elif m.type == MT.PRE_VOTE:
                self.send(
                    Message(
                        MT.PRE_VOTE_RESP, to=m.from_, from_=self.id, term=self.term, reject=True
                    )
                )
            return

        kind = m.type
        if kind == MT.HUP:
            self.hup()
        elif kind in (MT.VOTE, MT.PRE_VOTE):
            self._step_vote_request(m)
        elif self.role == Role.LEADER:
            leader.step_leader(self, m)
        elif self.role == Role.FOLLOWER:
            follower.step_follower(self, m)
        else:
            follower.step_candidate(self, m)

    def _step_vote_request(self, m: Message) -> None:
        can_vote = (
            self.vote == m.from_
            or (self.vote == NONE and self.lead == NONE)
            or (m.type == MT.PRE_VOTE and m.term > self.term)
        )
        response = vote_response_type(m.type)
        if (
            can_vote
            and not self.data_lost
            and self._counts_as_voter(m.from_)
            and self.log.is_up_to_date(m.index, m.log_term)
        ):
            # A pre-vote is answered in the asker's term so that it counts it.
            self.send(Message(response, to=m.from_, from_=self.id, term=m.term))
            if m.type == MT.VOTE:
                self.election_elapsed = 0
                self.vote = m.from_
        else:
            self.send(Message(response, to=m.from_, from_=self.id, term=self.term, reject=True))

    def lift_data_lost(self) -> None:
        """Vote and campaign again (see Config.data_lost). A replica that knows its
        term's leader records a vote for it: the vote it may have cast in this term
        before the loss is forgotten, so it must not grant another one."""
        self.data_lost = False
        if self.vote == NONE and self.lead != NONE:
            self.vote = self.lead

    def _counts_as_voter(self, node_id: int) -> bool:
        """Whether a vote for ``node_id`` may count: no configuration this replica
        applied took it out of the voters.

        A configuration takes effect when applied, so a voter removed by a
        change it never applied (it crashed before learning that the change
        committed) may still campaign in its old configuration. A replica that
        applied the removal must not help elect it. A candidate merely unknown
        here (added by a change this replica has not applied yet) keeps its vote:
        refusing it could leave a group that lost its leader mid-change without
        anyone able to win. Kept in memory only: after a restart, removals
        before the restored snapshot are forgotten and their voters get votes
        again, as before this rule.
        """
        return node_id not in self.removed_voters

    def append_entries(self, entries: list[Entry]) -> None:
        """Append stamped entries to the leader's log and count them as its own ack.

        Raises ProposalDropped when the uncommitted budget is exhausted.
        """
        size = payload_bytes(entries)
        limit = self.config.max_uncommitted_entries_bytes
        pending = self.uncommitted_bytes
        if limit and pending > 0 and size > 0 and pending + size > limit:
            raise ProposalDropped(
                f"{self.uncommitted_bytes} uncommitted bytes; the limit is {limit}"
            )
        self.uncommitted_bytes += size
        last = self.log.append(entries)
        self.tracker.progress[self.id].maybe_update(last)
        self.maybe_commit()

    def reduce_uncommitted_bytes(self, size: int) -> None:
        """Committed entries of ``size`` data bytes left the uncommitted budget."""
        self.uncommitted_bytes = max(0, self.uncommitted_bytes - size)

    def maybe_commit(self) -> bool:
        """Advance the commit index to what a quorum holds, if of this term (§5.4.2)."""
        if self.log.maybe_commit(self.tracker.committed(), self.term):
            self.release_pending_reads()
            self.bcast_append()
            return True
        return False

    def confirm_read(self, m: Message) -> None:
        """Queue the read ``m`` at the commit index and start its heartbeat round."""
        self.read_only.add_request(self.log.committed, m.context, m.from_)
        self.read_only.recv_ack(self.id, m.context)
        self.bcast_heartbeat(m.context)

    def release_pending_reads(self) -> None:
        """Confirm the reads held until the first commit of this term."""
        if not self.pending_read_index:
            return
        pending = self.pending_read_index
        self.pending_read_index = []
        for m in pending:
            self.confirm_read(m)

    def answer_read(self, from_: int, context: bytes, index: int) -> None:
        """Release a confirmed read: locally as a ReadState, else to the asking peer."""
        if from_ in (NONE, self.id):
            self.read_states.append(ReadState(index, context))
        else:
            self.send(
                Message(
                    MT.READ_INDEX_RESP,
                    to=from_,
                    from_=self.id,
                    term=self.term,
                    index=index,
                    context=context,
                )
            )

    # -- membership --------------------------------------------------------------

    def switch_to_config(self, config: MembershipConfig) -> ConfState:
        """Adopt ``config``: add and drop progress, and act on our own change of role."""
        tracker = self.tracker
        before = tracker.config
        voters = config.voters | config.voters_outgoing
        self.removed_voters |= (before.voters | before.voters_outgoing) - voters
        self.removed_voters -= voters
        tracker.config = config
        members = config.members()
        next_index = self.log.last_index() + 1
        for node_id in list(tracker.progress):
            if node_id not in members:
                del tracker.progress[node_id]
        for node_id in members:
            is_learner = node_id in config.learners
            pr = tracker.progress.get(node_id)
            if pr is None:
                pr = tracker.new_progress(next_index, is_learner=is_learner)
                # A new member counts as active until the next quorum check.
                pr.recent_active = True
                tracker.progress[node_id] = pr
            else:
                pr.is_learner = is_learner
        own = tracker.progress.get(self.id)
        self.is_learner = own is not None and own.is_learner
        if self.role == Role.LEADER:
            if own is None or self.is_learner:
                # Removed or demoted: stop leading; the voters elect a new leader.
                self.become_follower(self.term, NONE)
            else:
                if self.lead_transferee != NONE and not config.is_voter(self.lead_transferee):
                    self.lead_transferee = NONE
                if not self.maybe_commit():
                    self.bcast_append()
        return config.to_conf_state()

    def apply_conf_change(self, change: ConfChange | ConfChangeV2) -> ConfState:
        """Apply a committed membership change; returns the new membership."""
        config = self.tracker.config
        if isinstance(change, ConfChangeV2):
            return self.switch_to_config(confchange.apply_change_v2(config, change))
        return self.switch_to_config(confchange.apply_change(config, change))

    def maybe_auto_leave_joint(self) -> None:
        """As leader, propose leaving an auto-leave joint configuration once it is applied."""
        if (
            self.role == Role.LEADER
            and self.tracker.config.auto_leave
            and self.log.applied >= self.pending_conf_index
            and self.lead_transferee == NONE
        ):
            data = confchange.encode_conf_change_v2(ConfChangeV2())
            # Over the uncommitted budget, the proposal is dropped; the next advance retries.
            with contextlib.suppress(ProposalDropped):
                leader.propose_entries(self, [Entry(0, 0, EntryType.CONF_CHANGE_V2, data)])
