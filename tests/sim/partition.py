"""The partition state machine under simulation: queues, pop, ack and DLQ through raft.

The raft harness of ``cluster``/``replica`` hosts, in every group, the
storage node's real :class:`PartitionState` (commands encoded by the real
codec, one per log entry) instead of the integer queue. Leaders stamp each
command with their own clock (the simulated time plus a per-node skew, so
clocks disagree as real ones do); snapshots are group images (partition
snapshot plus the APPEND entries it references), so a compacted or
snapshot-installed replica must still read every body back.

Clients append batches (sometimes resending a batch whose outcome they never
learned, with the same message ids), receive for a plain and a FIFO
consumer group, ack, change invisible durations (0 is a nack) and commit
consumer offsets (a pull consumer's commit, back or forth), while the usual
faults happen. :class:`PopModel` checks every applied command against
a brute-force model of the semantics, in log order, the first time any
replica applies it, and checks that every later application of that entry
(other replicas, restarts) returns an equal result:

- offsets are dense and unique per queue, a resent message keeps its offset;
- no message is delivered to a group while it is invisible to that group;
- attempt counts are exact (1 + earlier deliveries to that group), never
  beyond the maximum;
- FIFO: a message is delivered only when every earlier message of its
  message group is done (acked or dead-lettered) for that group;
- a message is dead-lettered exactly when it expired at its last attempt;
- acks and invisibility changes succeed exactly for current, unexpired handles
  (a consumer's commit never invalidates one);
- a consumer's commit to X (clamped to the queue) moves where pop resumes:
  offsets from the group's first fresh offset up to X become done, or from X
  up to it fresh again (attempts start over), except offsets in flight.

At the end, every replica of a group holds the same state (equal snapshot
bytes), no acknowledged append is lost (its offset names its message, whose
body reads back), and a final receive far in the future hands out or
dead-letters exactly the messages not yet done.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from protocol import errors
from protocol.records import MessageRecord
from protocol.storage_api import ReceiptHandle
from protocol.vocabulary import Placement
from raft.errors import ProposalDropped
from raft.types import Entry, Ready, Role
from storage_node.errors import InvalidReceiptHandle, StorageError
from storage_node.partition.commands import (
    COMMAND_TYPES,
    Ack,
    Append,
    ChangeInvisibleDuration,
    Command,
    CommitConsumerOffset,
    Receive,
    decode,
    encode,
)
from storage_node.partition.config import PartitionConfig
from storage_node.partition.image import decode_image, encode_image
from storage_node.partition.queues import dead_letter_topic
from storage_node.partition.reads import record_at
from storage_node.partition.results import (
    AckResult,
    AppendResult,
    ChangeInvisibleDurationResult,
    CommitOffsetResult,
    Delivery,
    ReceiveResult,
)
from storage_node.partition.snapshot import restore, take_snapshot
from storage_node.partition.state import PartitionState
from tests.sim.cluster import (
    CLIENT_ID_BASE,
    CommandClient,
    RunOptions,
    RunResult,
    SimClient,
    SimCluster,
)
from tests.sim.replica import Replica, SimNode

MAX_ATTEMPTS = 3
CONSUMER_GROUPS = (("plain", False), ("fifo", True))
MESSAGE_GROUPS = ("", "a", "b")
CLOCK_SKEW_MS_MAX = 40


def queue_of(group: int) -> tuple[str, int]:
    """The one queue each raft group serves in the run."""
    return (f"topic-{group}", 0)


@dataclass(slots=True)
class PartitionMachine:
    """A replica's state: the partition state plus the APPEND entries it applied."""

    state: PartitionState
    bodies: dict[int, bytes] = field(default_factory=dict)


def _comparable(result: object) -> object:
    if isinstance(result, StorageError):
        return (type(result).__name__, str(result))
    return result


# ------------------------------------------------------------------------ the model


@dataclass(slots=True)
class _Lease:
    attempts: int = 0
    until_ms: int = 0
    generation: int = 0
    done: bool = False
    across_commit: bool = False  # its current handle was in flight when a commit applied


