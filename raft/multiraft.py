"""The round logic of a node hosting many raft groups, with no I/O of its own.

A round, driven by :mod:`raft.driver` (asyncio) or synchronously by a test
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

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from raft import wire
from raft.errors import NotLeader, ProposalDropped, ProposalTooLarge, RaftError
from raft.host_types import (
    ConfChangeApplier,
    GroupNode,
    LogWriter,
    SnapshotRecorder,
    StateMachine,
)
from raft.types import (
    ConfChange,
    ConfChangeV2,
    ConfState,
    Entry,
    EntryType,
    Message,
    MsgType,
    Ready,
    Snapshot,
    SnapshotMetadata,
)

_PERIODIC = frozenset({MsgType.HEARTBEAT, MsgType.HEARTBEAT_RESP})
_CONF_TYPES = frozenset({EntryType.CONF_CHANGE, EntryType.CONF_CHANGE_V2})
_EARLY = frozenset({MsgType.APP, MsgType.HEARTBEAT})


def needs_a_follower(conf: ConfState) -> bool:
    """Whether every configuration has two voters or more (joint: both halves)."""
    return len(conf.voters) >= 2 and (not conf.voters_outgoing or len(conf.voters_outgoing) >= 2)


def split_early(rd: Ready, early_send: bool) -> tuple[Sequence[Message], Sequence[Message]]:
    """A Ready's messages as (may go before its fsync, must wait for it).

    Early are the appends and heartbeats of a leader that led at its previous
    Ready already (so its term and vote are durable), when ``early_send``:
    every configuration of the group has two voters or more
    (:func:`needs_a_follower`). See :meth:`MultiRaft.outgoing` for why.
    """
    if not early_send or rd.soft_state is not None:
        return (), rd.messages
    early = [m for m in rd.messages if m.type in _EARLY]
    if not early:
        return (), rd.messages
    return early, [m for m in rd.messages if m.type not in _EARLY]


@dataclass(frozen=True, slots=True)
class CompactionStep:
    """Compact ``group_id`` up to ``index``, after recording ``snapshot`` if there is one.

    The snapshot's file must be made durable between
    :meth:`MultiRaft.plan_compaction` and :meth:`MultiRaft.finish_compaction`.
    """

    group_id: int
    index: int
    snapshot: Snapshot | None


@dataclass(slots=True)
class _Proposal:
    """Payloads proposed together; one token. ``single``: the result is not a list."""

    payloads: list[bytes]
    token: object
    single: bool
    conf_change: ConfChange | ConfChangeV2 | None = None


@dataclass(slots=True)
class _Pending:
    """An appended proposal awaiting apply: entries [first, last] of ``term``."""

    first: int
    last: int
    term: int
    token: object
    single: bool
    results: list[object] = field(default_factory=list)
    overwritten: bool = False
    conf_change: bool = False
    refused: bool = False  # a conf change the leader replaced with an empty entry


@dataclass(slots=True)
class _Group:
    group_id: int
    node: GroupNode
    state_machine: StateMachine
    peers: tuple[int, ...]
    quiesced: bool = False
    idle_ticks: int = 0
    # Every configuration has two voters or more, so no entry commits on this
    # replica's own write alone (see outgoing's early part).
    early_send: bool = False
    proposals: list[_Proposal] = field(default_factory=list)
    conf_changes: list[_Proposal] = field(default_factory=list)
    pending: dict[int, _Pending] = field(default_factory=dict)  # by first index
    applying: _Pending | None = None  # the pending batch the apply position is inside
    applied: int = 0
    applied_term: int = 0
    snapshot_index: int = 0
    # Entries <= truncate_floor may be compacted (None: no limit): the
    # state machine host's retention (e.g. messages still served from the WAL).
    truncate_floor: int | None = None
    # Linearizable reads: asked (context -> token), then confirmed (index, token)
    # and released once ``applied`` reaches the index.
    reads_asked: dict[bytes, object] = field(default_factory=dict)
    reads_confirmed: list[tuple[int, object]] = field(default_factory=list)


@dataclass(slots=True)
class Round:
    """One round's work: the Readys taken, and what must be sent with them."""

    groups: list[_Group]
    readies: list[Ready]
    must_sync: bool
    rejected: list[tuple[object, RaftError]]
    notices: dict[int, list[wire.QuiesceNotice]]

    def is_empty(self) -> bool:
        """Nothing to write, send, apply or report."""
        return not self.readies and not self.rejected and not self.notices


