"""The nameserver's metadata state machine under simulation, through raft.

The raft harness of ``cluster``/``replica`` hosts, in every group, the
nameserver's real :class:`MetadataState` (commands encoded by the real
codec, one per log entry, as ``nameserver.service`` proposes them) instead
of the integer queue. Leaders stamp the commands that carry a time with
their own clock (the simulated time plus a per-node skew: clocks disagree as
real ones do).

Clients create, update and delete topics and consumer groups, send storage
node and broker heartbeats, place groups, report leaders, expire, and
acquire, renew and release leases, while the usual faults happen (crashes
losing what was not fsynced, torn writes, partitions, drops, duplicates,
delays, pauses, leader transfers, snapshot installs). :class:`MetadataModel`
sees every applied command in log order, the first time any replica
applies it, and checks:

- every later application of that entry (other replicas, restarts, replays
  after a snapshot) gives an equal answer: the machine is deterministic;
- the revision grows by exactly one with each command that changed
  something and stays put otherwise;
- lease exclusivity, judged by a model of leases fed the same commands: an
  acquire or renew succeeds exactly when no other owner holds the lease
  unexpired at the command's time, so two owners never hold it at once;
- fencing tokens: a grant within the holder's unexpired tenure keeps the
  lease's token, a new tenure gets a token larger than any the lease had.

At the end every replica of a group holds the same state (equal snapshot
bytes), a state restored from that snapshot gives the same bytes, every
acknowledged command is the one in the log at the index it was answered
from, and the final topics are exactly those the applied creates and
deletes leave (so no acknowledged creation is lost).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from nameserver import commands as c
from nameserver.errors import NameserverError
from nameserver.records import Lease, StorageLoad
from nameserver.state import Applied, MetadataState
from raft.errors import ProposalDropped
from raft.types import Entry, Ready, Role
from tests.sim.cluster import (
    CLIENT_ID_BASE,
    CommandClient,
    RunOptions,
    RunResult,
    SimClient,
    SimCluster,
)
from tests.sim.replica import Replica, SimNode

CLUSTER = "sim"
GROUP_COUNT = 4
TOPICS = tuple(f"topic-{i}" for i in range(6))
CONSUMER_GROUPS = tuple(f"group-{i}" for i in range(3))
LEASES = ("txn-check", "timer-scan")
OWNERS = ("broker-a", "broker-b", "broker-c")
STORAGE_NODES = (1, 2, 3, 4)
CLOCK_SKEW_MS_MAX = 40


def _comparable(result: object) -> object:
    """An answer in a form that compares across replicas (errors by type and text)."""
    if isinstance(result, NameserverError):
        return (type(result).__name__, str(result))
    return result


def _unstamped(command: c.Command) -> c.Command:
    """``command`` without the leader's time (what the client sent)."""
    if hasattr(command, "now_ms"):
        return dataclasses.replace(command, now_ms=0)  # type: ignore[arg-type]
    return command


# ------------------------------------------------------------------------ the model


@dataclass(slots=True)
class _GroupModel:
    """What one group's applied commands imply, in log order."""

    revision: int = 0
    last_index: int = 0  # the highest log index seen applied
    answers: dict[int, object] = field(default_factory=dict)  # log index -> comparable answer
    commands: dict[int, c.Command] = field(default_factory=dict)  # log index -> command
    topics: set[str] = field(default_factory=set)
    leases: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> owner, expires
    tokens: dict[str, int] = field(default_factory=dict)  # name -> its largest token granted
    changes: int = 0
    lease_grants: int = 0
    lease_refusals: int = 0