@dataclass(slots=True)
class _GroupModel:
    clock_ms: int = 0
    queues: dict[tuple[str, int], list[tuple[str, str]]] = field(default_factory=dict)
    offsets: dict[tuple[str, str], int] = field(default_factory=dict)  # (topic, id) -> offset
    leases: dict[tuple[str, int], _Lease] = field(default_factory=dict)  # (cgroup, offset)
    results: dict[int, object] = field(default_factory=dict)  # log index -> result
    deliveries: int = 0
    redeliveries: int = 0
    dead_letters: int = 0
    acks_ok: int = 0
    changes_ok: int = 0
    commits: int = 0
    acks_across_commits: int = 0


class PopModel:
    """Checks each group's applied commands against the semantics (module docstring)."""

    def __init__(self) -> None:
        self.groups: dict[int, _GroupModel] = {}

    def observe(self, group: int, index: int, data: bytes, result: object) -> None:
        """A replica applied entry ``index`` of ``group`` with ``result``."""
        model = self.groups.setdefault(group, _GroupModel())
        seen = model.results.get(index)
        if seen is not None or index in model.results:
            if _comparable(seen) != _comparable(result):
                raise AssertionError(
                    f"group {group} entry {index}: replicas disagree: {seen!r} vs {result!r}"
                )
            return
        model.results[index] = result
        command = decode(data)
        model.clock_ms = max(model.clock_ms, command.now_ms)
        if isinstance(command, Append):
            self._append(group, model, command, result)
        elif isinstance(command, Receive):
            self._receive(group, model, command, index, result)
        elif isinstance(command, Ack):
            self._ack(group, model, command, result)
        elif isinstance(command, ChangeInvisibleDuration):
            self._change(group, model, command, index, result)
        elif isinstance(command, CommitConsumerOffset):
            self._commit(group, model, command, result)
        else:
            raise AssertionError(f"group {group}: unexpected command {command!r}")

    def lease(self, model: _GroupModel, cgroup: str, offset: int) -> _Lease:
        """The model's state of one offset for one consumer group."""
        return model.leases.setdefault((cgroup, offset), _Lease())

    def _append(self, group: int, model: _GroupModel, command: Append, result: object) -> None:
        assert isinstance(result, AppendResult), f"group {group}: append gave {result!r}"
        for record, outcome in zip(command.records, result.outcomes, strict=True):
            key = (record.topic, record.message_id)
            known = model.offsets.get(key)
            queue = model.queues.setdefault((record.topic, record.queue_id), [])
            if known is not None:
                if not outcome.duplicate or outcome.queue_offset != known:
                    raise AssertionError(
                        f"group {group}: resent {record.message_id} got {outcome}, "
                        f"first stored at offset {known}"
                    )
                continue
            if outcome.duplicate or outcome.placement is not Placement.QUEUED:
                raise AssertionError(f"group {group}: new {record.message_id} got {outcome}")
            if outcome.queue_offset != len(queue):
                raise AssertionError(
                    f"group {group}: {record.message_id} got offset {outcome.queue_offset}, "
                    f"the queue's next offset is {len(queue)} (offsets must be dense)"
                )
            queue.append((record.message_id, record.message_group))
            model.offsets[key] = outcome.queue_offset

    def _receive(
        self, group: int, model: _GroupModel, command: Receive, index: int, result: object
    ) -> None:
        assert isinstance(result, ReceiveResult), f"group {group}: receive gave {result!r}"
        clock = model.clock_ms
        cgroup = command.group
        queue = model.queues.get((command.topic, command.queue_id), [])
        where = f"group {group} entry {index} ({cgroup})"
        for dead in result.dead_lettered:
            lease = self.lease(model, cgroup, dead.queue_offset)
            if lease.done or lease.attempts != command.max_delivery_attempts:
                raise AssertionError(f"{where}: dead-lettered {dead} with model lease {lease}")
            if lease.until_ms > clock:
                raise AssertionError(f"{where}: dead-lettered {dead} while still invisible")
            dlq = model.queues.setdefault((dead_letter_topic(cgroup), group), [])
            if dead.dead_letter_offset != len(dlq):
                raise AssertionError(f"{where}: DLQ offset {dead.dead_letter_offset} not dense")
            dlq.append(queue[dead.queue_offset])
            lease.done = True
            model.dead_letters += 1
        granted_groups: set[str] = set()
        for delivery in result.deliveries:
            self._delivered(where, model, command, index, queue, delivery, granted_groups)

    def _delivered(
        self,
        where: str,
        model: _GroupModel,
        command: Receive,
        index: int,
        queue: list[tuple[str, str]],
        delivery: Delivery,
        granted_groups: set[str],
    ) -> None:
        clock = model.clock_ms
        offset = delivery.handle.queue_offset
        if not 0 <= offset < len(queue):
            raise AssertionError(f"{where}: delivered offset {offset} outside the queue")
        lease = self.lease(model, command.group, offset)
        if lease.done:
            raise AssertionError(f"{where}: delivered offset {offset}, already done")
        if lease.attempts and lease.until_ms > clock:
            raise AssertionError(
                f"{where}: delivered offset {offset} at {clock} while invisible "
                f"until {lease.until_ms}"
            )
        if delivery.delivery_attempt != lease.attempts + 1:
            raise AssertionError(
                f"{where}: offset {offset} attempt {delivery.delivery_attempt} after "
                f"{lease.attempts} deliveries"
            )
        if delivery.delivery_attempt > command.max_delivery_attempts:
            raise AssertionError(f"{where}: offset {offset} delivered beyond max attempts")
        if delivery.invisible_until_ms != clock + command.invisible_duration_ms:
            raise AssertionError(f"{where}: offset {offset} has the wrong invisible time")
        if delivery.handle.generation != index:
            raise AssertionError(f"{where}: offset {offset} handle generation is not {index}")
        message_group = queue[offset][1]
        if command.fifo and message_group:
            if message_group in granted_groups:
                raise AssertionError(f"{where}: two messages of {message_group!r} in one receive")
            granted_groups.add(message_group)
            for earlier in range(offset):
                if (
                    queue[earlier][1] == message_group
                    and not self.lease(model, command.group, earlier).done
                ):
                    raise AssertionError(
                        f"{where}: FIFO offset {offset} of {message_group!r} delivered while "
                        f"offset {earlier} of the same message group is not done"
                    )
        model.deliveries += 1
        model.redeliveries += lease.attempts > 0
        lease.attempts = delivery.delivery_attempt
        lease.until_ms = delivery.invisible_until_ms
        lease.generation = index
        lease.across_commit = False

    def _valid(self, model: _GroupModel, cgroup: str, handle: ReceiptHandle) -> _Lease | None:
        lease = model.leases.get((cgroup, handle.queue_offset))
        if lease is None or lease.done or lease.generation != handle.generation:
            return None
        return lease if model.clock_ms < lease.until_ms else None

    def _ack(self, group: int, model: _GroupModel, command: Ack, result: object) -> None:
        assert isinstance(result, AckResult), f"group {group}: ack gave {result!r}"
        for handle, outcome in zip(command.handles, result.outcomes, strict=True):
            lease = self._valid(model, command.group, handle)
            expected = None if lease is not None else errors.INVALID_RECEIPT_HANDLE
            if outcome.error != expected:
                raise AssertionError(
                    f"group {group}: ack of {handle} gave {outcome.error}, model says {expected}"
                )
            if lease is not None:
                lease.done = True
                model.acks_ok += 1
                model.acks_across_commits += lease.across_commit

    def _change(
        self,
        group: int,
        model: _GroupModel,
        command: ChangeInvisibleDuration,
        index: int,
        result: object,
    ) -> None:
        lease = self._valid(model, command.group, command.handle)
        if lease is None:
            if not isinstance(result, InvalidReceiptHandle):
                raise AssertionError(f"group {group}: change of a stale handle gave {result!r}")
            return
        if not isinstance(result, ChangeInvisibleDurationResult):
            raise AssertionError(f"group {group}: change of a valid handle gave {result!r}")
        until = model.clock_ms + command.invisible_duration_ms
        if (result.invisible_until_ms, result.delivery_attempt) != (until, lease.attempts):
            raise AssertionError(f"group {group}: change gave {result}, model {until}/{lease}")
        lease.until_ms = until
        lease.generation = index
        model.changes_ok += 1

    def _commit(
        self, group: int, model: _GroupModel, command: CommitConsumerOffset, result: object
    ) -> None:
        queue = model.queues.get((command.topic, command.queue_id), [])
        offset = min(max(command.offset, 0), len(queue))
        if result != CommitOffsetResult(offset):
            raise AssertionError(f"group {group}: commit to {command.offset} gave {result!r}")

        def state(o: int) -> _Lease:
            return self.lease(model, command.group, o)

        def in_flight(lease: _Lease) -> bool:  # handed out, not done (expired or not)
            return lease.attempts > 0 and not lease.done

        cursor = next(
            (o for o in range(len(queue)) if not state(o).attempts and not state(o).done),
            len(queue),
        )
        for o in range(len(queue)):
            if in_flight(state(o)):
                state(o).across_commit = True
        for o in range(min(cursor, offset), max(cursor, offset)):
            lease = state(o)
            if in_flight(lease):
                continue
            if offset > cursor:
                lease.done = True  # skipped by the commit
            else:
                model.leases[(command.group, o)] = _Lease()  # fresh again
        model.commits += 1


