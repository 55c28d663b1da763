"""A whole simulated cluster: nodes, network, clients and a seeded fault schedule.

``run_seed(seed)`` is the whole of one simulation run. One
``random.Random(seed)`` draws the run's shape (nodes, groups, fault rates,
compaction), then every message fate, client choice, crash and election
timeout, in event order; there is no wall clock and no thread, so a seed
replays exactly (the trace digest proves it).

A run has two phases:

* chaos: clients append and read while the network drops, delays,
  duplicates, reorders and partitions, and nodes crash (sometimes between
  their writes and their fsync) and restart;
* quiet: the network heals and becomes perfect, every node restarts, and
  each group must elect a leader, commit a probe append and bring every
  replica to the same applied index within a bounded simulated time.

The safety checkers run inside every step (see ``checkers``); the history is
checked for linearizability and lost acknowledged writes at the end.
"""

from __future__ import annotations

import abc
import collections
import functools
import hashlib
import random
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from raft.errors import ProposalDropped
from raft.types import (
    ConfChange,
    ConfChangeTransition,
    ConfChangeType,
    ConfChangeV2,
    ConfState,
    EntryType,
    Message,
)
from tests.sim.checkers import GroupInvariants
from tests.sim.events import EventLoop
from tests.sim.history import History, Operation, OpKind, Outcome
from tests.sim.linearizability import check_queue, check_register
from tests.sim.network import LinkFaults, SimNetwork
from tests.sim.replica import NodeOptions, SimNode

CommandT = TypeVar("CommandT")

CLIENT_ID_BASE = 1000
REGISTER_CHECK_OPS_MAX = 1_000  # the register search is exponential in the worst case