class MetadataModel:
    """Checks every applied command of every group (see the module docstring)."""

    def __init__(self) -> None:
        self.groups: dict[int, _GroupModel] = {}

    def observe(self, group: int, index: int, command: c.Command, result: object) -> None:
        """Check one applied command; raise AssertionError on a violation."""
        model = self.groups.setdefault(group, _GroupModel())
        answer = _comparable(result)
        if index in model.answers:
            seen = model.answers[index]
            assert seen == answer, (
                f"group {group} entry {index}: {command} answered {answer}, before {seen}"
            )
            return
        assert index > model.last_index, (
            f"group {group}: entry {index} first applied after entry {model.last_index}"
        )
        model.last_index = index
        model.answers[index] = answer
        model.commands[index] = command
        self._check_revision(group, model, command, result)
        self._check_lease(group, model, command, result)
        if isinstance(result, Applied):
            if isinstance(command, c.CreateTopic):
                model.topics.add(command.name)
            elif isinstance(command, c.DeleteTopic):
                model.topics.discard(command.name)

    @staticmethod
    def _check_revision(group: int, model: _GroupModel, command: c.Command, result: object) -> None:
        if not isinstance(result, Applied):
            return  # a refused command changes nothing (the final state comparison checks)
        expected = model.revision + (1 if result.changes else 0)
        assert result.revision == expected, (
            f"group {group}: {type(command).__name__} left revision {result.revision}, "
            f"expected {expected}"
        )
        assert all(change.revision == result.revision for change in result.changes), (
            f"group {group}: changes of one command carry other revisions"
        )
        model.revision = result.revision
        model.changes += bool(result.changes)

    @staticmethod
    def _check_token(
        group: int,
        model: _GroupModel,
        command: c.AcquireLease | c.RenewLease,
        held: tuple[str, int] | None,
        lease: object,
    ) -> None:
        """The granted lease's fencing token: kept within a tenure, larger for a new one."""
        assert isinstance(lease, Lease), f"group {group}: {command} answered {lease}"
        last = model.tokens.get(command.name)
        same_tenure = held is not None and held[0] == command.owner and held[1] > command.now_ms
        if same_tenure:
            assert lease.token == last, (
                f"group {group}: {type(command).__name__} {command.name} by {command.owner} "
                f"changed the token of its tenure from {last} to {lease.token}"
            )
        else:
            assert last is None or lease.token > last, (
                f"group {group}: {type(command).__name__} {command.name} by {command.owner} "
                f"began a tenure with token {lease.token}, not above the last one {last}"
            )
        model.tokens[command.name] = lease.token

    @staticmethod
    def _check_lease(group: int, model: _GroupModel, command: c.Command, result: object) -> None:
        leases = model.leases
        if isinstance(command, c.Expire) and isinstance(result, Applied):
            for name, (_owner, expires_ms) in list(leases.items()):
                if expires_ms <= command.now_ms:
                    del leases[name]
            return
        if isinstance(command, c.ReleaseLease):
            held = leases.get(command.name)
            assert isinstance(result, Applied) == (held is not None and held[0] == command.owner), (
                f"group {group}: release of {command.name} by {command.owner} answered {result}"
                f" while the model has {held}"
            )
            if isinstance(result, Applied):
                del leases[command.name]
            return
        if not isinstance(command, (c.AcquireLease, c.RenewLease)):
            return
        held = leases.get(command.name)
        other_holds = held is not None and held[0] != command.owner and held[1] > command.now_ms
        if isinstance(command, c.AcquireLease):
            may = not other_holds
        else:  # renew: only the unexpired holder
            may = held is not None and held[0] == command.owner and held[1] > command.now_ms
        granted = isinstance(result, Applied)
        assert granted == may, (
            f"group {group}: {type(command).__name__} {command.name} by {command.owner} at "
            f"{command.now_ms} {'granted' if granted else 'refused'} while the model has {held}"
        )
        if granted:
            assert not other_holds, f"group {group}: two owners hold lease {command.name}"
            assert isinstance(result, Applied)
            MetadataModel._check_token(group, model, command, held, result.value)
            leases[command.name] = (command.owner, command.now_ms + command.ttl_ms)
            model.lease_grants += 1
        else:
            model.lease_refusals += 1


# ------------------------------------------------------------------------ nodes


