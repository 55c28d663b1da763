"""A deterministic in-memory group of RawNodes for the core's tests.

Each replica has a MemoryLog the harness writes by following its Readys in
the documented order (persist, send, apply, advance). Messages wait in a
queue until delivered; delivery can drop or filter them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from raft.core.confchange import decode_entry
from raft.core.memory_log import MemoryLog
from raft.core.node import Config, RawNode
from raft.types import ConfState, Entry, EntryType, Message, MsgType, ReadState, Ready


@dataclass
class Replica:
    """One replica and what its host observed."""

    node: RawNode
    log: MemoryLog
    applied: list[Entry] = field(default_factory=list)
    read_states: list[ReadState] = field(default_factory=list)
    conf_state: ConfState = field(default_factory=ConfState)


class Network:
    """Replicas connected by a queue of messages in flight."""

    def __init__(
        self,
        voters: Iterable[int],
        learners: Iterable[int] = (),
        seed: int = 0,
        **config: object,
    ) -> None:
        self.conf_state = ConfState(frozenset(voters), frozenset(learners))
        self.rng = random.Random(seed)
        self.config = config
        self.replicas: dict[int, Replica] = {}
        self.in_flight: list[Message] = []
        self.readys: list[tuple[int, Ready]] = []
        for node_id in sorted(self.conf_state.voters | self.conf_state.learners):
            self.add(node_id, self.conf_state)

    def add(self, node_id: int, conf_state: ConfState, log: MemoryLog | None = None) -> Replica:
        """Start a replica with an empty log (or ``log``) knowing ``conf_state``."""
        if log is None:
            log = MemoryLog(conf_state)
        node = RawNode(Config(id=node_id, **self.config), log, self.rng.randrange)  # type: ignore[arg-type]
        replica = Replica(node, log, conf_state=conf_state)
        self.replicas[node_id] = replica
        return replica

    def node(self, node_id: int) -> RawNode:
        """The RawNode of ``node_id``."""
        return self.replicas[node_id].node

    def process_ready(self, node_id: int) -> Ready | None:
        """Handle one Ready of ``node_id``: persist, queue messages, apply, advance."""
        replica = self.replicas[node_id]
        node = replica.node
        if not node.has_ready():
            return None
        ready = node.ready()
        if ready.snapshot is not None:
            replica.log.apply_snapshot(ready.snapshot)
            replica.conf_state = ready.snapshot.metadata.conf_state
        replica.log.append(ready.entries)
        if ready.hard_state is not None:
            replica.log.set_hard_state(ready.hard_state)
        self.in_flight.extend(ready.messages)
        for entry in ready.committed_entries:
            replica.applied.append(entry)
            if entry.type != EntryType.NORMAL:
                replica.conf_state = node.apply_conf_change(decode_entry(entry))
                replica.log.set_conf_state(replica.conf_state)
        replica.read_states.extend(ready.read_states)
        node.advance(ready)
        self.readys.append((node_id, ready))
        return ready

    def deliver(self, keep: Callable[[Message], bool] = lambda m: True) -> int:
        """Deliver every queued message ``keep`` accepts (others are dropped)."""
        messages = self.in_flight
        self.in_flight = []
        delivered = 0
        for message in messages:
            ok = message.to in self.replicas and keep(message)
            if ok:
                self.replicas[message.to].node.step(message)
                delivered += 1
            if message.type == MsgType.SNAP and message.from_ in self.replicas:
                # The sending host reports every snapshot's fate (RawNode contract).
                self.replicas[message.from_].node.report_snapshot(message.to, ok)
        return delivered

    def stabilize(
        self, keep: Callable[[Message], bool] = lambda m: True, rounds: int = 1000
    ) -> None:
        """Process Readys and deliver messages until nothing moves."""
        for _ in range(rounds):
            moved = False
            for node_id in sorted(self.replicas):
                if self.process_ready(node_id) is not None:
                    moved = True
            if self.deliver(keep):
                moved = True
            if not moved:
                return
        raise AssertionError("the group did not stabilize")

    def elect(self, node_id: int) -> None:
        """Make ``node_id`` leader and settle."""
        self.node(node_id).campaign()
        self.stabilize()
        assert self.node(node_id).is_leader()

    def isolate(self, node_id: int) -> Callable[[Message], bool]:
        """A filter dropping every message to or from ``node_id``."""
        return lambda m: node_id not in (m.to, m.from_)

    def data_applied(self, node_id: int) -> list[bytes]:
        """The non-empty NORMAL payloads ``node_id`` applied, in order."""
        return [
            e.data for e in self.replicas[node_id].applied if e.type == EntryType.NORMAL and e.data
        ]

    def tick(self, node_id: int, ticks: int = 1) -> None:
        """Tick ``node_id``."""
        for _ in range(ticks):
            self.node(node_id).tick()
