"""Controller mode (RIP-44) under simulation: the real controller and replica cores.

One group on ``replicas`` storage nodes, each a
:class:`storage_node.master_slave.MasterSlaveReplica`, and the controller as
the nameserver's real :class:`nameserver.control_state.ControlState` (the
raft group that holds it is a linearizable store: modelled as one, which
may be down). Time advances in steps of ``STEP_MS``; messages between nodes
take a random delay. Each live node heartbeats the controller and reads the
group's record every ``POLL_MS``; the controller elects a master when the master
has been silent for ``DEAD_AFTER_MS``. The master writes client commands,
ships its log, asks for SyncStateSet changes (an answer may be lost: it
then reads the record again).

Faults, one at a time, each for a random while: a crash (the node stops; its
log, epoch and commit index survive, as the WAL's would), a partition (one
node cut off from everyone, the controller included, or only from the other
nodes), extra delay on one node's links, a pause (SIGSTOP: the node does
nothing, messages to it wait; it resumes with its stale view), and the
controller down.

Checked:

- **No acknowledged write lost**: at every election the new master's log
  holds every write acknowledged so far, at the index it was acknowledged
  at; at the end (faults healed) so does the final master's.
- **One master per epoch**: every write is taken by the node that the first
  write of its epoch was taken by.
- Committed prefixes agree: no node's log differs from the master's at an
  index both have committed.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from nameserver import control_commands as cc
from nameserver import controller
from nameserver.control_state import ControlState, replica_set_info
from nameserver.controller import Fenced, ReplicaSet
from nameserver.errors import NameserverError
from protocol.control_api import ReplicaSetInfo
from storage_node.master_slave import (
    Append,
    AppendReply,
    MasterSlaveReplica,
    Role,
)

GROUP = 7
STEP_MS = 5
POLL_MS = 50
"""How often a node heartbeats the controller and reads the group's record."""
DEAD_AFTER_MS = 300
LAG_MS = 200
RUN_MS = 12_000
SETTLE_MS = 3_000
CONTROLLER = 0  # the controller's place in the partition model


@dataclass
class RunResult:
    """What one seed did; ``failure`` names the first broken promise."""

    seed: int
    failure: str | None
    stats: dict[str, int]
    trace: list[str]

    @property
    def trace_digest(self) -> str:
        """A digest of the whole trace (equal for equal runs)."""
        return hashlib.sha256("\n".join(self.trace).encode()).hexdigest()

    def report(self, replay_test: str, lines: int = 30) -> str:
        """The failure, the command that replays it, the end of the trace."""
        tail = "\n".join(self.trace[-lines:])
        return (
            f"seed {self.seed}: {self.failure}\n"
            f"replay: RIP5_SIM_SEED={self.seed} pytest {replay_test}\n{tail}"
        )


class Broken(AssertionError):
    """A promise of controller mode was broken."""


@dataclass
class _Fault:
    kind: str
    node: int
    until_ms: int