# ------------------------------------------------------------------------ nodes


class PartitionSimNode(SimNode):
    """A simulated storage node whose groups apply the partition state machine."""

    clock_ms: Any = None  # set by the cluster: () -> this node's wall clock
    model: PopModel

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # (group, log index) -> (term, client, op id) of proposals awaiting their apply
        self.pending: dict[tuple[int, int], tuple[int, int, int]] = {}
        super().__init__(*args, **kwargs)

    def new_machine(self, group: int, snapshot_data: bytes | None) -> PartitionMachine:
        """An empty partition, or one restored from a group image."""
        if snapshot_data is None:
            return PartitionMachine(PartitionState(PartitionConfig(group_id=group)))
        state, bodies = decode_image(snapshot_data)
        return PartitionMachine(state, bodies)

    def snapshot_data(self, replica: Replica) -> bytes:
        """A group image: the state and every APPEND entry it still references."""
        machine: PartitionMachine = replica.machine
        referenced = machine.state.referenced_log_indexes()
        missing = referenced - machine.bodies.keys()
        assert not missing, f"node {self.id} lost the bodies of entries {sorted(missing)}"
        machine.bodies = {i: machine.bodies[i] for i in referenced}
        return encode_image(machine.state, machine.bodies)

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
        assert isinstance(command, COMMAND_TYPES)
        stamped: Command = dataclasses.replace(command, now_ms=self.clock_ms())
        try:
            raw.propose(encode(stamped))
        except ProposalDropped:
            self._reply(client, ("fail", op_id, 0, 0))
            return
        status = raw.status()
        self.pending[(group, status.last_index)] = (status.term, client, op_id)

    def apply_entry(self, replica: Replica, entry: Entry) -> None:
        """Apply into the partition state; report to the model; answer the proposer."""
        machine: PartitionMachine = replica.machine
        result: object
        try:
            result = machine.state.apply_entry(entry.data, entry.index)
        except StorageError as exc:
            result = exc
        if entry.data and entry.data[0] == Append.op:
            machine.bodies[entry.index] = entry.data
        if entry.data:
            self.model.observe(replica.group, entry.index, entry.data, result)
        machine.state.check_invariants()
        waiting = self.pending.pop((replica.group, entry.index), None)
        if waiting is not None:
            term, client, op_id = waiting
            if term == entry.term:
                self._reply(client, ("ok", op_id, result, 0))  # type: ignore[arg-type]
            else:
                self._reply(client, ("fail", op_id, 0, 0))

    def serve_reads(self, replica: Replica, ready: Ready) -> None:
        """This workload makes no raft reads."""


