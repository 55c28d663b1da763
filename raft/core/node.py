"""RawNode: the sans-IO API of one Raft replica (etcd-io/raft's RawNode).

The host drives it::

    node = RawNode(Config(id=1), log, rng.randrange)
    every tick:           node.tick()
    message from a peer:  node.step(message)
    client write:         node.propose(data)
    when has_ready():     rd = node.ready()
                          persist rd.hard_state / rd.entries / rd.snapshot
                          send rd.messages, apply rd.committed_entries
                          node.advance(rd)

See ``types.Ready`` for the order of the host's duties. The host may call
``step``/``tick``/``propose`` between ``ready()`` and ``advance(rd)`` (while
it persists), and may take a second Ready before advancing the first; it
must advance Readys in the order it took them.

Not thread-safe: one owner calls every method.

PURE.
"""

from __future__ import annotations

from collections.abc import Callable

from raft.core import leader
from raft.core.confchange import encode_conf_change, encode_conf_change_v2
from raft.core.config import Config
from raft.core.log import payload_bytes
from raft.core.progress import ProgressState
from raft.core.replica import Raft
from raft.errors import BadMessage, ProposalDropped
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
    ProgressStatus,
    Ready,
    Role,
    SoftState,
    Status,
)

__all__ = ["Config", "RawNode"]

MT = MsgType

_LOCAL_ONLY = frozenset({MT.HUP, MT.BEAT, MT.CHECK_QUORUM, MT.UNREACHABLE, MT.SNAP_STATUS})
_RESPONSES = frozenset({MT.APP_RESP, MT.VOTE_RESP, MT.PRE_VOTE_RESP, MT.HEARTBEAT_RESP})
_FORWARDABLE = frozenset({MT.PROP, MT.READ_INDEX})
_STATE_NAMES = {
    ProgressState.PROBE: "probe",
    ProgressState.REPLICATE: "replicate",
    ProgressState.SNAPSHOT: "snapshot",
}