class SimulationFailed(AssertionError):
    """A run broke an invariant, lost liveness or produced a non-linearizable history."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """The shape of one run, drawn from its seed."""

    seed: int
    nodes: int = 3
    voters: int = 3  # nodes 1..voters start as voters of every group; the rest as spares
    groups: int = 2
    node: NodeOptions = field(default_factory=NodeOptions)
    tick_ms: int = 10
    chaos_ms: int = 2_000
    quiet_ms: int = 4_000
    faults: LinkFaults = field(default_factory=LinkFaults)
    fault_gap_ms_max: int = 400
    crash_weight: int = 2
    partition_weight: int = 3
    pause_weight: int = 1  # a node stops (GC pause, SIGSTOP) and later resumes with a backlog
    transfer_weight: int = 1  # a leader is asked to hand leadership to another voter
    reconfig_weight: int = 0  # a leader proposes adding, promoting or removing a member
    restart_ms_max: int = 600
    mid_ready_crash_rate: float = 0.0
    clients: int = 3
    client_timeout_ms: int = 300
    think_ms_max: int = 30
    read_rate: float = 0.3

    @classmethod
    def draw(cls, seed: int, rng: random.Random) -> RunOptions:
        """Draw a run's shape from ``rng`` (the run's one generator)."""
        voters = rng.choice((3, 3, 3, 5))
        reconfig_weight = rng.choice((0, 0, 2, 4))
        nodes = voters + (rng.choice((0, 1, 2)) if reconfig_weight else 0)
        faults = LinkFaults(
            drop_rate=rng.choice((0.0, 0.01, 0.05, 0.15)),
            duplicate_rate=rng.choice((0.0, 0.02, 0.1)),
            delay_min_ms=1,
            delay_max_ms=rng.choice((3, 10, 40)),
            tail_rate=rng.choice((0.0, 0.02, 0.1)),
            tail_delay_max_ms=rng.choice((50, 300)),
        )
        node = NodeOptions(
            election_tick=10,
            heartbeat_tick=rng.choice((1, 2, 3)),
            pre_vote=rng.random() < 0.8,
            check_quorum=rng.random() < 0.8,
            compact_every=rng.choice((0, 0, 5, 20)),
            max_size_per_msg_bytes=rng.choice((1 << 20, 16)),
            max_inflight_msgs=rng.choice((256, 4)),
            # Lazy commit news (the storage nodes' setting) on even seeds, eager on
            # odd ones; by parity, so the generator draws what it drew before.
            eager_commit_news=seed % 2 == 1,
        )
        return cls(
            seed=seed,
            nodes=nodes,
            voters=voters,
            reconfig_weight=reconfig_weight,
            chaos_ms=rng.choice((2_000, 4_000, 6_000)),
            groups=rng.choice((1, 2, 3)),
            node=node,
            faults=faults,
            fault_gap_ms_max=rng.choice((100, 400, 1000)),
            crash_weight=rng.choice((0, 1, 3)),
            partition_weight=rng.choice((0, 2, 4)),
            pause_weight=rng.choice((0, 1, 2)),
            transfer_weight=rng.choice((0, 1, 2)),
            restart_ms_max=rng.choice((100, 600, 1500)),
            mid_ready_crash_rate=rng.choice((0.0, 0.0, 0.002, 0.01)),
            clients=rng.choice((2, 3, 5)),
            client_timeout_ms=rng.choice((150, 300, 800)),
            read_rate=rng.choice((0.1, 0.3, 0.5)),
        )


@dataclass(slots=True)
class RunResult:
    """What a run did; ``failure`` is None when every check passed."""

    options: RunOptions
    failure: str | None
    trace_digest: str
    steps: int
    sim_ms: int
    ops: int
    ops_ok: int
    crashes: int
    elections: int
    messages: int
    stats: dict[str, int]
    recent_trace: list[str]

    def report(self, replay_test: str, trace_lines: int = 0) -> str:
        """A failed run's report: seed, violation, the command that reruns exactly this
        seed (``replay_test``: the pytest selection of a replay test), run shape and
        stats, and with ``trace_lines`` the last events."""
        seed = self.options.seed
        lines = [
            f"seed {seed} failed: {self.failure}",
            f"replay: RIP5_SIM_SEED={seed} .venv/bin/python -m pytest {replay_test}",
            f"run shape: {self.options}",
            f"stats: {self.stats}",
        ]
        if trace_lines:
            lines.append(f"last {trace_lines} events (sim ms, event, ...):")
            lines += self.recent_trace[-trace_lines:]
        return "\n".join(lines)


class SimClient:
    """A client with at most one operation in flight, retrying against its leader guess."""

    def __init__(self, cluster: SimCluster, client_id: int, groups: list[int], probe: bool) -> None:
        self.cluster = cluster
        self.id = client_id
        self.groups = groups
        self.probe = probe  # a liveness probe appends until one append succeeds
        self.guess = {g: cluster.rng.randint(1, cluster.options.nodes) for g in groups}
        self.op: Operation | None = None
        self.done = False

    def schedule_next(self, delay_ms: int | None = None) -> None:
        """Invoke the next operation after a think time."""
        if delay_ms is None:
            delay_ms = self.cluster.rng.randint(0, self.cluster.options.think_ms_max)
        self.cluster.loop.call_later(delay_ms, self._invoke)

    def _invoke(self) -> None:
        cluster = self.cluster
        if self.done or self.op is not None or (cluster.clients_stopped and not self.probe):
            return
        rng = cluster.rng
        group = rng.choice(self.groups)
        if not self.probe and rng.random() < cluster.options.read_rate:
            op = cluster.history.invoke(self.id, group, OpKind.READ, 0, cluster.stamp())
        else:
            op = cluster.history.invoke(
                self.id, group, OpKind.APPEND, cluster.next_value(), cluster.stamp()
            )
        self.op = op
        cluster.trace("invoke", self.id, op.op_id, group, op.kind.value, op.value)
        request = (op.kind.value, op.op_id, group, op.value)
        cluster.net.send(self.id, self.guess[group], request, may_duplicate=False)
        cluster.loop.call_later(cluster.options.client_timeout_ms, lambda: self._time_out(op))

    def _time_out(self, op: Operation) -> None:
        if self.op is not op:
            return
        History.unknown(op)
        self.op = None
        self.guess[op.group] = self.cluster.rng.randint(1, self.cluster.options.nodes)
        self.schedule_next()

    def on_response(self, response: tuple[str, int, int, int]) -> None:
        """A node answered (perhaps late, perhaps twice: stale answers are ignored)."""
        kind, op_id, a, b = response
        op = self.op
        if op is None or op.op_id != op_id:
            return
        cluster = self.cluster
        cluster.trace("response", self.id, op_id, kind, a, b)
        if kind == "ok":
            if op.kind is OpKind.APPEND:
                History.append_ok(op, cluster.stamp(), a)
                if self.probe:
                    self.done = True
            else:
                History.read_ok(op, cluster.stamp(), a, b)
        else:
            History.fail(op, cluster.stamp())
            if kind == "redirect" and a:
                self.guess[op.group] = a
            else:
                self.guess[op.group] = cluster.rng.randint(1, cluster.options.nodes)
        self.op = None
        self.schedule_next()


class CommandClient(SimClient, Generic[CommandT], abc.ABC):
    """A client of a state machine workload: one command in flight, sent to its guess of
    the group's leader. Every command ends exactly once in ``_settled``: with the node's
    answer, or with None when the outcome is unknown (an error answer, or no answer
    within the client timeout); the next one follows after a think time."""

    def __init__(self, cluster: SimCluster, client_id: int, groups: list[int], probe: bool) -> None:
        super().__init__(cluster, client_id, groups, probe)
        self.current: tuple[int, int, CommandT] | None = None  # op id, group, command
        self.next_op = 0

    def idle(self) -> bool:
        """True when this client may send its next command now."""
        cluster = self.cluster
        return not (
            self.done or self.current is not None or (cluster.clients_stopped and not self.probe)
        )

    def send(self, group: int, command: CommandT) -> None:
        """Send ``command`` to the group's guessed leader; it expires after the client timeout."""
        cluster = self.cluster
        self.next_op += 1
        op_id = self.next_op
        self.current = (op_id, group, command)
        cluster.trace("invoke", self.id, op_id, group, type(command).__name__)
        cluster.net.send(self.id, self.guess[group], (op_id, group, command), may_duplicate=False)
        cluster.loop.call_later(cluster.options.client_timeout_ms, lambda: self._expire(op_id))

    @abc.abstractmethod
    def _settled(self, current: tuple[int, int, CommandT], result: object) -> None:
        """Bookkeeping once a command ends (``result`` None: outcome unknown); called
        after ``current`` is cleared."""

    def _end(self, current: tuple[int, int, CommandT], result: object) -> None:
        self.current = None
        self._settled(current, result)

    def _expire(self, op_id: int) -> None:
        current = self.current
        if current is None or current[0] != op_id:
            return
        self._end(current, None)
        self.guess[current[1]] = self.cluster.rng.randint(1, self.cluster.options.nodes)
        self.schedule_next()

    def on_response(self, response: tuple[str, int, int, int]) -> None:
        """A node answered (perhaps late or twice: stale answers are ignored)."""
        kind, op_id, a, _b = response
        current = self.current
        if current is None or current[0] != op_id:
            return
        self.cluster.trace("response", self.id, op_id, kind)
        if kind == "ok":
            self._end(current, a)
        else:
            self._end(current, None)
            group = current[1]
            if kind == "redirect" and a:
                self.guess[group] = a
            else:
                self.guess[group] = self.cluster.rng.randint(1, self.cluster.options.nodes)
        self.schedule_next()