# ------------------------------------------------------------------------ clients


@dataclass(slots=True)
class _Held:
    cgroup: str
    handle: ReceiptHandle
    group: int


class PartitionClient(CommandClient[Command]):
    """Appends, receives, acks and changes invisibility; one operation in flight."""

    def __init__(self, cluster: SimCluster, client_id: int, groups: list[int], probe: bool) -> None:
        super().__init__(cluster, client_id, groups, probe)
        self.partition_cluster: PartitionSimCluster = cluster  # type: ignore[assignment]
        self.held: list[_Held] = []
        self.unsure_appends: list[tuple[int, Append]] = []

    def _invoke(self) -> None:
        if not self.idle():
            return
        rng = self.cluster.rng
        group = rng.choice(self.groups)
        command = self._choose(rng, group)
        self.send(self._group_of(command, group), command)

    def _group_of(self, command: Command, group: int) -> int:
        if isinstance(command, Append) and self.unsure_appends:
            for unsure_group, unsure in self.unsure_appends:
                if unsure is command:
                    return unsure_group
        if isinstance(command, Ack):
            return self._held_group(command.handles[0])
        if isinstance(command, ChangeInvisibleDuration):
            return self._held_group(command.handle)
        return group

    def _held_group(self, handle: ReceiptHandle) -> int:
        return next(h.group for h in self.held if h.handle == handle)

    def _choose(self, rng: random.Random, group: int) -> Command:
        cluster = self.partition_cluster
        roll = rng.random()
        if self.probe or roll < 0.35:
            if self.unsure_appends and rng.random() < 0.5:
                return self.unsure_appends[0][1]  # resend: the same message ids
            topic, queue_id = queue_of(group)
            records = tuple(
                MessageRecord(
                    topic,
                    queue_id,
                    cluster.next_message_id(),
                    b"body-%d" % rng.randrange(1 << 30),
                    message_group=rng.choice(MESSAGE_GROUPS),
                )
                for _ in range(rng.randint(1, 3))
            )
            return Append(0, records)
        if self.held and roll < 0.7:
            chosen = rng.choice(self.held)
            if rng.random() < 0.75:
                same = [
                    h.handle
                    for h in self.held
                    if (h.cgroup, h.group) == (chosen.cgroup, chosen.group)
                ]
                return Ack(0, chosen.cgroup, tuple(same[: rng.randint(1, 3)]))
            return ChangeInvisibleDuration(
                0, chosen.cgroup, chosen.handle, rng.choice((0, 50, 200))
            )
        cgroup, fifo = rng.choice(CONSUMER_GROUPS)
        topic, queue_id = queue_of(group)
        if roll < 0.76:  # a pull consumer of the group commits, back or forth
            stored = sum(1 for t, _ in cluster.acknowledged if t == topic)
            return CommitConsumerOffset(0, cgroup, topic, queue_id, rng.randint(-1, stored + 1))
        return Receive(
            0,
            cgroup,
            topic,
            queue_id,
            max_messages=rng.randint(1, 4),
            invisible_duration_ms=rng.choice((30, 100, 300)),
            max_delivery_attempts=MAX_ATTEMPTS,
            fifo=fifo,
        )

    def _settled(self, current: tuple[int, int, Command], result: object) -> None:
        """Bookkeeping once an operation ends (``result`` None: outcome unknown)."""
        _op_id, group, command = current
        cluster = self.partition_cluster
        if isinstance(command, Append):
            self.unsure_appends = [u for u in self.unsure_appends if u[1] is not command]
            if result is None:
                self.unsure_appends.append((group, command))
            elif isinstance(result, AppendResult):
                for record, outcome in zip(command.records, result.outcomes, strict=True):
                    cluster.acknowledged[(record.topic, record.message_id)] = outcome.queue_offset
                cluster.appends_ok += 1
                if self.probe:
                    self.done = True
        elif isinstance(command, Receive) and isinstance(result, ReceiveResult):
            self.held += [_Held(command.group, d.handle, group) for d in result.deliveries]
            self.held = self.held[-12:]
        elif isinstance(command, Ack):
            gone = set(command.handles)
            self.held = [h for h in self.held if h.handle not in gone]
        elif isinstance(command, ChangeInvisibleDuration):
            self.held = [h for h in self.held if h.handle != command.handle]
            if isinstance(result, ChangeInvisibleDurationResult):
                self.held.append(_Held(command.group, result.handle, group))


