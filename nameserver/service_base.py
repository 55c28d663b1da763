"""What every part of the nameserver's Angelia service stands on: the raft group's
state machine on this node, and how a call writes through the group or reads it
linearizably.

Contracts:

- Writes (topics, consumer groups, clusters, users and policies, heartbeats,
  leader reports, leases) become commands stamped by THIS node's clock
  (``now_ms``) and are proposed to the nameserver's one raft group
  (:meth:`ServiceBase.propose`); the call answers once the command is committed
  and applied here, with the state machine's answer or its error (bad input
  changes nothing). Only the leader proposes: a follower answers NOT_LEADER with
  the leader's address as the hint.
- Reads (:meth:`ServiceBase.linearizable`: route, cluster status, topics,
  groups, ACL tables) are served by the leader after a ReadIndex round
  (``Driver.read_index``): they see every write acknowledged before they were
  asked.

The service's calls are split by concept over the classes built on
:class:`ServiceBase`: ``nameserver.acl_service`` (users, policies, signed
writes), ``nameserver.cluster_service`` (storage nodes and brokers: heartbeats,
draining, leader reports, status) and ``nameserver.service`` (topics, groups,
leases, routes, watches: the whole ``NameserverImpl``).

SHELL.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from nameserver import commands as c
from nameserver.control_commands import ForgetNameserver, SetNameserverAddress, is_control
from nameserver.control_commands import decode as decode_control
from nameserver.control_state import ControlState, unwrap_snapshot, wrap_snapshot
from nameserver.errors import NameserverError, NameserverNotLeader
from nameserver.state import Applied, MetadataState
from raft.errors import RaftError, RaftNotLeader
from raft.host.driver import Driver
from raft.types import Entry, Snapshot

GROUP_ID = 1
"""The nameserver's raft group id (the raft WAL reserves 0)."""

READ_TIMEOUT_MS = 2000


class MetadataMachine:
    """The raft state machine of the nameserver group: a :class:`MetadataState`.

    ``apply`` returns the :class:`Applied` answer, or the command's
    :class:`NameserverError` (as a value: every replica refuses the same
    command, and the driver must go on). ``changed`` is woken after every
    command that bumped the revision.

    Control commands (:mod:`nameserver.control_commands`: nameserver addresses,
    the RIP-44 controller) share the log and go to ``control``;
    ``on_addresses`` is called with the ensemble's recorded addresses after
    each one and after a snapshot is restored.
    """

    def __init__(self) -> None:
        """An empty state."""
        self.state = MetadataState()
        self.control = ControlState()
        self.on_addresses: Callable[[dict[int, str]], None] | None = None
        self._changed = asyncio.Event()

    def apply(self, entry: Entry) -> object:
        """Apply one committed command."""
        if is_control(entry.data):
            return self._apply_control(entry.data)
        try:
            applied = self.state.apply(c.decode(entry.data))
        except NameserverError as exc:
            return exc
        if applied.changes:
            self._wake()
        return applied

    def _apply_control(self, data: bytes) -> object:
        try:
            command = decode_control(data)
            answer = self.control.apply(command)
        except NameserverError as exc:
            return exc
        if self.on_addresses is not None and isinstance(
            command, SetNameserverAddress | ForgetNameserver
        ):
            self.on_addresses(dict(self.control.addresses))
        return answer

    def restore(self, snapshot: Snapshot) -> None:
        """Take a snapshot's state."""
        self.control, metadata = unwrap_snapshot(snapshot.data)
        self.state = MetadataState.restore(metadata)
        if self.on_addresses is not None:
            self.on_addresses(dict(self.control.addresses))
        self._wake()

    def snapshot_data(self) -> bytes:
        """The state's snapshot bytes."""
        return wrap_snapshot(self.control, self.state.snapshot())

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def changed(self) -> asyncio.Event:
        """An event set at the next change (take it BEFORE reading the state)."""
        return self._changed


def wall_ms() -> int:
    """The leader's clock for commands (wall time: it must mean the same on every node)."""
    return int(time.time() * 1000)


@dataclass(eq=False)
class ServiceBase:
    """One node's access to the nameserver group: propose a command, read the state
    linearizably, and the NOT_LEADER answer that names the leader.

    ``addresses``: node id -> Angelia address of every nameserver (for hints); the
    instance keeps its own copy, which the server updates as the ensemble changes.
    """

    driver: Driver
    machine: MetadataMachine
    addresses: dict[int, str]
    clock: Callable[[], int] = wall_ms

    def __post_init__(self) -> None:
        self.addresses = dict(self.addresses)

    def _not_leader(self) -> NameserverNotLeader:
        leader = self.driver.leader_of(GROUP_ID)
        hint = self.addresses.get(leader, "") if leader != self.driver.node_id else ""
        where = f"; the leader is {hint}" if hint else "; no leader is known yet"
        return NameserverNotLeader(
            f"nameserver {self.driver.node_id} is not the leader{where}", hint
        )

    async def propose(self, command: c.Command) -> Applied:
        """Commit ``command`` through raft and return what applying it did here."""
        if not self.driver.host.node(GROUP_ID).is_leader():
            raise self._not_leader()
        try:
            result = await self.driver.propose(GROUP_ID, c.encode(command))
        except RaftNotLeader:
            raise self._not_leader() from None
        except RaftError as exc:
            raise NameserverNotLeader(f"the write was not committed ({exc}); retry", "") from None
        if isinstance(result, NameserverError):
            raise result
        assert isinstance(result, Applied)
        return result

    async def linearizable(self) -> MetadataState:
        """The state, once it reflects every write acknowledged before this call."""
        try:
            await self.driver.read_index(GROUP_ID, READ_TIMEOUT_MS)
        except RaftNotLeader:
            raise self._not_leader() from None
        except RaftError as exc:
            raise NameserverNotLeader(f"leadership not confirmed ({exc}); retry", "") from None
        return self.machine.state