@dataclass
class Simulation:
    """One seeded run (see the module docstring)."""

    seed: int
    replicas: int = 2
    rng: random.Random = field(init=False)
    now_ms: int = 0
    nodes: dict[int, MasterSlaveReplica] = field(default_factory=dict)
    control: ControlState = field(default_factory=ControlState)
    heard_ms: dict[int, int] = field(default_factory=dict)
    inflight: list[tuple[int, int, int, Append | AppendReply]] = field(default_factory=list)
    fault: _Fault | None = None
    acked: dict[bytes, int] = field(default_factory=dict)  # write -> index acknowledged at
    writer_of_epoch: dict[int, int] = field(default_factory=dict)
    proposed: dict[tuple[int, int], bytes] = field(default_factory=dict)
    serial: int = 0
    sequence: int = 0  # tie-breaker of message delivery order
    trace: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        ids = tuple(range(1, self.replicas + 1))
        for n in ids:
            self.nodes[n] = MasterSlaveReplica(n, GROUP, ids, lag_ms=LAG_MS)
            self.heard_ms[n] = 0
        self.control.apply(cc.PlaceReplicaSet(GROUP, ids))

    # -- plumbing ------------------------------------------------------------------------

    def _count(self, key: str, by: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + by

    def _log(self, text: str) -> None:
        self.trace.append(f"{self.now_ms:>6} {text}")

    def _running(self, node: int) -> bool:
        """Up and not paused: it acts this step."""
        return (
            self.fault is None
            or self.fault.node != node
            or self.fault.kind
            not in (
                "crash",
                "pause",
            )
        )

    def _cut(self, a: int, b: int) -> bool:
        """Whether the link a <-> b is partitioned now."""
        f = self.fault
        if f is None:
            return False
        if f.kind == "isolate":
            return f.node in (a, b)
        if f.kind == "split":  # from the other nodes, not from the controller
            return f.node in (a, b) and CONTROLLER not in (a, b)
        if f.kind == "controller_down":
            return CONTROLLER in (a, b)
        return False

    def _send(self, src: int, dst: int, message: Append | AppendReply) -> None:
        if self._cut(src, dst):
            return
        delay = self.rng.randint(1, 20)
        f = self.fault
        if f is not None and f.kind == "delay" and f.node in (src, dst):
            delay += self.rng.randint(50, 400)
        self.sequence += 1
        self.inflight.append((self.now_ms + delay, self.sequence, dst, message))

    def _view(self) -> ReplicaSetInfo:
        group = self.control.replica_set(GROUP)
        return replica_set_info(group)

    # -- one step ------------------------------------------------------------------------

    def run(self, run_ms: int = RUN_MS, settle_ms: int = SETTLE_MS) -> None:
        """Faults for ``run_ms``, then none for ``settle_ms``; raises :class:`Broken`."""
        while self.now_ms < run_ms + settle_ms:
            self._faults(self.now_ms < run_ms)
            self._deliver()
            self._controller()
            for n in sorted(self.nodes):
                if self._running(n):
                    self._node_step(n)
            self._check_committed_prefixes()
            self.now_ms += STEP_MS
        self._check_final()

    def _faults(self, allowed: bool) -> None:
        if self.fault is not None and self.now_ms >= self.fault.until_ms:
            self._log(f"heal {self.fault.kind} {self.fault.node}")
            healed = self.fault
            self.fault = None
            if healed.kind == "crash":
                self._restart(healed.node)
            if healed.kind == "pause":
                # A resumed process may serve a write before it reads its socket or
                # the controller: it acts once on its stale view.
                self._node_step(healed.node, poll=False)
        if self.fault is not None or not allowed or self.rng.random() > 0.01:
            return
        kind = self.rng.choice(("crash", "isolate", "split", "delay", "pause", "controller_down"))
        node = self.rng.choice(sorted(self.nodes))
        if self.rng.random() < 0.6:  # hit the master more often: failover is the point
            node = self.control.replica_set(GROUP).master or node
        self.fault = _Fault(kind, node, self.now_ms + self.rng.randint(100, 1500))
        self._count(f"fault_{kind}")
        self._log(f"fault {kind} {node} until {self.fault.until_ms}")
        if kind == "crash":
            self.inflight = [m for m in self.inflight if m[2] != node]

    def _restart(self, n: int) -> None:
        """A crashed node comes back with what its disk kept: log, epoch, commit."""
        old = self.nodes[n]
        fresh = MasterSlaveReplica(n, GROUP, old.replicas, lag_ms=LAG_MS)
        fresh.log = list(old.log)
        fresh.epoch = old.epoch
        fresh.commit = old.commit
        self.nodes[n] = fresh

    def _deliver(self) -> None:
        due = sorted(m for m in self.inflight if m[0] <= self.now_ms)
        if not due:
            return
        self.inflight = [m for m in self.inflight if m[0] > self.now_ms]
        for message in due:
            _, _, dst, payload = message
            if not self._running(dst):
                if self.fault is not None and self.fault.kind == "pause":
                    self.inflight.append(message)  # a paused process reads its socket later
                continue
            node = self.nodes[dst]
            if isinstance(payload, Append):
                reply = node.on_append(payload)
                self._send(dst, payload.master, reply)
            else:
                node.on_reply(payload, self.now_ms)
                if node.role is Role.FENCED:
                    self._log(f"node {dst} fenced by a slave at epoch {node.epoch}")
                    self._count("fenced_by_slave")

    def _controller(self) -> None:
        if self.fault is not None and self.fault.kind == "controller_down":
            return
        group = self.control.replica_set(GROUP)
        alive = frozenset(n for n, t in self.heard_ms.items() if self.now_ms - t < DEAD_AFTER_MS)
        if not controller.needs_election(group, alive):
            return
        before = group
        elected = self.control.apply(cc.ElectMaster(GROUP, tuple(sorted(alive))))
        assert isinstance(elected, ReplicaSet)
        self._count("elections")
        self._log(
            f"elect {elected.master} epoch {elected.epoch} (was {before.master}, "
            f"set {list(before.sync_state_set)}, alive {sorted(alive)})"
        )
        log = self.nodes[elected.master].log
        for write, index in self.acked.items():
            if index > len(log) or log[index - 1].data != write:
                raise Broken(
                    f"acknowledged write {write!r} at {index} is not in the log of the new "
                    f"master {elected.master} (epoch {elected.epoch})"
                )

    def _node_step(self, n: int, poll: bool = True) -> None:
        node = self.nodes[n]
        polls = poll and (self.now_ms // STEP_MS + n) % (POLL_MS // STEP_MS) == 0
        if polls and not self._cut(n, CONTROLLER):
            self.heard_ms[n] = self.now_ms
            node.on_controller(self._view(), self.now_ms)
        if node.role is Role.MASTER:
            self._write(node, always=not poll)
            self._ask_controller(node)
            for peer, append in node.appends():
                self._send(n, peer, append)
            self._note_acks(node)

    def _write(self, node: MasterSlaveReplica, always: bool = False) -> None:
        if not always and self.rng.random() > 0.5:
            return
        self.serial += 1
        write = f"w{self.serial}".encode()
        index = node.propose(write)
        owner = self.writer_of_epoch.setdefault(node.epoch, node.node_id)
        if owner != node.node_id:
            raise Broken(
                f"two masters took writes in epoch {node.epoch}: {owner} and {node.node_id}"
            )
        self.proposed[(node.node_id, index)] = write
        self._count("proposed")

    def _ask_controller(self, node: MasterSlaveReplica) -> None:
        request = node.sync_state_request(self.now_ms)
        if request is None:
            return
        if self._cut(node.node_id, CONTROLLER):
            return  # unanswered: the node reads the record again when it can
        try:
            group = self.control.apply(
                cc.AlterSyncStateSet(
                    request.group_id,
                    request.master,
                    request.epoch,
                    request.sync_state_set_epoch,
                    tuple(request.sync_state_set),
                )
            )
        except Fenced as exc:
            self._log(f"node {node.node_id} fenced by the controller (epoch {exc.epoch})")
            self._count("fenced_by_controller")
            node.on_fenced(exc.master, exc.epoch)
            return
        except NameserverError:
            node.on_alter_refused()
            return
        assert isinstance(group, ReplicaSet)
        self._count("set_changes")
        self._log(f"set of {group.master} -> {list(group.sync_state_set)}")
        if self.rng.random() < 0.2:
            self._count("answers_lost")
            return  # the answer is lost: the next read of the record brings it
        node.on_controller(self._view(), self.now_ms)

    def _note_acks(self, node: MasterSlaveReplica) -> None:
        for index in range(max(1, node.commit - 300), node.commit + 1):
            write = self.proposed.pop((node.node_id, index), None)
            if write is None:
                continue
            if node.log[index - 1].data != write:
                continue  # overwritten before it committed: never acknowledged
            self.acked[write] = index
            self._count("acknowledged")

    # -- checks --------------------------------------------------------------------------

    def _check_committed_prefixes(self) -> None:
        master = self.control.replica_set(GROUP).master
        if not master:
            return
        reference = self.nodes[master]
        for n, node in self.nodes.items():
            upto = min(node.commit, reference.commit, node.last_index, reference.last_index)
            if upto and node.log[upto - 1] != reference.log[upto - 1]:
                raise Broken(f"node {n} and master {master} differ at committed index {upto}")

    def _check_final(self) -> None:
        group = self.control.replica_set(GROUP)
        log = self.nodes[group.master].log
        for write, index in self.acked.items():
            if index > len(log) or log[index - 1].data != write:
                raise Broken(f"acknowledged write {write!r} at {index} lost at the end")
        if not self.acked:
            raise Broken("nothing was acknowledged")


def run_controller_seed(seed: int, replicas: int = 2) -> RunResult:
    """Run one seed; the result names the first broken promise, if any."""
    sim = Simulation(seed, replicas)
    failure = None
    try:
        sim.run()
    except AssertionError as exc:  # Broken, or a core's own assertion
        failure = str(exc) or type(exc).__name__
    return RunResult(seed, failure, sim.stats, sim.trace)