# ------------------------------------------------------------------------ the cluster


class PartitionSimCluster(SimCluster):
    """A run of the partition workload; see the module docstring."""

    node_type = PartitionSimNode

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
        self.model = PopModel()
        self.acknowledged: dict[tuple[str, str], int] = {}
        self.appends_ok = 0
        self._message_id = 0
        super().__init__(seed, options)
        skews = {i: self.rng.randint(-CLOCK_SKEW_MS_MAX, CLOCK_SKEW_MS_MAX) for i in self.nodes}
        for node_id, node in self.nodes.items():
            assert isinstance(node, PartitionSimNode)
            node.model = self.model
            node.clock_ms = lambda skew=skews[node_id]: self.loop.now_ms + 1000 + skew

    def new_client(self, client_id: int, groups: list[int], probe: bool) -> SimClient:
        """A partition workload client."""
        return PartitionClient(self, client_id, groups, probe)

    def next_message_id(self) -> str:
        """A message id never used before in the run."""
        self._message_id += 1
        return f"m{self._message_id}"

    def _check_history(self) -> str | None:
        problems: list[str] = []
        for group in self.groups:
            problems += self._check_group(group)
        if problems:
            return "partition: " + "; ".join(problems[:10])
        return None

    def _check_group(self, group: int) -> list[str]:
        leader = self.leader_of(group)
        assert leader is not None
        machine: PartitionMachine = leader.replicas[group].machine
        state = machine.state
        image = take_snapshot(state)
        problems = [
            f"group {group}: node {node.id} state differs from leader {leader.id}"
            for node in self.nodes.values()
            if take_snapshot(node.replicas[group].machine.state) != image
        ]
        model = self.model.groups.get(group, _GroupModel())
        for (topic, queue_id), messages in model.queues.items():
            if state.end_offset(topic, queue_id) != len(messages):
                problems.append(
                    f"group {group}: {topic} ends at {state.end_offset(topic, queue_id)}"
                )
                continue
            for offset, (message_id, _mg) in enumerate(messages):
                entry = state.entry(topic, queue_id, offset)
                body = machine.bodies.get(entry.log_index)
                if body is None:
                    problems.append(f"group {group}: no body for {topic}@{offset}")
                    continue
                record = record_at(body, entry, (topic, queue_id))
                wanted = record.dead_letter_message_id or record.message_id
                if wanted != message_id:
                    problems.append(f"group {group}: {topic}@{offset} reads {wanted}")
        topic, queue_id = queue_of(group)
        for (acked_topic, message_id), offset in self.acknowledged.items():
            if acked_topic != topic:
                continue
            stored = model.offsets.get((topic, message_id))
            if stored != offset:
                problems.append(
                    f"group {group}: acknowledged {message_id}@{offset} is at {stored} (lost?)"
                )
        return problems + self._check_drain(group, state, model)

    def _check_drain(self, group: int, state: PartitionState, model: _GroupModel) -> list[str]:
        """A receive long after everything expired hands out or dead-letters what is left."""
        copy = restore(take_snapshot(state))
        topic, queue_id = queue_of(group)
        queue = model.queues.get((topic, queue_id), [])
        problems = []
        now = model.clock_ms + 10**6
        for k, (cgroup, _fifo) in enumerate(CONSUMER_GROUPS):
            result = copy.apply(
                Receive(now, cgroup, topic, queue_id, len(queue) + 1, 1000, MAX_ATTEMPTS),
                copy.applied_index + 1 + k,
            )
            assert isinstance(result, ReceiveResult)
            delivered = {d.handle.queue_offset: d.delivery_attempt for d in result.deliveries}
            dead = {d.queue_offset for d in result.dead_lettered}
            for offset in range(len(queue)):
                lease = model.leases.get((cgroup, offset), _Lease())
                if lease.done:
                    if offset in delivered or offset in dead:
                        problems.append(f"group {group}: {cgroup} done offset {offset} came back")
                elif lease.attempts >= MAX_ATTEMPTS:
                    if offset not in dead:
                        problems.append(
                            f"group {group}: {cgroup} offset {offset} not dead-lettered "
                            f"after {lease.attempts} attempts"
                        )
                elif delivered.get(offset) != lease.attempts + 1:
                    problems.append(
                        f"group {group}: {cgroup} offset {offset} drained as "
                        f"{delivered.get(offset)} after {lease.attempts} attempts"
                    )
        return problems

    def _stats(self) -> dict[str, int]:
        stats = super()._stats()
        groups = self.model.groups.values()
        stats.update(
            appends_ok=self.appends_ok,
            messages=sum(len(q) for g in groups for q in g.queues.values()),
            deliveries=sum(g.deliveries for g in groups),
            redeliveries=sum(g.redeliveries for g in groups),
            dead_letters=sum(g.dead_letters for g in groups),
            acks_ok=sum(g.acks_ok for g in groups),
            changes_ok=sum(g.changes_ok for g in groups),
            commits=sum(g.commits for g in groups),
            acks_across_commits=sum(g.acks_across_commits for g in groups),
        )
        return stats


def run_partition_seed(seed: int) -> RunResult:
    """One whole partition simulation run for ``seed``."""
    return PartitionSimCluster(seed).run()


__all__ = ["CLIENT_ID_BASE", "PartitionSimCluster", "run_partition_seed"]
