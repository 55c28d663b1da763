"""A simulated storage node: real RawNodes over a simulated disk, plus a state machine.

A ``SimNode`` hosts one replica of every group. It follows the Ready
contract exactly, for all its groups at once (group commit): write each
Ready's snapshot, entries and hard state; one fsync if any Ready must sync;
then send messages; then apply snapshots and committed entries and serve
reads whose index is applied; then ``advance``. A crash (scheduled, or
injected between the writes and the fsync) loses the volatile state and
whatever the disk loses; a restart rebuilds every RawNode from the disk.

The state machine of each group is a queue of unique client values; its
register view is the last value appended. Membership changes take effect
when their entry is applied; a restart starts from the membership of the
snapshot (or the bootstrap one) and applies the log again from there, so
the membership always matches the applied index.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from raft.core.confchange import decode_entry
from raft.core.config import Config
from raft.core.memory_log import MemoryLog
from raft.core.node import RawNode
from raft.errors import ProposalDropped
from raft.host.outgoing import needs_a_follower, split_early
from raft.types import (
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MsgType,
    Ready,
    Role,
    Snapshot,
)
from tests.sim.checkers import COMPACTED, GroupInvariants
from tests.sim.disk import SimDisk

# Client <-> node payloads: requests ("append", op_id, value) / ("read", op_id, 0);
# responses ("ok", op_id, a, b) / ("redirect", op_id, leader_hint, 0) / ("fail", op_id, 0, 0).
ClientPayload = tuple[str, int, int, int]


# A leader's early appends (MultiRaft.outgoing's "early" part), on with
# RIP5_SIM_EARLY_SEND=1 (tests/sim/test_raft_sim.py also runs seed 6125 with
# them: node 1, removed by a joint change, kept the leave-joint entry but lost
# the hard state with the joint entry's commit to a torn write and campaigned
# in its old configuration; voters now refuse it, see Raft._counts_as_voter).
EARLY_SEND = os.environ.get("RIP5_SIM_EARLY_SEND") == "1"


@dataclass(frozen=True, slots=True)
class NodeOptions:
    """How every replica of a run is configured."""

    election_tick: int = 10
    heartbeat_tick: int = 1
    pre_vote: bool = True
    check_quorum: bool = True
    compact_every: int = 0  # snapshot + compact after this many applied entries (0: never)
    max_size_per_msg_bytes: int = 1 << 20
    max_inflight_msgs: int = 256
    eager_commit_news: bool = True


class QueueMachine:
    """The replicated object: an append-only queue of unique ints."""

    __slots__ = ("values",)

    def __init__(self, values: list[int] | None = None) -> None:
        self.values: list[int] = values if values is not None else []

    @staticmethod
    def encode_append(value: int) -> bytes:
        """The entry data of appending ``value``."""
        return b"%d" % value

    def apply(self, entry: Entry) -> int | None:
        """Apply a committed entry; the appended value, or None for an empty entry."""
        if entry.type != EntryType.NORMAL or not entry.data:
            return None
        value = int(entry.data)
        self.values.append(value)
        return value

    def to_bytes(self) -> bytes:
        """The snapshot image."""
        return b",".join(b"%d" % v for v in self.values)

    @classmethod
    def from_bytes(cls, data: bytes) -> QueueMachine:
        """Restore from a snapshot image."""
        return cls([int(v) for v in data.split(b",")] if data else [])


@dataclass(slots=True)
class Replica:
    """One group's replica on a node: the RawNode, its log view and its state machine."""

    group: int
    raw: RawNode
    log: MemoryLog
    machine: Any  # QueueMachine unless a subclass of SimNode hosts another machine
    applied: int
    pending_appends: dict[int, tuple[int, int]] = field(default_factory=dict)  # value -> client, op
    pending_reads: list[tuple[int, int, int]] = field(default_factory=list)  # index, client, op
    conf_state: ConfState = field(default_factory=ConfState)  # membership at the applied index
    members_added: bool = False  # a member joined since the last snapshot
    reported_commit: int = 0
    leader_term: int = 0  # the term this replica last reported itself leader of

    def term_at(self, index: int) -> int | None:
        """The term at ``index`` in this replica's log (COMPACTED / None as in checkers)."""
        log = self.log
        if index == 0:
            return 0
        if index < log.first_index() - 1:
            return COMPACTED
        if index > log.last_index():
            return None
        return log.term(index)