@dataclass(frozen=True, slots=True)
class Outcome:
    """A proposal's end: ``error`` is None when it committed and applied with ``result``."""

    token: object
    result: object = None
    error: RaftError | None = None


def _outcome(p: _Pending) -> Outcome:
    if p.overwritten:
        return Outcome(p.token, error=ProposalDropped("overwritten by a new leader"))
    if p.refused:
        return Outcome(
            p.token, error=ProposalDropped("another membership change is still in progress")
        )
    return Outcome(p.token, p.results[0] if p.single else p.results)


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
        self._groups: dict[int, _Group] = {}
        self._dirty: set[int] = set()
        self._notices: dict[int, list[wire.QuiesceNotice]] = {}
        self._last_heard_ms: dict[int, int] = {}
        self._peer_nodes: list[int] = []
        self._read_seq = 0

    # ------------------------------------------------------------- groups
    def add_group(
        self, group_id: int, node: GroupNode, state_machine: StateMachine, peers: Sequence[int]
    ) -> None:
        """Host a replica of ``group_id`` whose members are ``peers`` (this node included)."""
        if group_id in self._groups:
            raise ValueError(f"group {group_id} is hosted already")
        others = tuple(sorted(p for p in peers if p != self.node_id))
        g = self._groups[group_id] = _Group(group_id, node, state_machine, others)
        g.early_send = needs_a_follower(node.status().conf_state)
        self._peer_nodes = sorted(set(self._peer_nodes) | set(others))
        self._dirty.add(group_id)

    def remove_group(self, group_id: int) -> list[Outcome]:
        """Stop hosting ``group_id`` (no-op if not hosted); the Outcomes of its
        queued and pending proposals and reads, all failed with NotLeader.

        Messages for it are dropped from now on (see :meth:`receive`). The
        caller removes it between rounds, never between collect and advance.
        """
        g = self._groups.pop(group_id, None)
        if g is None:
            return []
        self._dirty.discard(group_id)
        error = NotLeader(f"group {group_id} is no longer hosted on node {self.node_id}")
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

    def _group(self, group_id: int) -> _Group:
        group = self._groups.get(group_id)
        if group is None:
            raise NotLeader(f"group {group_id} is not hosted on node {self.node_id}")
        return group

    def _wake(self, g: _Group) -> None:
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

    def _maybe_quiesce_leader(self, g: _Group) -> None:
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
        g.proposals.append(_Proposal([data], token, True))
        self._dirty.add(group_id)

    def propose_many(self, group_id: int, payloads: list[bytes], token: object) -> None:
        """Queue entries proposed together; one Outcome whose result is their results' list.

        They are appended consecutively; the Outcome fails if any was not committed.
        """
        g = self._group(group_id)
        self._check_size(group_id, payloads)
        self._wake(g)
        g.proposals.append(_Proposal(list(payloads), token, False))
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
        never apply, NotLeader off the leader.
        """
        g = self._group(group_id)
        self._wake(g)
        g.conf_changes.append(_Proposal([], token, True, change))
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

        Raises NotLeader if this replica does not lead the group. A read whose
        confirmation is lost (leadership changes meanwhile) never ends: callers
        bound their wait.
        """
        g = self._group(group_id)
        if not g.node.is_leader():
            raise NotLeader(f"node {self.node_id} does not lead group {group_id}", g.node.lead)
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
        groups: list[_Group] = []
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
                    error = NotLeader(
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

    def _propose_conf_changes(self, g: _Group, rejected: list[tuple[object, RaftError]]) -> None:
        changes, g.conf_changes = g.conf_changes, []
        node = g.node
        for p in changes:
            assert p.conf_change is not None
            if not node.is_leader():
                error = NotLeader(
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
            g.pending[index] = _Pending(index, index, status.term, p.token, True, conf_change=True)

    def _track(
        self, g: _Group, rd: Ready, proposals: list[_Proposal], payloads: list[bytes]
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
            g.pending[first] = _Pending(first, last, term, p.token, p.single)
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

        Usually one batch per node per round; a node's messages are split into
        several batches when their entries exceed ``batch_bytes_max`` (a
        catching-up follower), so no batch outgrows the transport's frame limit.

        ``part``: "all"; or "early", the messages that may go before the
        round's fdatasync, then "late", the rest (and the notices). Early are
        the appends and heartbeats of a leader that was leader at its previous
        Ready already (its term and vote are durable) in a group where every
        configuration has two voters or more (Raft thesis 10.2.1: the leader
        writes its log in parallel with replicating it). Safe because the core
        counts the leader's own write when it appends, yet an entry of this
        round cannot commit before a follower acknowledges it, which it cannot
        do before receiving it, and whatever commits becomes visible (applied,
        or sent as the commit index) only in a later round, after this sync.
        Everything a follower or candidate sends waits for the sync.

        With early sends the simulation once broke election safety (seed 6125):
        a follower removed by a joint change kept the leave-joint entry but
        lost, to a torn write, the hard state saying the joint entry
        committed, so it campaigned in its old configuration (configurations
        take effect on apply, as in etcd/raft) while the new one elected
        another leader in the same term. No early send is in that chain; the
        core now refuses votes to a voter its applied configuration took out
        (``Raft._counts_as_voter``), and the seed passes.
        """
        per_node: dict[int, list[list[tuple[int, Message]]]] = {}
        sizes: dict[int, int] = {}
        for g, rd in zip(rnd.groups, rnd.readies, strict=True):
            chosen: Sequence[Message] = rd.messages
            if part == "early":
                chosen = split_early(rd, g.early_send)[0]
            elif part == "late":
                chosen = split_early(rd, g.early_send)[1]
            for chosen_message in chosen:
                message = chosen_message
                to = message.to
                if to == self.node_id:
                    continue
                size = 64 + sum(len(e.data) + 16 for e in message.entries)
                if message.snapshot is not None:
                    message = _complete_snapshot(g.state_machine, message)
                    assert message.snapshot is not None
                    size += len(message.snapshot.data)
                batches = per_node.get(to)
                if batches is None:
                    batches = per_node[to] = [[]]
                    sizes[to] = 0
                elif sizes[to] + size > batch_bytes_max and batches[-1]:
                    batches.append([])
                    sizes[to] = 0
                batches[-1].append((g.group_id, message))
                sizes[to] += size
        notices_to = rnd.notices.keys() if part != "early" else set()
        for to in sorted(per_node.keys() | notices_to):
            batches = per_node.get(to) or [[]]
            for index, messages in enumerate(batches):
                last = index == len(batches) - 1
                notices = rnd.notices.get(to, ()) if last and part != "early" else ()
                yield to, wire.encode_batch(self.node_id, to, messages, notices)

    def apply(self, rnd: Round, writer: LogWriter) -> list[Outcome]:
        """Apply snapshots and committed entries; return the proposals that ended."""
        outcomes = [Outcome(token, error=error) for token, error in rnd.rejected]
        for g, rd in zip(rnd.groups, rnd.readies, strict=True):
            if rd.snapshot is not None:
                g.state_machine.restore(rd.snapshot)
                self._note_members(g, rd.snapshot.metadata.conf_state)
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
                    outcomes.append(_outcome(waiting))
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

    def _apply_conf_change(self, g: _Group, entry: Entry, writer: LogWriter) -> None:
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
        self._note_members(g, conf)
        metadata = SnapshotMetadata(index=entry.index, term=entry.term, conf_state=conf)
        writer.save_local_snapshot(g.group_id, Snapshot(metadata, g.state_machine.snapshot_data()))
        g.snapshot_index = entry.index

    def _note_members(self, g: _Group, conf: ConfState) -> None:
        """The group's peers are the members of ``conf`` (a change applied, or a
        snapshot installed: a new member learns its peers from its first snapshot)."""
        members = set(conf.voters) | conf.learners | conf.voters_outgoing | conf.learners_next
        g.peers = tuple(sorted(members - {self.node_id}))
        g.early_send = needs_a_follower(conf)
        self._peer_nodes = sorted(set(self._peer_nodes) | set(g.peers))

    def plan_compaction(
        self, targets: Mapping[int, int], unpins: Callable[[int, int], bool] | None = None
    ) -> list[CompactionStep]:
        """Steps that compact each group toward ``targets`` (group -> index).

        A group is compacted no further than what it applied and its truncate
        floor; when its snapshot does not cover that far, the step carries a
        new snapshot of its state machine as of now (its applied index).
        ``unpins(group, index)``: whether compacting the group up to ``index``
        would release a WAL segment it holds now. A group held back (by its
        floor) so far that it would release none gets no step, so no snapshot
        is taken for it: a state machine's snapshot may be costly (it stalls
        the round), and one that frees nothing is wasted.
        """
        steps: list[CompactionStep] = []
        for group_id, target in targets.items():
            g = self._groups.get(group_id)
            if g is None:
                continue
            index = min(target, g.applied)
            if g.truncate_floor is not None:
                index = min(index, g.truncate_floor)
            if index <= 0 or (unpins is not None and not unpins(group_id, index)):
                continue
            snapshot = None
            if g.snapshot_index < index:
                conf_state = g.node.status().conf_state
                metadata = SnapshotMetadata(
                    index=g.applied, term=g.applied_term, conf_state=conf_state
                )
                snapshot = Snapshot(metadata, g.state_machine.snapshot_data())
            steps.append(CompactionStep(group_id, index, snapshot))
        return steps

    def finish_compaction(self, steps: Sequence[CompactionStep], writer: SnapshotRecorder) -> None:
        """Record the steps' snapshots (their files are durable) and compact."""
        for step in steps:
            g = self._groups.get(step.group_id)
            if g is None:
                continue
            if step.snapshot is not None:
                if not writer.note_local_snapshot(step.group_id, step.snapshot):
                    continue  # overtaken (e.g. by a snapshot from the leader)
                g.snapshot_index = max(g.snapshot_index, step.snapshot.metadata.index)
            writer.compact(step.group_id, step.index)

    def maybe_snapshot(
        self, rnd: Round, writer: LogWriter, every_entries: int, keep_entries: int
    ) -> None:
        """Snapshot the groups of ``rnd`` that applied ``every_entries`` since their last one.

        The log is then compacted up to ``keep_entries`` below the snapshot, so
        slightly lagging followers still catch up from entries.
        """
        for g in rnd.groups:
            if g.applied - g.snapshot_index < every_entries:
                continue
            conf_state = g.node.status().conf_state
            metadata = SnapshotMetadata(index=g.applied, term=g.applied_term, conf_state=conf_state)
            writer.save_local_snapshot(
                g.group_id, Snapshot(metadata, g.state_machine.snapshot_data())
            )
            g.snapshot_index = g.applied
            index = g.applied - keep_entries
            if g.truncate_floor is not None:
                index = min(index, g.truncate_floor)
            if index > 0:
                writer.compact(g.group_id, index)

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


def _complete_snapshot(machine: StateMachine, message: Message) -> Message:
    """``message`` with its snapshot completed by the machine's ``snapshot_for_peer`` hook.

    The hook is optional (:class:`raft.host_types.RetainingStateMachine`);
    without it the snapshot is sent as taken.
    """
    export: Callable[[Snapshot], bytes] | None = getattr(machine, "snapshot_for_peer", None)
    snapshot = message.snapshot
    if export is None or snapshot is None:
        return message
    return dataclasses.replace(
        message, snapshot=dataclasses.replace(snapshot, data=export(snapshot))
    )