class SimCluster:
    """Everything of one run; see the module docstring.

    Another workload reuses the harness by subclassing: ``node_type`` hosts
    its state machine, ``new_client`` makes its clients and probes, and
    ``_check_history`` checks what they saw.
    """

    node_type: type[SimNode] = SimNode

    def __init__(self, seed: int, options: RunOptions | None = None, trace_keep: int = 200) -> None:
        self.rng = random.Random(seed)
        self.options = options if options is not None else RunOptions.draw(seed, self.rng)
        opts = self.options
        self.loop = EventLoop()
        self.net = SimNetwork(self.loop, self.rng, self._deliver, opts.faults)
        self.groups = list(range(1, opts.groups + 1))
        self.invariants = {g: GroupInvariants(g) for g in self.groups}
        self.history = History()
        self._stamp = 0
        self._value = 0
        self._digest = hashlib.blake2b(digest_size=16)
        self._recent: collections.deque[tuple[object, ...]] = collections.deque(maxlen=trace_keep)
        self.clients_stopped = False
        # Register search verdicts: True, False, None (budget ran out: the queue check stands).
        self.register_checks: collections.Counter[bool | None] = collections.Counter()
        self.chaos = True
        ids = range(1, opts.nodes + 1)
        voters = ConfState(voters=frozenset(range(1, opts.voters + 1)))
        self.nodes = {
            i: self.node_type(
                i,
                voters,  # spares too: they learn later changes from the log
                self.groups,
                opts.node,
                self.rng,
                self.invariants,
                self.net.send,
                opts.mid_ready_crash_rate,
                self._crashed,
            )
            for i in ids
        }
        self.clients = [
            self.new_client(CLIENT_ID_BASE + k, self.groups, probe=False)
            for k in range(1, opts.clients + 1)
        ]
        self.probes: list[SimClient] = []
        self.clients_by_id = {c.id: c for c in self.clients}

    def new_client(self, client_id: int, groups: list[int], probe: bool) -> SimClient:
        """A client of the workload (a probe appends until one append succeeds)."""
        return SimClient(self, client_id, groups, probe)

    # -- bookkeeping -------------------------------------------------------------------

    def stamp(self) -> int:
        """A strictly increasing history time."""
        self._stamp += 1
        return self._stamp

    def next_value(self) -> int:
        """A value never appended before."""
        self._value += 1
        return self._value

    def trace(self, *event: object) -> None:
        """Fold an event into the run's digest and the recent-events ring."""
        record = (self.loop.now_ms, *event)
        self._digest.update(repr(record).encode())
        self._recent.append(record)

    # -- wiring ---------------------------------------------------------------------------

    def _deliver(self, src: int, dst: int, payload: object) -> None:
        if dst >= CLIENT_ID_BASE:
            assert isinstance(payload, tuple)
            self.clients_by_id[dst].on_response(payload)
            return
        node = self.nodes[dst]
        if not node.up:
            return
        if node.paused_until_ms > self.loop.now_ms:
            self.loop.call_at(node.paused_until_ms, lambda: self._deliver(src, dst, payload))
            return
        if isinstance(payload, tuple) and len(payload) == 2:
            group, m = payload
            assert isinstance(m, Message)
            self.trace(
                "msg",
                src,
                dst,
                group,
                m.type.name,
                m.term,
                m.log_term,
                m.index,
                m.commit,
                len(m.entries),
                m.reject,
            )
        node.receive(src, payload)

    def _tick(self, node: SimNode) -> None:
        if node.up and node.paused_until_ms <= self.loop.now_ms:
            node.tick()
        self.loop.call_later(self.options.tick_ms, lambda: self._tick(node))

    def _crashed(self, node: SimNode) -> None:
        self.trace("crash", node.id, node.disk.size_bytes)
        if self.chaos:
            delay = self.rng.randint(1, self.options.restart_ms_max)
            self.loop.call_later(delay, lambda: self._restart(node))

    def _restart(self, node: SimNode) -> None:
        if node.up:
            return
        node.start()
        self.trace("restart", node.id, node.disk.size_bytes)
        node.maybe_handle_ready()

    # -- faults ---------------------------------------------------------------------------

    def _schedule_fault(self) -> None:
        gap = self.rng.randint(10, self.options.fault_gap_ms_max)
        self.loop.call_later(gap, self._fault)

    def _fault(self) -> None:
        if not self.chaos:
            return
        opts, rng = self.options, self.rng
        actions = ["heal", "weather"]
        actions += ["crash"] * opts.crash_weight + ["partition"] * opts.partition_weight
        actions += ["pause"] * opts.pause_weight + ["transfer"] * opts.transfer_weight
        actions += ["reconfig"] * opts.reconfig_weight
        action = rng.choice(actions)
        ids = sorted(self.nodes)
        if action == "crash":
            up = [i for i in ids if self.nodes[i].up]
            if up:
                self.nodes[rng.choice(up)].crash()
        elif action == "partition":
            self.net.heal()
            side = set(rng.sample(ids, rng.randint(1, len(ids) // 2)))
            if rng.random() < 0.3:  # isolate a current leader
                leaders = [n.id for n in self.nodes.values() if n.up and n.leads_any()]
                if leaders:
                    side = {rng.choice(leaders)}
            one_way = rng.random() < 0.25
            self.net.partition(side, set(ids) - side, one_way=one_way)
            self.trace("partition", sorted(side), one_way)
        elif action == "pause":
            up = [i for i in ids if self.nodes[i].up]
            if up:
                node = self.nodes[rng.choice(up)]
                pause_ms = rng.randint(20, 3 * opts.node.election_tick * opts.tick_ms)
                node.paused_until_ms = self.loop.now_ms + pause_ms
                self.trace("pause", node.id, pause_ms)
        elif action == "transfer":
            group = rng.choice(self.groups)
            leading = [n for n in self.nodes.values() if n.up and n.leads(group)]
            if leading:
                target = rng.choice([i for i in ids if i != leading[0].id])
                leading[0].replicas[group].raw.transfer_leader(target)
                leading[0].maybe_handle_ready()
                self.trace("transfer", group, leading[0].id, target)
        elif action == "reconfig":
            self._reconfigure(rng.choice(self.groups))
        elif action == "heal":
            self.net.heal()
            self.trace("heal")
        else:
            f = opts.faults
            self.net.faults = LinkFaults(
                drop_rate=rng.choice((0.0, f.drop_rate, 0.3)),
                duplicate_rate=f.duplicate_rate,
                delay_min_ms=f.delay_min_ms,
                delay_max_ms=rng.choice((f.delay_max_ms, 60)),
                tail_rate=f.tail_rate,
                tail_delay_max_ms=f.tail_delay_max_ms,
            )
            self.trace("weather", self.net.faults.drop_rate, self.net.faults.delay_max_ms)
        self._schedule_fault()

    def _reconfigure(self, group: int) -> None:
        """Have the group's leader propose a membership change (voters stay within 3..5).

        Single steps (add learner, promote, remove, demote) and joint
        consensus swaps (a voter in, another out, or a voter and a learner
        trading places), auto-left or left explicitly by a later empty change.
        """
        leader = self.leader_of(group)
        if leader is None:
            return
        rng = self.rng
        conf = leader.replicas[group].conf_state
        if conf.voters_outgoing:
            if not conf.auto_leave:
                self._propose_conf(leader, group, ConfChangeV2())  # leave the joint config
            return
        others = [i for i in sorted(self.nodes) if i not in conf.voters and i not in conf.learners]
        learners = sorted(conf.learners)
        choices: list[ConfChange | ConfChangeV2] = []
        transition = rng.choice(list(ConfChangeTransition))
        voters = sorted(conf.voters)
        for newcomer in (others[:1] if others else []) + (learners[:1] if learners else []):
            outgoing = rng.choice(voters)
            swap = (
                ConfChange(ConfChangeType.ADD_VOTER, newcomer),
                ConfChange(
                    rng.choice((ConfChangeType.REMOVE_NODE, ConfChangeType.ADD_LEARNER)), outgoing
                ),
            )
            choices.append(ConfChangeV2(swap, transition))
        if others:
            choices.append(ConfChange(ConfChangeType.ADD_LEARNER, rng.choice(others)))
        if learners and len(conf.voters) < 5:
            choices.append(ConfChange(ConfChangeType.ADD_VOTER, rng.choice(learners)))
        if learners:
            choices.append(ConfChange(ConfChangeType.REMOVE_NODE, rng.choice(learners)))
        if len(conf.voters) > 3:
            victim = rng.choice(sorted(conf.voters))
            choices.append(ConfChange(ConfChangeType.REMOVE_NODE, victim))
            choices.append(ConfChange(ConfChangeType.ADD_LEARNER, victim))  # demote
        if choices:
            self._propose_conf(leader, group, rng.choice(choices))

    def _propose_conf(self, leader: SimNode, group: int, change: ConfChange | ConfChangeV2) -> None:
        try:
            leader.replicas[group].raw.propose_conf_change(change)
        except ProposalDropped:
            return
        self.trace("reconfig", group, leader.id, repr(change))
        leader.maybe_handle_ready()

    def leader_of(self, group: int) -> SimNode | None:
        """The up node leading ``group`` in the highest term, if any."""
        best: SimNode | None = None
        best_term = -1
        for node in self.nodes.values():
            if node.up and node.leads(group):
                term = node.replicas[group].raw.hard_state().term
                if term > best_term:
                    best, best_term = node, term
        return best

    def _end_chaos(self) -> None:
        self.chaos = False
        self.clients_stopped = True
        self.net.heal()
        self.net.faults = LinkFaults.perfect()
        for node in self.nodes.values():
            node.mid_ready_crash_rate = 0.0
            node.paused_until_ms = 0
            if not node.up:
                self._restart(node)
        self.trace("quiet")
        for k, group in enumerate(self.groups, start=1):
            probe = self.new_client(CLIENT_ID_BASE + 500 + k, [group], probe=True)
            self.probes.append(probe)
            self.clients_by_id[probe.id] = probe
            probe.schedule_next(0)

    def converged(self) -> bool:
        """Every probe succeeded and all replicas of each group applied the same last index."""
        if not all(p.done for p in self.probes):
            return False
        for group in self.groups:
            leader = self.leader_of(group)
            if leader is None:
                return False
            conf = leader.replicas[group].conf_state
            last = leader.replicas[group].log.last_index()
            for node in self.nodes.values():
                if node.is_member(conf):
                    replica = node.replicas[group]
                    if replica.applied != last or replica.log.last_index() != last:
                        return False
        return True

    # -- the run --------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Run both phases and every check; never raises for a failed check."""
        opts = self.options
        failure: str | None = None
        try:
            for node in self.nodes.values():
                offset = self.rng.randint(0, opts.tick_ms - 1)
                self.loop.call_later(offset, functools.partial(self._tick, node))
            for client in self.clients:
                client.schedule_next()
            self._schedule_fault()
            self.loop.run_until(opts.chaos_ms)
            self._end_chaos()
            deadline = opts.chaos_ms + opts.quiet_ms
            while not self.converged():
                if self.loop.now_ms >= deadline:
                    raise SimulationFailed(f"no liveness: {self._liveness_report()}")
                self.loop.run_until(self.loop.now_ms + opts.tick_ms)
            failure = self._check_history()
        except AssertionError as exc:  # invariant violations are AssertionErrors
            failure = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - a crash of the core is a failed run too
            failure = f"{type(exc).__name__} raised: {exc}"
        ops = self.history.ops
        return RunResult(
            options=opts,
            failure=failure,
            trace_digest=self._digest.hexdigest(),
            steps=self.loop.steps,
            sim_ms=self.loop.now_ms,
            ops=len(ops),
            ops_ok=sum(1 for op in ops if op.outcome is Outcome.OK),
            crashes=sum(n.crashes for n in self.nodes.values()),
            elections=sum(len(inv.leaders) for inv in self.invariants.values()),
            messages=self.net.stats.sent,
            stats=self._stats(),
            recent_trace=[repr(r) for r in self._recent],
        )

    def _stats(self) -> dict[str, int]:
        nodes = self.nodes.values()
        ops = self.history.ops
        return {
            "reads_ok": sum(1 for op in ops if op.kind is OpKind.READ and op.outcome is Outcome.OK),
            "appends_ok": sum(
                1 for op in ops if op.kind is OpKind.APPEND and op.outcome is Outcome.OK
            ),
            "unknown": sum(1 for op in ops if op.outcome is Outcome.UNKNOWN),
            "snapshots_sent": sum(n.snapshots_sent for n in nodes),
            "torn_recoveries": sum(n.torn_crashes for n in nodes),
            "mid_ready_crashes": sum(n.mid_ready_crashes for n in nodes),
            "fsyncs": sum(n.disk.fsyncs for n in nodes),
            "joint_changes": sum(
                1
                for inv in self.invariants.values()
                for _term, kind, _data in inv.applied_entries()
                if kind == EntryType.CONF_CHANGE_V2
            ),
            "register_checked": self.register_checks[True],
            "register_inconclusive": self.register_checks[None],
            "conf_changes": sum(
                1
                for inv in self.invariants.values()
                for _term, kind, _data in inv.applied_entries()
                if kind in (EntryType.CONF_CHANGE, EntryType.CONF_CHANGE_V2)
            ),
            "dropped": self.net.stats.dropped,
            "duplicated": self.net.stats.duplicated,
        }

    def _check_history(self) -> str | None:
        self.history.close()
        problems: list[str] = []
        for group in self.groups:
            replicas = [n.replicas[group] for n in self.nodes.values()]
            final = max(replicas, key=lambda r: r.applied).machine.values
            ops = self.history.for_group(group)
            problems += [f"group {group}: {v}" for v in check_queue(ops, final)]
            if len(ops) <= REGISTER_CHECK_OPS_MAX:
                verdict = check_register(ops)
                if verdict is False:
                    problems.append(f"group {group}: register history is not linearizable")
                self.register_checks[verdict] += 1
        if problems:
            return "history: " + "; ".join(problems[:10])
        return None

    def _liveness_report(self) -> str:
        parts = [f"probes done {[p.done for p in self.probes]}"]
        for group in self.groups:
            for node in self.nodes.values():
                r = node.replicas[group]
                st = r.raw.status()
                parts.append(
                    f"g{group}/n{node.id}: {st.role.name} term {st.term} lead {st.lead} "
                    f"commit {st.commit} applied {r.applied} last {r.log.last_index()} "
                    f"voters {sorted(r.conf_state.voters)} learners {sorted(r.conf_state.learners)}"
                )
        return "; ".join(parts)


def run_seed(seed: int) -> RunResult:
    """One whole simulation run for ``seed``."""
    return SimCluster(seed).run()