class NameserverSimNode(SimNode):
    """A simulated nameserver node whose groups apply the metadata state machine."""

    clock_ms: Any = None  # set by the cluster: () -> this node's wall clock
    model: MetadataModel

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # (group, log index) -> (term, client, op id) of proposals awaiting their apply
        self.pending: dict[tuple[int, int], tuple[int, int, int]] = {}
        super().__init__(*args, **kwargs)

    def new_machine(self, group: int, snapshot_data: bytes | None) -> MetadataState:
        """An empty metadata state, or one restored from a snapshot."""
        if snapshot_data is None:
            return MetadataState()
        return MetadataState.restore(snapshot_data)

    def snapshot_data(self, replica: Replica) -> bytes:
        """The metadata snapshot."""
        state: MetadataState = replica.machine
        return state.snapshot()

    def crash(self) -> None:
        """Lose the volatile state, including unanswered proposals."""
        super().crash()
        self.pending = {}

    def _serve(self, client: int, request: tuple[object, ...]) -> None:
        op_id, group, command = request
        assert isinstance(op_id, int)
        assert isinstance(group, int)
        raw = self.replicas[group].raw
        if raw.role != Role.LEADER:
            self._reply(client, ("redirect", op_id, raw.lead, 0))
            return
        if hasattr(command, "now_ms"):
            command = dataclasses.replace(command, now_ms=self.clock_ms())  # type: ignore[type-var]
        try:
            raw.propose(c.encode(command))  # type: ignore[arg-type]
        except ProposalDropped:
            self._reply(client, ("fail", op_id, 0, 0))
            return
        status = raw.status()
        self.pending[(group, status.last_index)] = (status.term, client, op_id)

    def apply_entry(self, replica: Replica, entry: Entry) -> None:
        """Apply into the metadata state; report to the model; answer the proposer."""
        if not entry.data:
            return  # a new leader's empty entry
        state: MetadataState = replica.machine
        command = c.decode(entry.data)
        result: object
        try:
            result = state.apply(command)
        except NameserverError as exc:
            result = exc
        self.model.observe(replica.group, entry.index, command, result)
        waiting = self.pending.pop((replica.group, entry.index), None)
        if waiting is not None:
            term, client, op_id = waiting
            if term == entry.term:
                self._reply(client, ("ok", op_id, entry.index, 0))
            else:
                self._reply(client, ("fail", op_id, 0, 0))

    def serve_reads(self, replica: Replica, ready: Ready) -> None:
        """This workload makes no raft reads."""


# ------------------------------------------------------------------------ clients


class MetadataClient(CommandClient[c.Command]):
    """Sends metadata commands; one in flight; a command with an unknown outcome is resent."""

    def __init__(self, cluster: SimCluster, client_id: int, groups: list[int], probe: bool) -> None:
        super().__init__(cluster, client_id, groups, probe)
        self.meta_cluster: NameserverSimCluster = cluster  # type: ignore[assignment]
        self.unsure: tuple[int, c.Command] | None = None  # group, command
        self.created: set[int] = set()  # groups where this client's CreateCluster was applied

    def _invoke(self) -> None:
        if not self.idle():
            return
        rng = self.cluster.rng
        if self.unsure is not None and rng.random() < 0.5:
            group, command = self.unsure  # resend: raft may apply it twice, both are checked
        else:
            group = rng.choice(self.groups)
            command = self._choose(rng, group)
        self.send(group, command)

    def _choose(self, rng: random.Random, group: int) -> c.Command:
        if group not in self.created or self.probe:
            return c.CreateCluster(CLUSTER, GROUP_COUNT)  # each group is a state of its own
        roll = rng.random()
        if roll < 0.2:
            return c.CreateTopic(rng.choice(TOPICS), CLUSTER, rng.randint(1, 8))
        if roll < 0.27:
            return c.UpdateTopic(rng.choice(TOPICS), queue_count=rng.randint(1, 16))
        if roll < 0.35:
            return c.DeleteTopic(rng.choice(TOPICS))
        if roll < 0.4:
            return c.CreateConsumerGroup(rng.choice(CONSUMER_GROUPS), CLUSTER, rng.random() < 0.5)
        if roll < 0.43:
            return c.DeleteConsumerGroup(rng.choice(CONSUMER_GROUPS))
        if roll < 0.5:
            node = rng.choice(STORAGE_NODES)
            load = StorageLoad(groups=rng.randint(0, GROUP_COUNT))
            return c.StorageHeartbeat(node, CLUSTER, f"10.0.0.{node}:7701", 0, load)
        if roll < 0.53:
            owner = rng.choice(OWNERS)
            return c.BrokerHeartbeat(owner, CLUSTER, f"{owner}:8081", 0, ("producers",))
        if roll < 0.57:
            first = rng.randint(1, GROUP_COUNT)
            replicas = tuple(rng.sample(STORAGE_NODES, 3))
            return c.SetReplicas((c.ReplicaAssignment(first, replicas),))
        if roll < 0.61:
            node = rng.choice(STORAGE_NODES)
            report = c.LeaderReport(rng.randint(1, GROUP_COUNT), node, rng.randint(1, 5))
            return c.ReportLeaders(node, (report,))
        if roll < 0.65:
            return c.Expire(0, rng.choice((50, 200)), rng.choice((50, 200)))
        lease, owner = rng.choice(LEASES), rng.choice(OWNERS)
        if roll < 0.82:
            return c.AcquireLease(lease, owner, 0, rng.choice((30, 100, 300)))
        if roll < 0.93:
            return c.RenewLease(lease, owner, 0, rng.choice((30, 100, 300)))
        return c.ReleaseLease(lease, owner)

    def _settled(self, current: tuple[int, int, c.Command], result: object) -> None:
        """Bookkeeping once a command ends; ``result`` is its log index (None: unknown)."""
        _op_id, group, command = current
        if result is None:
            self.unsure = (group, command)
            return
        assert isinstance(result, int), result
        index = result
        if self.unsure is not None and self.unsure[1] is command:
            self.unsure = None
        if isinstance(command, c.CreateCluster):
            self.created.add(group)
        self.meta_cluster.acknowledged.append((group, index, _unstamped(command)))
        if self.probe:
            self.done = True


