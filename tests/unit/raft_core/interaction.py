"""The interaction harness behind tests/datadriven/raft/*.txt (after etcd's rafttest).

Commands (ids are node ids; a list is ``(1,2)``):

- ``add-nodes <n> voters=(..) [learners=(..)] [index=<i>] [<option>=<v>]``:
  start n replicas (ids continue from the last one) whose log starts with a
  snapshot at ``index`` (term 1) holding that membership. Options:
  pre-vote, check-quorum, max-inflight, max-size, max-uncommitted,
  election-tick, heartbeat-tick.
- ``campaign <id>``, ``propose <id> <data>``,
  ``propose-conf-change <id> <v4|l4|r4>.. [transition=auto|implicit|explicit]``
  (several changes or a transition: a ConfChangeV2; ``leave``: leave joint),
  ``read-index <id> <ctx>``, ``transfer-leader from=<id> to=<id>``,
  ``report-unreachable <id> <peer>``, ``report-snapshot <id> <peer> ok|fail``
- ``tick <id> [n]``, ``tick-election <id>``, ``tick-heartbeat <id>``
- ``process-ready <id>..``: handle one Ready of each (persist, queue
  messages, apply committed entries and conf changes, advance).
- ``deliver-msgs [drop=(..)] [<id>..]``: deliver the queued messages to the
  given ids (default: all); ``drop`` discards those to the listed ids. A
  delivered SNAP is reported to its sender as sent (report_snapshot ok).
- ``stabilize [<id>..] [drop=(..)]``: repeat process-ready and deliver-msgs
  until nothing changes; messages to ``drop`` ids are discarded.
- ``status <id>``, ``raft-state``, ``raft-log <id>``, ``applied <id>``
- ``compact <id> <index>``: snapshot the applied state at index and compact.
- ``restart <id> [applied=<i>]``: rebuild the replica from its log (a crash
  and restart) with Config.applied = i.
- ``log-level none|info``: none hides the Ready and message traces.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from raft.core.confchange import decode_entry
from raft.core.memory_log import MemoryLog
from raft.core.node import Config, RawNode
from raft.errors import RaftError
from raft.types import (
    ConfChange,
    ConfChangeTransition,
    ConfChangeType,
    ConfChangeV2,
    ConfState,
    Entry,
    EntryType,
    Message,
    MsgType,
    Snapshot,
    SnapshotMetadata,
)
from tests._datadriven import TestData
from tests.unit.raft_core import describe


def _flag(value: str) -> bool:
    return value == "true"


_OPTIONS: dict[str, tuple[str, Callable[[str], object]]] = {
    "pre-vote": ("pre_vote", _flag),
    "check-quorum": ("check_quorum", _flag),
    "max-inflight": ("max_inflight_msgs", int),
    "max-size": ("max_size_per_msg_bytes", int),
    "max-uncommitted": ("max_uncommitted_entries_bytes", int),
    "election-tick": ("election_tick", int),
    "heartbeat-tick": ("heartbeat_tick", int),
}


@dataclass
class _Replica:
    node: RawNode
    log: MemoryLog
    config: Config
    applied: list[Entry] = field(default_factory=list)


class Interaction:
    """The state of one scenario file."""

    def __init__(self) -> None:
        self.replicas: dict[int, _Replica] = {}
        self.queue: list[Message] = []
        self.rng = random.Random(0)
        self.verbose = True
        self.out: list[str] = []

    # -- dispatch ----------------------------------------------------------------

    def handle(self, d: TestData) -> str:
        """Run one command; its output."""
        self.out = []
        handler = getattr(self, "_cmd_" + d.cmd.replace("-", "_"), None)
        if handler is None:
            raise ValueError(f"{d.pos}: unknown command {d.cmd}")
        try:
            handler(d)
        except RaftError as exc:
            self.out.append(f"error: {type(exc).__name__}: {exc}")
        return "\n".join(self.out) if self.out else "ok"

    def _emit(self, line: str) -> None:
        if self.verbose:
            self.out.append(line)

    def _ids(self, d: TestData) -> list[int]:
        ids = [int(p) for p in d.positional()]
        return ids or sorted(self.replicas)

    def _node(self, d: TestData, position: int = 0) -> RawNode:
        return self.replicas[int(d.positional()[position])].node

    # -- setup -------------------------------------------------------------------

    def _cmd_add_nodes(self, d: TestData) -> None:
        count = int(d.positional()[0])
        voters = frozenset(int(v) for v in d.arg_values("voters"))
        learners = frozenset(int(v) for v in d.arg_values("learners"))
        index = int(d.arg("index", "0"))
        options: dict[str, object] = {"pre_vote": False, "check_quorum": False}
        for key, (name, parse) in _OPTIONS.items():
            if d.has_arg(key):
                options[name] = parse(d.arg(key))
        first = max(self.replicas, default=0) + 1
        conf = ConfState(voters, learners)
        for node_id in range(first, first + count):
            log = MemoryLog(conf)
            if index:
                log.apply_snapshot(Snapshot(SnapshotMetadata(index, 1, conf)))
            config = Config(id=node_id, **options)  # type: ignore[arg-type]
            self.replicas[node_id] = _Replica(RawNode(config, log, self.rng.randrange), log, config)

    def _cmd_log_level(self, d: TestData) -> None:
        self.verbose = d.positional()[0] != "none"

    def _cmd_restart(self, d: TestData) -> None:
        node_id = int(d.positional()[0])
        replica = self.replicas[node_id]
        applied = int(d.arg("applied", "0"))
        replica.config = dataclasses.replace(replica.config, applied=applied)
        replica.node = RawNode(replica.config, replica.log, self.rng.randrange)
        self.queue = [m for m in self.queue if m.to != node_id]

    # -- inputs ------------------------------------------------------------------

    def _cmd_campaign(self, d: TestData) -> None:
        self._node(d).campaign()

    def _cmd_propose(self, d: TestData) -> None:
        self._node(d).propose(d.positional()[1].encode())

    def _cmd_propose_conf_change(self, d: TestData) -> None:
        kinds = {"v": ConfChangeType.ADD_VOTER, "l": ConfChangeType.ADD_LEARNER}
        changes = tuple(
            ConfChange(kinds.get(spec[0], ConfChangeType.REMOVE_NODE), int(spec[1:]))
            for spec in d.positional()[1:]
            if spec != "leave"
        )
        if len(changes) == 1 and not d.has_arg("transition"):
            self._node(d).propose_conf_change(changes[0])
            return
        transitions = {
            "auto": ConfChangeTransition.AUTO,
            "implicit": ConfChangeTransition.JOINT_IMPLICIT,
            "explicit": ConfChangeTransition.JOINT_EXPLICIT,
        }
        transition = transitions[d.arg("transition", "auto")]
        self._node(d).propose_conf_change(ConfChangeV2(changes, transition))

    def _cmd_read_index(self, d: TestData) -> None:
        self._node(d).read_index(d.positional()[1].encode())

    def _cmd_transfer_leader(self, d: TestData) -> None:
        self.replicas[int(d.arg("from"))].node.transfer_leader(int(d.arg("to")))

    def _cmd_report_unreachable(self, d: TestData) -> None:
        self._node(d).report_unreachable(int(d.positional()[1]))

    def _cmd_report_snapshot(self, d: TestData) -> None:
        self._node(d).report_snapshot(int(d.positional()[1]), d.positional()[2] == "ok")

    def _cmd_tick(self, d: TestData) -> None:
        node = self._node(d)
        count = int(d.positional()[1]) if len(d.positional()) > 1 else 1
        for _ in range(count):
            node.tick()

    def _cmd_tick_election(self, d: TestData) -> None:
        replica = self.replicas[int(d.positional()[0])]
        # A leader checks its quorum every election_tick; a follower's
        # randomized timeout is below 2 * election_tick.
        ticks = replica.config.election_tick
        if not replica.node.is_leader():
            ticks *= 2
        for _ in range(ticks):
            replica.node.tick()

    def _cmd_tick_heartbeat(self, d: TestData) -> None:
        replica = self.replicas[int(d.positional()[0])]
        for _ in range(replica.config.heartbeat_tick):
            replica.node.tick()

    # -- readys and messages -----------------------------------------------------

    def _process_ready(self, node_id: int) -> bool:
        replica = self.replicas[node_id]
        node = replica.node
        if not node.has_ready():
            return False
        rd = node.ready()
        self._emit(f"> {node_id} handling Ready")
        for line in describe.ready(rd):
            self._emit("  " + line)
        if rd.snapshot is not None:
            replica.log.apply_snapshot(rd.snapshot)
        replica.log.append(rd.entries)
        if rd.hard_state is not None:
            replica.log.set_hard_state(rd.hard_state)
        self.queue.extend(rd.messages)
        for e in rd.committed_entries:
            replica.applied.append(e)
            if e.type != EntryType.NORMAL:
                cs = node.apply_conf_change(decode_entry(e))
                replica.log.set_conf_state(cs)
                self._emit(f"  {node_id} applied conf change: {describe.conf_state(cs)}")
        node.advance(rd)
        return True

    def _deliver(self, ids: list[int], drop: set[int]) -> bool:
        moved = False
        remaining: list[Message] = []
        delivered: dict[int, list[Message]] = {}
        for m in self.queue:
            if m.to in drop:
                self._emit(f"  dropped: {describe.message(m)}")
                moved = True
            elif m.to in ids and m.to in self.replicas:
                delivered.setdefault(m.to, []).append(m)
            else:
                remaining.append(m)
        self.queue = remaining
        for node_id in sorted(delivered):
            self._emit(f"> {node_id} receiving messages")
            for m in delivered[node_id]:
                self._emit("  " + describe.message(m))
                try:
                    self.replicas[node_id].node.step(m)
                except RaftError as exc:
                    self._emit(f"  error: {type(exc).__name__}: {exc}")
                if m.type == MsgType.SNAP and m.from_ in self.replicas:
                    # The sending host learns that the snapshot arrived.
                    self.replicas[m.from_].node.report_snapshot(node_id, True)
                    self._emit(f"  {m.from_} reported snapshot to {node_id} sent")
                moved = True
        return moved

    def _cmd_process_ready(self, d: TestData) -> None:
        for node_id in self._ids(d):
            self._process_ready(node_id)

    def _cmd_deliver_msgs(self, d: TestData) -> None:
        drop = {int(v) for v in d.arg_values("drop")}
        self._deliver(self._ids(d), drop)

    def _cmd_stabilize(self, d: TestData) -> None:
        ids = self._ids(d)
        drop = {int(v) for v in d.arg_values("drop")}
        for _ in range(1000):
            moved = False
            for node_id in ids:
                moved = self._process_ready(node_id) or moved
            moved = self._deliver(ids, drop) or moved
            if not moved:
                return
        raise AssertionError(f"{d.pos}: did not stabilize")

    # -- observing ---------------------------------------------------------------

    def _cmd_status(self, d: TestData) -> None:
        st = self._node(d).status()
        self.out.append(
            f"{st.id} {st.role.name} term:{st.term} vote:{st.vote} lead:{st.lead} "
            f"commit:{st.commit} applied:{st.applied} last:{st.last_index}"
            + (f" transferee:{st.lead_transferee}" if st.lead_transferee else "")
        )
        self.out.append(f"  {describe.conf_state(st.conf_state)}")
        for node_id, pr in sorted(st.progress.items()):
            flags = []
            if pr.is_learner:
                flags.append("learner")
            if pr.paused:
                flags.append("paused")
            if pr.pending_snapshot:
                flags.append(f"pending_snap={pr.pending_snapshot}")
            if pr.inflight:
                flags.append(f"inflight={pr.inflight}")
            suffix = (" " + " ".join(flags)) if flags else ""
            self.out.append(f"  {node_id}: {pr.state} match={pr.match} next={pr.next}{suffix}")

    def _cmd_raft_state(self, d: TestData) -> None:
        for node_id, replica in sorted(self.replicas.items()):
            node = replica.node
            st = node.status()
            self.out.append(f"{node_id}: {st.role.name} term:{st.term} lead:{st.lead}")

    def _cmd_raft_log(self, d: TestData) -> None:
        log = self.replicas[int(d.positional()[0])].log
        first, last = log.first_index(), log.last_index()
        if first > last:
            self.out.append(f"log is empty: first index={first}, last index={last}")
            return
        for e in log.entries(first, last + 1):
            self.out.append(describe.entry(e))

    def _cmd_applied(self, d: TestData) -> None:
        replica = self.replicas[int(d.positional()[0])]
        self.out.append(describe.entries([e for e in replica.applied if e.data]))

    def _cmd_compact(self, d: TestData) -> None:
        replica = self.replicas[int(d.positional()[0])]
        index = int(d.positional()[1])
        _, conf = replica.log.initial_state()
        replica.log.create_snapshot(index, conf, b"")
        replica.log.compact(index)