class RawNode:
    """One replica of one Raft group, driven by its host.

    ``rand_int(n)`` returns an int in [0, n): it randomizes election
    timeouts (pass e.g. ``random.Random(seed).randrange``).
    """

    def __init__(self, config: Config, log: LogReader, rand_int: Callable[[int], int]) -> None:
        self.raft = Raft(config, log, rand_int)
        self._prev_soft = SoftState(self.raft.lead, self.raft.role)
        self._prev_hard = self.raft.hard_state()

    # -- inputs ------------------------------------------------------------------

    def tick(self) -> None:
        """Advance logical time by one tick (elections, heartbeats, quorum checks)."""
        self.raft.tick()

    def campaign(self) -> None:
        """Start an election now (with pre-vote when configured)."""
        self.raft.step(Message(MT.HUP, from_=self.raft.id))

    def step(self, message: Message) -> None:
        """Process a message from a peer.

        Raises BadMessage for local-only types. Responses from non-members
        are ignored; a proposal or read forwarded by a peer that cannot be
        served here is dropped (the peer's client retries).
        """
        if message.type in _LOCAL_ONLY:
            raise BadMessage(
                f"{message.type.name} is local and cannot come from peer {message.from_}"
            )
        raft = self.raft
        if message.type in _RESPONSES and message.from_ not in raft.tracker.progress:
            return
        if message.type in _FORWARDABLE:
            try:
                raft.step(message)
            except ProposalDropped:
                return
            return
        raft.step(message)

    def propose(self, data: bytes) -> None:
        """Propose one NORMAL entry; raises ProposalDropped if it cannot be appended."""
        self.propose_batch((data,))

    def propose_batch(self, payloads: list[bytes] | tuple[bytes, ...]) -> None:
        """Propose several NORMAL entries at once (one message to the leader)."""
        if not payloads:
            return
        raft = self.raft
        if raft.role == Role.LEADER:
            leader.propose_payloads(raft, payloads)
            return
        raft.step(
            Message(
                MT.PROP,
                from_=raft.id,
                entries=tuple(Entry(0, 0, EntryType.NORMAL, data) for data in payloads),
            )
        )

    def propose_conf_change(self, change: ConfChange | ConfChangeV2) -> None:
        """Propose a membership change; apply it with apply_conf_change once committed.

        A ConfChangeV2 with several changes goes through joint consensus; an
        empty one leaves a joint configuration. A leader appends an empty
        entry instead when a change is still unapplied or does not fit the
        configuration (one change at a time; leave a joint configuration
        before changing again); raises ProposalDropped like propose(), and
        InvalidConfChange (nothing appended) when this leader can tell the
        change can never apply (e.g. it removes the last voter).
        """
        raft = self.raft
        if raft.role == Role.LEADER and raft.pending_conf_index <= raft.log.applied:
            # Refuse what can never apply here, before anything is appended.
            leader.check_conf_change(raft, change)
        if isinstance(change, ConfChangeV2):
            entry = Entry(0, 0, EntryType.CONF_CHANGE_V2, encode_conf_change_v2(change))
        else:
            entry = Entry(0, 0, EntryType.CONF_CHANGE, encode_conf_change(change))
        self.raft.step(Message(MT.PROP, from_=self.raft.id, entries=(entry,)))

    def apply_conf_change(self, change: ConfChange | ConfChangeV2) -> ConfState:
        """Apply a committed membership change; returns the membership to persist.

        ``raft.core.confchange.decode_entry(entry)`` turns a committed CONF_CHANGE
        or CONF_CHANGE_V2 entry into the change to pass here.
        """
        return self.raft.apply_conf_change(change)

    def read_index(self, context: bytes) -> None:
        """Ask for a linearizable read; a ReadState with ``context`` comes in a Ready.

        Raises ProposalDropped when there is no leader to confirm it, and
        BadMessage for an empty context. The context identifies the read:
        use a unique value per request.
        """
        if not context:
            raise BadMessage("a read needs a non-empty context to identify it")
        self.raft.step(Message(MT.READ_INDEX, context=context))

    def lift_data_lost(self) -> None:
        """This replica may vote and campaign again (``Config.data_lost``); the vote it
        records for its term's leader is persisted with the next Ready."""
        self.raft.lift_data_lost()

    @property
    def data_lost(self) -> bool:
        """Whether this replica still refuses to vote and to campaign (Config.data_lost)."""
        return self.raft.data_lost

    def transfer_leader(self, to: int) -> None:
        """Ask the leader to hand leadership to ``to`` (forwarded from a follower)."""
        self.raft.step(Message(MT.TRANSFER_LEADER, from_=to))

    def report_unreachable(self, node_id: int) -> None:
        """The host failed to send to ``node_id``: stop streaming to it, probe."""
        self.raft.step(Message(MT.UNREACHABLE, from_=node_id))

    def report_snapshot(self, node_id: int, ok: bool) -> None:
        """The host finished (``ok``) or failed sending a SNAP to ``node_id``."""
        self.raft.step(Message(MT.SNAP_STATUS, from_=node_id, reject=not ok))

    # -- outputs -----------------------------------------------------------------

    def has_ready(self) -> bool:
        """True if ready() would return work for the host."""
        raft = self.raft
        log = raft.log
        unstable = log.unstable
        soft = self._prev_soft
        hard = self._prev_hard
        return bool(
            raft.msgs
            or raft.read_states
            or raft.appends_due
            or raft.lead != soft.lead
            or raft.role != soft.role
            or raft.term != hard.term
            or raft.vote != hard.vote
            or log.committed != hard.commit
            or unstable.offset_in_progress < unstable.offset + len(unstable.entries)
            or (unstable.snapshot is not None and not unstable.snapshot_in_progress)
            or log.has_next_committed_entries()
        )

    def ready(self) -> Ready:
        """Take the pending work; the host must then do it and call advance(ready)."""
        raft = self.raft
        raft.flush_appends()
        log = raft.log
        unstable = log.unstable
        # Everything handed out is in progress with the host from here on.
        soft_out = None
        prev_soft = self._prev_soft
        if raft.lead != prev_soft.lead or raft.role != prev_soft.role:
            soft_out = self._prev_soft = SoftState(raft.lead, raft.role)
        hard_out = None
        must_sync = False
        prev_hard = self._prev_hard
        if (
            raft.term != prev_hard.term
            or raft.vote != prev_hard.vote
            or log.committed != prev_hard.commit
        ):
            # Term and vote must be durable before any message that relies on them.
            must_sync = raft.term != prev_hard.term or raft.vote != prev_hard.vote
            hard_out = self._prev_hard = HardState(raft.term, raft.vote, log.committed)
        entries = unstable.next_entries()
        snapshot = unstable.next_snapshot()
        committed = log.next_committed_entries(raft.config.max_committed_size_per_ready_bytes)
        must_sync = must_sync or bool(entries) or snapshot is not None
        messages = raft.msgs
        raft.msgs = []
        read_states = raft.read_states
        raft.read_states = []
        unstable.accept_in_progress()
        if committed:
            log.accept_applying(committed[-1].index)
            if raft.role == Role.LEADER:
                raft.reduce_uncommitted_bytes(payload_bytes(committed))
        if snapshot is not None:
            log.accept_applying(snapshot.metadata.index)
        return Ready(
            soft_state=soft_out,
            hard_state=hard_out,
            entries=entries,
            snapshot=snapshot,
            committed_entries=committed,
            messages=messages,
            read_states=read_states,
            must_sync=must_sync,
        )

    def advance(self, ready: Ready) -> None:
        """The host persisted, sent and applied ``ready``."""
        log = self.raft.log
        if ready.snapshot is not None:
            log.stable_snapshot_to(ready.snapshot.metadata.index)
            log.applied_to(max(log.applied, ready.snapshot.metadata.index))
        if ready.entries:
            last = ready.entries[-1]
            log.stable_to(last.index, last.term)
        if ready.committed_entries:
            log.applied_to(max(log.applied, ready.committed_entries[-1].index))
        self.raft.maybe_auto_leave_joint()

    # -- observing -----------------------------------------------------------------

    def status(self) -> Status:
        """A snapshot of this replica's state (progress only on the leader)."""
        raft = self.raft
        progress: dict[int, ProgressStatus] = {}
        if raft.role == Role.LEADER:
            for node_id, pr in raft.tracker.progress.items():
                progress[node_id] = ProgressStatus(
                    match=pr.match,
                    next=pr.next,
                    state=_STATE_NAMES[pr.state],
                    recent_active=pr.recent_active,
                    paused=pr.is_paused(),
                    is_learner=pr.is_learner,
                    pending_snapshot=pr.pending_snapshot,
                    inflight=pr.inflights.count(),
                )
        return Status(
            id=raft.id,
            term=raft.term,
            vote=raft.vote,
            lead=raft.lead,
            role=raft.role,
            commit=raft.log.committed,
            applied=raft.log.applied,
            last_index=raft.log.last_index(),
            lead_transferee=raft.lead_transferee,
            conf_state=raft.tracker.config.to_conf_state(),
            progress=progress,
        )

    def conf_state(self) -> ConfState:
        """This replica's current membership, as :meth:`status` reports it, without the
        rest of the status (hosts poll it for every group)."""
        return self.raft.tracker.config.to_conf_state()

    def quiesce_point(self) -> tuple[int, int] | None:
        """(term, last index) when this replica leads and its whole log is committed,
        applied, matched by every peer it tracks and known committed to each of them
        (sent in an append or heartbeat); None otherwise.

        What a host checks before quiescing an idle group: the same answer as
        reading :meth:`status`, without building its progress map and conf state.
        """
        raft = self.raft
        log = raft.log
        last = log.last_index()
        if raft.role != Role.LEADER or log.committed != last or log.applied != last:
            return None
        me = raft.id
        for node_id, pr in raft.tracker.progress.items():
            if node_id != me and (pr.match != last or pr.sent_commit < last):
                return None
        return raft.term, last

    def hard_state(self) -> HardState:
        """The current hard state (persisted or about to be)."""
        return self.raft.hard_state()

    @property
    def id(self) -> int:
        """This replica's node id."""
        return self.raft.id

    @property
    def lead(self) -> int:
        """The known leader, or NONE."""
        return self.raft.lead

    @property
    def role(self) -> Role:
        """This replica's role."""
        return self.raft.role

    def is_leader(self) -> bool:
        """True if this replica leads its group."""
        return self.raft.role == Role.LEADER and self.raft.lead != NONE