# ------------------------------------------------------------------------ the cluster


class NameserverSimCluster(SimCluster):
    """A run of the metadata workload; see the module docstring."""

    node_type = NameserverSimNode

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        drawn = RunOptions.draw(seed, rng)
        options = dataclasses.replace(
            drawn,
            nodes=drawn.voters,
            reconfig_weight=0,
            clients=drawn.clients + 1,
            client_timeout_ms=max(drawn.client_timeout_ms, 300),
        )
        self.model = MetadataModel()
        # (group, log index, command as the client sent it) of every "ok" answer
        self.acknowledged: list[tuple[int, int, c.Command]] = []
        super().__init__(seed, options)
        skews = {i: self.rng.randint(-CLOCK_SKEW_MS_MAX, CLOCK_SKEW_MS_MAX) for i in self.nodes}
        for node_id, node in self.nodes.items():
            assert isinstance(node, NameserverSimNode)
            node.model = self.model
            node.clock_ms = lambda skew=skews[node_id]: self.loop.now_ms + 1000 + skew

    def new_client(self, client_id: int, groups: list[int], probe: bool) -> SimClient:
        """A metadata workload client."""
        return MetadataClient(self, client_id, groups, probe)

    def _check_history(self) -> str | None:
        problems: list[str] = []
        for group in self.groups:
            problems += self._check_group(group)
        problems += self._check_acknowledged()
        if problems:
            return "nameserver: " + "; ".join(problems[:10])
        return None

    def _check_group(self, group: int) -> list[str]:
        leader = self.leader_of(group)
        assert leader is not None
        state: MetadataState = leader.replicas[group].machine
        image = state.snapshot()
        problems = [
            f"group {group}: node {node.id} state differs from leader {leader.id}"
            for node in self.nodes.values()
            if node.replicas[group].machine.snapshot() != image
        ]
        if MetadataState.restore(image).snapshot() != image:
            problems.append(f"group {group}: a state restored from its snapshot differs")
        model = self.model.groups.get(group, _GroupModel())
        if state.revision != model.revision:
            problems.append(f"group {group}: revision {state.revision}, model {model.revision}")
        topics = {topic.name for topic in state.topics()}
        if topics != model.topics:
            problems.append(f"group {group}: topics {sorted(topics)}, model {sorted(model.topics)}")
        return problems

    def _check_acknowledged(self) -> list[str]:
        problems = []
        for group, index, sent in self.acknowledged:
            logged = self.model.groups.get(group, _GroupModel()).commands.get(index)
            if logged is None or _unstamped(logged) != sent:
                problems.append(f"group {group}: acknowledged {sent} at {index}, log has {logged}")
        return problems

    def _stats(self) -> dict[str, int]:
        stats = super()._stats()
        groups = self.model.groups.values()
        stats.update(
            acknowledged=len(self.acknowledged),
            changes=sum(g.changes for g in groups),
            lease_grants=sum(g.lease_grants for g in groups),
            lease_refusals=sum(g.lease_refusals for g in groups),
            topics_at_end=sum(len(g.topics) for g in groups),
        )
        return stats


def run_nameserver_seed(seed: int) -> RunResult:
    """One whole nameserver simulation run for ``seed``."""
    return NameserverSimCluster(seed).run()


__all__ = ["CLIENT_ID_BASE", "NameserverSimCluster", "run_nameserver_seed"]
