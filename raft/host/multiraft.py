"""The round logic of a node hosting many raft groups, with no I/O of its own.

A round, driven by :mod:`raft.host.driver` (asyncio) or synchronously by a test
or the simulation::

    rnd = host.collect()            # proposals in, Readys of every group with work out
    host.persist(rnd, writer)       # all entries + hard states encoded, ONE flush
    if rnd.must_sync: writer.sync() # ONE fdatasync for every group (done by the caller)
    for node, data in host.outgoing(rnd): transport.send(node, data)   # one batch per node
    outcomes = host.apply(rnd)      # state machines; proposals resolved (token, result, error)
    host.advance(rnd)

Between rounds the caller feeds ``tick(now_ms)``, ``receive(batch, now_ms)``
and ``propose(...)``; they may also arrive while a round is being persisted
(the core accepts steps between ready() and advance()).

Quiescing (after CockroachDB): a leader whose group has been idle for
``quiesce_after_ticks`` ticks, with every voter matched up to its last index
and everything applied, stops ticking the group and sends a QUIESCE notice;
a follower that is in step with the notice stops ticking too. Any message
but the notice, or a proposal, wakes a group. Quiesced groups send no
heartbeats, so liveness is per node: every received batch (the driver sends
an empty one each tick) marks its sender alive, and a quiesced follower
whose leader's node has been silent for ``liveness_timeout_ms`` wakes and
runs its election timer again.

PURE: time comes in as ``now_ms``; the log writer and state machines are
passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from raft.errors import ProposalDropped, ProposalTooLarge, RaftError, RaftNotLeader
from raft.host import wire
from raft.host.collaborators import (
    ConfChangeApplier,
    GroupNode,
    LogWriter,
    SnapshotRecorder,
    StateMachine,
)
from raft.host.compaction import (
    CompactionStep,
    finish_compaction,
    plan_compaction,
    snapshot_by_entries,
)
from raft.host.group_state import (
    HostedGroup,
    Outcome,
    PendingProposal,
    QueuedProposal,
    Round,
    outcome_of,
)
from raft.host.outgoing import encode_outgoing, needs_a_follower
from raft.types import (
    ConfChange,
    ConfChangeV2,
    ConfState,
    Entry,
    EntryType,
    MsgType,
    Ready,
    Snapshot,
    SnapshotMetadata,
)

_PERIODIC = frozenset({MsgType.HEARTBEAT, MsgType.HEARTBEAT_RESP})
_CONF_TYPES = frozenset({EntryType.CONF_CHANGE, EntryType.CONF_CHANGE_V2})


class MultiRaft:
    """All raft groups of one node and the pure half of the driver's round."""

    def __init__(
        self,
        node_id: int,
        *,
        quiesce_after_ticks: int = 20,
        liveness_timeout_ms: int = 1000,
        conf_change_applier: ConfChangeApplier | None = None,
        entry_bytes_max: int | None = None,
    ) -> None:
        """``conf_change_applier`` is required before any CONF_CHANGE entry commits.

        ``entry_bytes_max``: proposals of larger entries fail with
        ProposalTooLarge (the log store cannot hold them).
        """
        self.node_id = node_id
        self.entry_bytes_max = entry_bytes_max
        self.quiesce_after_ticks = quiesce_after_ticks
        self.liveness_timeout_ms = liveness_timeout_ms
        self._conf_change_applier = conf_change_applier
        self._groups: dict[int, HostedGroup] = {}
        self._dirty: set[int] = set()
        self._notices: dict[int, list[wire.QuiesceNotice]] = {}
        self._last_heard_ms: dict[int, int] = {}
        self._peer_nodes: list[int] = []
        self._read_seq = 0
        # Called with (group, index, membership) each time a replica applies a membership
        # (a change, or a snapshot's): hosts that follow their own re-admission read it.
        self.on_members: Callable[[int, int, ConfState], None] | None = None

    # ------------------------------------------------------------- groups
    def add_group(
        self, group_id: int, node: GroupNode, state_machine: StateMachine, peers: Sequence[int]
    ) -> None:
        """Host a replica of ``group_id`` whose members are ``peers`` (this node included)."""
        if group_id in self._groups:
            raise ValueError(f"group {group_id} is hosted already")
        others = tuple(sorted(p for p in peers if p != self.node_id))
        g = self._groups[group_id] = HostedGroup(group_id, node, state_machine, others)
        g.early_send = needs_a_follower(node.status().conf_state)
        self._peer_nodes = sorted(set(self._peer_nodes) | set(others))
        self._dirty.add(group_id)

    def remove_group(self, group_id: int) -> list[Outcome]:
        """Stop hosting ``group_id`` (no-op if not hosted); the Outcomes of its
        queued and pending proposals and reads, all failed with RaftNotLeader.

        Messages for it are dropped from now on (see :meth:`receive`). The
        caller removes it between rounds, never between collect and advance.
        """
        g = self._groups.pop(group_id, None)
        if g is None:
            return []
        self._dirty.discard(group_id)
        error = RaftNotLeader(f"group {group_id} is no longer hosted on node {self.node_id}")
        tokens = [p.token for p in g.proposals + g.conf_changes]
        tokens += [p.token for p in g.pending.values()]
        if g.applying is not None and g.applying.first not in g.pending:
            tokens.append(g.applying.token)
        tokens += list(g.reads_asked.values()) + [t for _, t in g.reads_confirmed]
        peers: set[int] = set()
        for other in self._groups.values():
            peers.update(other.peers)
        self._peer_nodes = sorted(peers)
        return [Outcome(token, error=error) for token in tokens]

    def group_ids(self) -> list[int]:
        """The hosted groups, sorted."""
        return sorted(self._groups)

    def node(self, group_id: int) -> GroupNode:
        """The raft replica of a hosted group."""
        return self._group(group_id).node

    def peer_nodes(self) -> list[int]:
        """Every other node that shares a group with this one."""
        return self._peer_nodes

    def is_quiesced(self, group_id: int) -> bool:
        """Whether the group is idle (not ticked)."""
        return self._group(group_id).quiesced

    def leader_of(self, group_id: int) -> int:
        """The leader this replica knows, or 0."""
        return self._group(group_id).node.lead

    def _group(self, group_id: int) -> HostedGroup:
        group = self._groups.get(group_id)
        if group is None:
            raise RaftNotLeader(f"group {group_id} is not hosted on node {self.node_id}")
        return group

    def _wake(self, g: HostedGroup) -> None:
        g.quiesced = False
        g.idle_ticks = 0

    # ------------------------------------------------------------- inputs
    def tick(self, now_ms: int) -> None:
        """One tick for every awake group; quiesce idle ones; wake orphaned followers."""
        stale = {
            p
            for p in self.peer_nodes()
            if now_ms - self._last_heard_ms.setdefault(p, now_ms) > self.liveness_timeout_ms
        }
        dirty = self._dirty
        quiesce_after = self.quiesce_after_ticks
        for g in self._groups.values():
            if g.quiesced:
                if stale and g.node.lead in stale:
                    self._wake(g)
                else:
                    continue
            node = g.node
            node.tick()
            g.idle_ticks += 1
            if node.has_ready():
                # Most ticks change nothing a Ready reports (a follower's
                # election clock): such a group stays out of the next collect.
                dirty.add(g.group_id)
            if g.idle_ticks >= quiesce_after:
                self._maybe_quiesce_leader(g)

    def _maybe_quiesce_leader(self, g: HostedGroup) -> None:
        node = g.node
        if not node.is_leader() or g.proposals or g.pending or g.applying is not None:
            g.idle_ticks = 0
            return
        point = node.quiesce_point()  # cheap: no Status built (checked every idle tick)
        if point is None:
            g.idle_ticks = 0
            return
        term, last = point
        g.quiesced = True
        notice = wire.QuiesceNotice(g.group_id, term, last, last)  # commit == last
        for peer in g.peers:
            self._notices.setdefault(peer, []).append(notice)

    def touch(self, group_id: int) -> None:
        """The host changed the group's node outside step/propose (e.g. named it leader):
        wake the group and collect it in the next round."""
        g = self._group(group_id)
        self._wake(g)
        self._dirty.add(group_id)

    def heard_from(self, node_id: int, now_ms: int) -> None:
        """Record that ``node_id`` is alive (a batch, even an empty one, arrived)."""
        self._last_heard_ms[node_id] = now_ms

    def receive(self, batch: wire.Batch, now_ms: int) -> None:
        """Step every message of a batch into its group; apply quiesce notices."""
        self.heard_from(batch.from_node, now_ms)
        groups = self._groups
        for group_id, message in batch.messages:
            g = groups.get(group_id)
            if g is None:
                continue  # not hosted here (yet, or any more): the sender retries
            if message.type not in _PERIODIC:
                # Heartbeats (and the answers to a quiescing leader's last one)
                # leave a quiesced group asleep; liveness covers a dead leader.
                self._wake(g)
            try:
                g.node.step(message)
            except RaftError:
                continue  # a message the core refuses changes nothing
            self._dirty.add(group_id)
        for notice in batch.quiesce:
            g = groups.get(notice.group_id)
            if g is None or g.node.lead != batch.from_node or g.proposals:
                continue
            status = g.node.status()
            if (
                status.term == notice.term
                and status.last_index == notice.last_index
                and status.commit == notice.commit
            ):
                g.quiesced = True

    def propose(self, group_id: int, data: bytes, token: object) -> None:
        """Queue a proposal for the next round; its Outcome carries ``token``."""
        g = self._group(group_id)
        self._check_size(group_id, (data,))
        self._wake(g)
        g.proposals.append(QueuedProposal([data], token, True))
        self._dirty.add(group_id)

    def propose_many(self, group_id: int, payloads: list[bytes], token: object) -> None:
        """Queue entries proposed together; one Outcome whose result is their results' list.

        They are appended consecutively; the Outcome fails if any was not committed.
        """
        g = self._group(group_id)
        self._check_size(group_id, payloads)
        self._wake(g)
        g.proposals.append(QueuedProposal(list(payloads), token, False))
        self._dirty.add(group_id)

    def _check_size(self, group_id: int, payloads: Sequence[bytes]) -> None:
        limit = self.entry_bytes_max
        if limit is None:
            return
        for data in payloads:
            if len(data) > limit:
                raise ProposalTooLarge(
                    f"group {group_id}: a {len(data)}-byte entry exceeds the "
                    f"{limit}-byte limit of one WAL segment"
                )

    def propose_conf_change(
        self, group_id: int, change: ConfChange | ConfChangeV2, token: object
    ) -> None:
        """Queue a membership change; its Outcome (result None) comes once it is applied here.

        It fails with ProposalDropped if the leader could not take it (e.g.
        another change is still in progress), InvalidConfChange if it can
        never apply, RaftNotLeader off the leader.
        """
        g = self._group(group_id)
        self._wake(g)
        g.conf_changes.append(QueuedProposal([], token, True, change))
        self._dirty.add(group_id)

    def set_truncate_floor(self, group_id: int, index: int | None) -> None:
        """Let compaction discard the group's entries up to ``index`` only (None: no limit).

        The hook for the state machine's host: e.g. the message store keeps
        the floor below the oldest message it still reads from the WAL.
        """
        self._group(group_id).truncate_floor = index

    def read_index(self, group_id: int, token: object) -> None:
        """Ask for a linearizable read of ``group_id`` on its leader; an Outcome
        with ``token`` and the read index as result comes once this replica has
        applied up to that index (the read may then be served from its state).

        Raises RaftNotLeader if this replica does not lead the group. A read whose
        confirmation is lost (leadership changes meanwhile) never ends: callers
        bound their wait.
        """
        g = self._group(group_id)
        if not g.node.is_leader():
            raise RaftNotLeader(f"node {self.node_id} does not lead group {group_id}", g.node.lead)
        self._wake(g)
        self._read_seq += 1
        context = self._read_seq.to_bytes(8, "big")
        g.reads_asked[context] = token
        g.node.read_index(context)
        self._dirty.add(group_id)

    def has_work(self) -> bool:
        """Whether collect() may return a non-empty round."""
        return bool(self._dirty) or bool(self._notices)

    # -------------------------------------------------------------- round
    def collect(self) -> Round:
        """Propose what is queued and take the Ready of every group with work."""
        groups: list[HostedGroup] = []
        readies: list[Ready] = []
        rejected: list[tuple[object, RaftError]] = []
        must_sync = False
        dirty = self._dirty
        self._dirty = set()
        for group_id in sorted(dirty):
            g = self._groups[group_id]
            node = g.node
            if g.conf_changes:
                self._propose_conf_changes(g, rejected)
            proposals = g.proposals
            payloads: list[bytes] = []
            if proposals:
                g.proposals = []
                if not node.is_leader():
                    error = RaftNotLeader(
                        f"node {self.node_id} does not lead group {group_id}", node.lead
                    )
                    rejected.extend((p.token, error) for p in proposals)
                    proposals = []
                else:
                    for p in proposals:
                        payloads += p.payloads
                    try:
                        node.propose_batch(payloads)
                    except ProposalDropped as exc:
                        rejected.extend((p.token, exc) for p in proposals)
                        proposals = []
            if not node.has_ready():
                if proposals:  # cannot happen: a proposal always makes work
                    raise AssertionError("proposals appended but no Ready")
                continue
            rd = node.ready()
            if proposals:
                self._track(g, rd, proposals, payloads)
            if rd.committed_entries or rd.entries:
                g.idle_ticks = 0
            groups.append(g)
            readies.append(rd)
            must_sync = must_sync or rd.must_sync
        notices = self._notices
        self._notices = {}
        return Round(groups, readies, must_sync, rejected, notices)

    def _propose_conf_changes(
        self, g: HostedGroup, rejected: list[tuple[object, RaftError]]
    ) -> None:
        changes, g.conf_changes = g.conf_changes, []
        node = g.node
        for p in changes:
            assert p.conf_change is not None
            if not node.is_leader():
                error = RaftNotLeader(
                    f"node {self.node_id} does not lead group {g.group_id}", node.lead
                )
                rejected.append((p.token, error))
                continue
            try:
                node.propose_conf_change(p.conf_change)
            except RaftError as exc:
                rejected.append((p.token, exc))
                continue
            status = node.status()
            index = status.last_index
            g.pending[index] = PendingProposal(
                index, index, status.term, p.token, True, conf_change=True
            )

    def _track(
        self, g: HostedGroup, rd: Ready, proposals: list[QueuedProposal], payloads: list[bytes]
    ) -> None:
        """Remember where each proposal's entries were appended, to resolve it on apply."""
        n = len(payloads)
        tail = rd.entries[-n:]
        if len(tail) == n and tail[-1].data is payloads[-1] and tail[0].data is payloads[0]:
            first, term = tail[0].index, tail[-1].term
        else:
            status = g.node.status()
            first, term = status.last_index - n + 1, status.term
        for p in proposals:
            last = first + len(p.payloads) - 1
            g.pending[first] = PendingProposal(first, last, term, p.token, p.single)
            first = last + 1

    def persist(self, rnd: Round, writer: LogWriter) -> None:
        """Encode every group's snapshot, entries and hard state, then flush once."""
        for g, rd in zip(rnd.groups, rnd.readies, strict=True):
            if rd.snapshot is not None:
                writer.install_snapshot(g.group_id, rd.snapshot)
            if rd.entries:
                writer.append(g.group_id, rd.entries)
            if rd.hard_state is not None:
                writer.set_hard_state(g.group_id, rd.hard_state)
        writer.flush()

    def outgoing(
        self, rnd: Round, batch_bytes_max: int = 4 << 20, part: str = "all"
    ) -> Iterator[tuple[int, bytes]]:
        """Encoded batches per destination node: its messages and notices.

        ``part``: "all", or "early" then "late" around the round's fdatasync
        (see :func:`raft.host.outgoing.encode_outgoing`).
        """
        return encode_outgoing(self.node_id, rnd, batch_bytes_max, part)

    def apply(self, rnd: Round, writer: LogWriter) -> list[Outcome]:
        """Apply snapshots and committed entries; return the proposals that ended."""
        outcomes = [Outcome(token, error=error) for token, error in rnd.rejected]
        for g, rd in zip(rnd.groups, rnd.readies, strict=True):
            if rd.snapshot is not None:
                g.state_machine.restore(rd.snapshot)
                self._note_members(g, rd.snapshot.metadata.conf_state, rd.snapshot.metadata.index)
                covered = rd.snapshot.metadata.index
                g.applied = g.snapshot_index = covered
                g.applied_term = rd.snapshot.metadata.term
                dropped = [p for p in g.pending.values() if p.first <= covered]
                if g.applying is not None:
                    dropped.append(g.applying)
                    g.applying = None
                for p in dropped:
                    g.pending.pop(p.first, None)
                    outcomes.append(
                        Outcome(p.token, error=ProposalDropped("replaced by a snapshot"))
                    )
            machine = g.state_machine
            for entry in rd.committed_entries:
                result: object = None
                if entry.type in _CONF_TYPES:
                    self._apply_conf_change(g, entry, writer)
                elif entry.data:
                    result = machine.apply(entry)
                g.applied = entry.index
                g.applied_term = entry.term
                waiting = g.applying
                if waiting is None:
                    if not g.pending:
                        continue
                    waiting = g.pending.pop(entry.index, None)
                    if waiting is None:
                        continue
                    g.applying = waiting
                if entry.term != waiting.term:
                    waiting.overwritten = True
                elif waiting.conf_change and entry.type not in _CONF_TYPES:
                    waiting.refused = True
                waiting.results.append(result)
                if entry.index == waiting.last:
                    g.applying = None
                    outcomes.append(outcome_of(waiting))
            for read in rd.read_states:
                token = g.reads_asked.pop(read.request_ctx, None)
                if token is not None:
                    g.reads_confirmed.append((read.index, token))
            if g.reads_confirmed:
                waiting_reads = []
                for index, token in g.reads_confirmed:
                    if index <= g.applied:
                        outcomes.append(Outcome(token, index))
                    else:
                        waiting_reads.append((index, token))
                g.reads_confirmed = waiting_reads
        return outcomes

    def _apply_conf_change(self, g: HostedGroup, entry: Entry, writer: LogWriter) -> None:
        """Apply a membership change, record it, and snapshot right at it.

        The snapshot is a host duty (sim seed 138): a leader whose log is
        compacted sends a joining member its latest snapshot, and one taken
        before the member was added does not name it, so the member would
        ignore it forever.
        """
        if self._conf_change_applier is None:
            raise AssertionError("a CONF_CHANGE committed but no applier is set")
        conf = self._conf_change_applier(g.node, entry)
        writer.set_conf_state(g.group_id, entry.index, conf)
        self._note_members(g, conf, entry.index)
        metadata = SnapshotMetadata(index=entry.index, term=entry.term, conf_state=conf)
        writer.save_local_snapshot(g.group_id, Snapshot(metadata, g.state_machine.snapshot_data()))
        g.snapshot_index = entry.index

    def _note_members(self, g: HostedGroup, conf: ConfState, index: int) -> None:
        """The group's peers are the members of ``conf`` (a change applied, or a
        snapshot installed at ``index``: a new member learns its peers from its first
        snapshot)."""
        members = set(conf.voters) | conf.learners | conf.voters_outgoing | conf.learners_next
        g.peers = tuple(sorted(members - {self.node_id}))
        g.early_send = needs_a_follower(conf)
        self._peer_nodes = sorted(set(self._peer_nodes) | set(g.peers))
        if self.on_members is not None:
            self.on_members(g.group_id, index, conf)

    def plan_compaction(
        self, targets: Mapping[int, int], unpins: Callable[[int, int], bool] | None = None
    ) -> list[CompactionStep]:
        """Steps that compact each group toward ``targets`` (group -> index): see
        :func:`raft.host.compaction.plan_compaction`."""
        return plan_compaction(self._groups, targets, unpins)

    def finish_compaction(self, steps: Sequence[CompactionStep], writer: SnapshotRecorder) -> None:
        """Record the steps' snapshots (their files are durable) and compact."""
        finish_compaction(self._groups, steps, writer)

    def maybe_snapshot(
        self, rnd: Round, writer: LogWriter, every_entries: int, keep_entries: int
    ) -> None:
        """Snapshot the groups of ``rnd`` that applied ``every_entries`` since their
        last one, then compact (see :func:`raft.host.compaction.snapshot_by_entries`)."""
        snapshot_by_entries(rnd.groups, writer, every_entries, keep_entries)

    def set_applied(self, group_id: int, index: int) -> None:
        """Where a restarted group's state machine stands (its snapshot index)."""
        g = self._group(group_id)
        g.applied = g.snapshot_index = index

    def advance(self, rnd: Round) -> None:
        """Tell every node its Ready is done; groups with more work stay dirty."""
        for g, rd in zip(rnd.groups, rnd.readies, strict=True):
            g.node.advance(rd)
            if g.node.has_ready():
                self._dirty.add(g.group_id)

    def run_round(
        self, writer: LogWriter, sync: Callable[[], None]
    ) -> tuple[list[tuple[int, bytes]], list[Outcome]]:
        """A whole round, synchronously: for tests and the simulation."""
        rnd = self.collect()
        self.persist(rnd, writer)
        if rnd.must_sync:
            sync()
        sent = list(self.outgoing(rnd))
        outcomes = self.apply(rnd, writer)
        self.advance(rnd)
        return sent, outcomes