class SimNode:
    """One simulated storage node hosting a replica of every group."""

    def __init__(
        self,
        node_id: int,
        bootstrap: ConfState,
        groups: list[int],
        options: NodeOptions,
        rng: random.Random,
        invariants: dict[int, GroupInvariants],
        send: Callable[[int, int, object, bool], None],
        mid_ready_crash_rate: float = 0.0,
        on_crash: Callable[[SimNode], None] | None = None,
    ) -> None:
        self.id = node_id
        self.bootstrap = bootstrap  # the membership a replica without a snapshot starts from
        self.groups = groups
        self.options = options
        self.rng = rng
        self.invariants = invariants
        self._send = send
        self.mid_ready_crash_rate = mid_ready_crash_rate
        self._on_crash = on_crash
        self.disk = SimDisk()
        self.replicas: dict[int, Replica] = {}
        self.up = False
        self.incarnation = 0
        self.crashes = 0
        self.mid_ready_crashes = 0
        self.torn_crashes = 0
        self.snapshots_sent = 0
        self.paused_until_ms = 0  # the host ignores ticks and defers messages until then
        self.start()

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Boot (or reboot) from whatever the disk holds."""
        assert not self.up
        images = self.disk.recover()
        self.incarnation += 1
        for group in self.groups:
            log = MemoryLog(conf_state=self.bootstrap)
            machine = self.new_machine(group, None)
            applied = 0
            image = images.get(group)
            if image is not None:
                hard_state = image.hard_state
                if image.snapshot is not None:
                    log.apply_snapshot(image.snapshot)
                    machine = self.new_machine(group, image.snapshot.data)
                    applied = image.snapshot.metadata.index
                    # A snapshot only ever holds committed state: if the hard state
                    # written after it was lost, its commit is still at least this.
                    if hard_state.commit < applied:
                        hard_state = HardState(hard_state.term, hard_state.vote, applied)
                log.append(image.entries)
                log.set_hard_state(hard_state)
            config = Config(
                id=self.id,
                election_tick=self.options.election_tick,
                heartbeat_tick=self.options.heartbeat_tick,
                applied=applied,
                pre_vote=self.options.pre_vote,
                check_quorum=self.options.check_quorum,
                max_size_per_msg_bytes=self.options.max_size_per_msg_bytes,
                max_inflight_msgs=self.options.max_inflight_msgs,
                eager_commit_news=self.options.eager_commit_news,
            )
            raw = RawNode(config, log, self.rng.randrange)
            replica = Replica(group, raw, log, machine, applied)
            replica.conf_state = log.initial_state()[1]
            self.replicas[group] = replica
            invariants = self.invariants[group]
            invariants.restarted(self.id)
            # The recovered hard state may hold a commit index raft produced but
            # the node crashed before reporting (written, not yet fsynced).
            recovered = log.initial_state()[0]
            commit = recovered.commit
            if commit:
                invariants.commit_advanced(self.id, commit, replica.term_at, recovered.term)
            replica.reported_commit = commit
            if applied:
                invariants.snapshot_applied(self.id, applied, log.term(applied))
        self.up = True

    def crash(self) -> None:
        """Lose all volatile state and whatever the disk loses; stay down until start()."""
        assert self.up
        self.up = False
        self.crashes += 1
        self.replicas = {}
        report = self.disk.crash(self.rng)
        self.torn_crashes += report.torn
        if self._on_crash is not None:
            self._on_crash(self)

    def leads(self, group: int) -> bool:
        """Whether this node currently leads ``group``."""
        return self.replicas[group].raw.role == Role.LEADER

    def is_member(self, conf: ConfState) -> bool:
        """Whether this node is a voter or learner (incoming or outgoing) in ``conf``."""
        members = conf.voters | conf.learners | conf.voters_outgoing | conf.learners_next
        return self.id in members

    def leads_any(self) -> bool:
        """Whether this node currently leads at least one group."""
        return any(r.raw.role == Role.LEADER for r in self.replicas.values())

    # -- inputs ------------------------------------------------------------------------

    def tick(self) -> None:
        """One tick for every group, then do the resulting work."""
        for replica in self.replicas.values():
            replica.raw.tick()
        self.maybe_handle_ready()

    def receive(self, src: int, payload: object) -> None:
        """A raft message from a peer or a request from a client."""
        if isinstance(payload, Message):
            raise TypeError("raft messages travel as (group, message)")
        assert isinstance(payload, tuple)
        if len(payload) == 2:
            group, message = payload
            assert isinstance(message, Message)
            self.replicas[group].raw.step(message)
        else:
            self._serve(src, payload)
        self.maybe_handle_ready()

    def _serve(self, client: int, request: tuple[object, ...]) -> None:
        kind, op_id, group, value = request
        assert isinstance(op_id, int)
        assert isinstance(group, int)
        assert isinstance(value, int)
        replica = self.replicas[group]
        raw = replica.raw
        if raw.role != Role.LEADER:
            self._reply(client, ("redirect", op_id, raw.lead, 0))
            return
        try:
            if kind == "append":
                raw.propose(QueueMachine.encode_append(value))
                replica.pending_appends[value] = (client, op_id)
            else:
                raw.read_index(b"%d" % op_id)
                replica.pending_reads.append((-1, client, op_id))
        except ProposalDropped:
            self._reply(client, ("fail", op_id, 0, 0))

    def _reply(self, client: int, response: ClientPayload) -> None:
        self._send(self.id, client, response, False)

    # -- the Ready loop ----------------------------------------------------------------

    def maybe_handle_ready(self) -> None:
        """Do every group's pending work, following the Ready contract, until none is left."""
        while self.up:
            batch = [(r, r.raw.ready()) for r in self.replicas.values() if r.raw.has_ready()]
            if not batch:
                return
            must_sync = False
            for replica, ready in batch:
                self._persist(replica, ready)
                must_sync = must_sync or ready.must_sync
                if self.mid_ready_crash_rate and self.rng.random() < self.mid_ready_crash_rate:
                    self.mid_ready_crashes += 1
                    self.crash()  # between the writes and the fsync: nothing was sent
                    return
            late: list[tuple[Replica, Sequence[Message]]] = []
            for replica, ready in batch:
                early: Sequence[Message] = ()
                rest: Sequence[Message] = ready.messages
                if (
                    EARLY_SEND
                    and must_sync
                    and ready.soft_state is None
                    and replica.raw.role == Role.LEADER
                ):
                    conf = replica.raw.status().conf_state
                    early, rest = split_early(ready, needs_a_follower(conf))
                for message in early:  # a leader's appends go out while it writes its log
                    self._send_raft(replica, message)
                late.append((replica, rest))
            if (
                EARLY_SEND
                and self.mid_ready_crash_rate
                and self.rng.random() < self.mid_ready_crash_rate
            ):
                self.mid_ready_crashes += 1
                self.crash()  # before the fsync: early appends may be out, nothing else
                return
            if must_sync:
                self.disk.fsync()
            for replica, ready in batch:
                self._observe(replica, ready)
            for replica, messages in late:
                for message in messages:
                    self._send_raft(replica, message)
            for replica, ready in batch:
                self._apply(replica, ready)
                replica.raw.advance(ready)
                self._maybe_compact(replica)

    def _persist(self, replica: Replica, ready: Ready) -> None:
        group, log, disk = replica.group, replica.log, self.disk
        if ready.snapshot is not None:
            disk.write_snapshot(group, ready.snapshot)
            log.apply_snapshot(ready.snapshot)
        if ready.entries:
            entries = ready.entries
            first = entries[0].index
            overwritten: list[Entry] = []
            if first <= log.last_index():
                overwritten = log.entries(max(first, log.first_index()), log.last_index() + 1)
            prev_term = replica.term_at(first - 1)
            assert prev_term is not None, f"entries at {first} leave a gap after {log.last_index()}"
            self.invariants[group].entries_written(self.id, entries, prev_term, overwritten)
            disk.write_entries(group, entries)
            log.append(entries)
        if ready.hard_state is not None:
            disk.write_hard_state(group, ready.hard_state)
            log.set_hard_state(ready.hard_state)

    def _observe(self, replica: Replica, ready: Ready) -> None:
        invariants = self.invariants[replica.group]
        hard_state = ready.hard_state
        if hard_state is not None and hard_state.commit > replica.reported_commit:
            invariants.commit_advanced(self.id, hard_state.commit, replica.term_at, hard_state.term)
            replica.reported_commit = hard_state.commit
        raw = replica.raw
        if raw.role == Role.LEADER:
            term = raw.hard_state().term
            if term != replica.leader_term:
                replica.leader_term = term
                invariants.became_leader(self.id, term, replica.term_at)

    def _send_raft(self, replica: Replica, message: Message) -> None:
        to = message.to
        self._send(self.id, to, (replica.group, message), True)
        if message.type == MsgType.SNAP:
            self.snapshots_sent += 1
            # The transport "finished" the send; a lost one is noticed by probing.
            replica.raw.report_snapshot(to, True)

    def _apply(self, replica: Replica, ready: Ready) -> None:
        invariants = self.invariants[replica.group]
        if ready.snapshot is not None:
            meta = ready.snapshot.metadata
            invariants.snapshot_applied(self.id, meta.index, meta.term)
            replica.machine = self.new_machine(replica.group, ready.snapshot.data)
            replica.applied = meta.index
            replica.conf_state = meta.conf_state
        for entry in ready.committed_entries:
            invariants.entry_applied(self.id, entry)
            replica.applied = entry.index
            if entry.type in (EntryType.CONF_CHANGE, EntryType.CONF_CHANGE_V2):
                before = replica.conf_state
                replica.conf_state = replica.raw.apply_conf_change(decode_entry(entry))
                after = replica.conf_state
                if (after.voters | after.learners) - (before.voters | before.learners):
                    replica.members_added = True
                continue
            self.apply_entry(replica, entry)
        self.serve_reads(replica, ready)

    # -- the state machine (subclasses replace these to host another machine) -----------

    def new_machine(self, group: int, snapshot_data: bytes | None) -> Any:
        """A replica's state machine: empty, or restored from a snapshot's data."""
        return QueueMachine() if snapshot_data is None else QueueMachine.from_bytes(snapshot_data)

    def snapshot_data(self, replica: Replica) -> bytes:
        """The snapshot image of a replica's machine at its applied index."""
        return bytes(replica.machine.to_bytes())

    def apply_entry(self, replica: Replica, entry: Entry) -> None:
        """Apply one committed NORMAL entry and answer the client that proposed it."""
        machine = replica.machine
        value = machine.apply(entry)
        if value is not None:
            waiting = replica.pending_appends.pop(value, None)
            if waiting is not None:
                client, op_id = waiting
                self._reply(client, ("ok", op_id, len(machine.values), 0))

    def serve_reads(self, replica: Replica, ready: Ready) -> None:
        """Answer the linearizable reads whose read index is applied."""
        machine = replica.machine
        if ready.read_states:
            contexts = {int(rs.request_ctx): rs.index for rs in ready.read_states}
            replica.pending_reads = [
                (contexts.get(op_id, index), client, op_id)
                for index, client, op_id in replica.pending_reads
            ]
        if replica.pending_reads:
            still: list[tuple[int, int, int]] = []
            for index, client, op_id in replica.pending_reads:
                if 0 <= index <= replica.applied:
                    values = machine.values
                    last = values[-1] if values else 0
                    self._reply(client, ("ok", op_id, len(values), last))
                else:
                    still.append((index, client, op_id))
            replica.pending_reads = still

    def _maybe_compact(self, replica: Replica) -> None:
        every = self.options.compact_every
        if not every:
            return
        log = replica.log
        applied = replica.applied
        # The core sends the latest snapshot to a member that needs one; a
        # member added after it would ignore it (the snapshot's membership
        # lacks it), so a new member forces a fresh snapshot.
        due = replica.members_added or applied - (log.first_index() - 1) >= every
        if not due or applied <= log.first_index() - 1 or applied > log.last_index():
            return
        replica.members_added = False
        snapshot: Snapshot = log.create_snapshot(
            applied, replica.conf_state, self.snapshot_data(replica)
        )
        log.compact(applied)
        self.disk.write_compaction(replica.group, snapshot)
