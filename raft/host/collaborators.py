"""What the multi-group round (raft.host.multiraft) needs of its collaborators.

The replica (raft.core.node.RawNode), the state machine, and the log writer
(raft.wal.logstore.LogStore, or a simulated disk), as structural protocols.

PURE.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from raft.types import (
    ConfChange,
    ConfChangeV2,
    ConfState,
    Entry,
    HardState,
    Message,
    Ready,
    Role,
    Snapshot,
)


class ProgressLike(Protocol):
    """What quiescing reads of the leader's view of one member."""

    @property
    def match(self) -> int:
        """Highest index known replicated on the member."""
        ...


class StatusLike(Protocol):
    """What the host reads of a replica's status (raft.types.Status has these)."""

    @property
    def term(self) -> int:
        """Current term."""
        ...

    @property
    def commit(self) -> int:
        """Commit index."""
        ...

    @property
    def applied(self) -> int:
        """Applied index."""
        ...

    @property
    def last_index(self) -> int:
        """Last log index."""
        ...

    @property
    def conf_state(self) -> ConfState:
        """The current membership."""
        ...

    @property
    def progress(self) -> Mapping[int, ProgressLike]:
        """Per member progress; only filled on the leader."""
        ...


class GroupNode(Protocol):
    """The part of raft.core.node.RawNode the host uses."""

    def tick(self) -> None:
        """One logical tick."""
        ...

    def step(self, message: Message) -> None:
        """A message from a peer."""
        ...

    def propose_batch(self, payloads: list[bytes] | tuple[bytes, ...]) -> None:
        """Propose entries; raises ProposalDropped."""
        ...

    def propose_conf_change(self, change: ConfChange | ConfChangeV2) -> None:
        """Propose a membership change; raises ProposalDropped or InvalidConfChange."""
        ...

    def read_index(self, context: bytes) -> None:
        """Ask for a linearizable read; a ReadState with ``context`` comes in a Ready."""
        ...

    def has_ready(self) -> bool:
        """Whether ready() has work."""
        ...

    def ready(self) -> Ready:
        """Take the pending work."""
        ...

    def advance(self, ready: Ready) -> None:
        """The work of ``ready`` is done."""
        ...

    def status(self) -> StatusLike:
        """A point-in-time view."""
        ...

    def quiesce_point(self) -> tuple[int, int] | None:
        """(term, last index) if it leads with every entry committed, applied and matched."""
        ...

    def is_leader(self) -> bool:
        """Whether this replica leads."""
        ...

    @property
    def lead(self) -> int:
        """Known leader or 0."""
        ...

    @property
    def role(self) -> Role:
        """Current role."""
        ...


class StateMachine(Protocol):
    """A group's replicated state: committed entries go in, in log order."""

    def apply(self, entry: Entry) -> object:
        """Apply one committed NORMAL entry (non-empty data); return the proposer's result."""
        ...

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the state with a snapshot's."""
        ...

    def snapshot_data(self) -> bytes:
        """The state as of the last applied entry, for a snapshot."""
        ...


class RetainingStateMachine(StateMachine, Protocol):
    """A state machine whose snapshots name log entries it still reads (optional hook).

    A storage group's log is its commit log: its snapshot indexes message
    bodies that live in log entries. Its host keeps those entries through the
    truncate floor (``MultiRaft.set_truncate_floor``), the one retention
    mechanism; a replica restored from a leader's snapshot has none of them,
    so the host completes a snapshot before it is sent (``MultiRaft.outgoing``
    calls this hook when the machine has it).
    """

    def snapshot_for_peer(self, snapshot: Snapshot) -> bytes:
        """The data to send in place of ``snapshot.data`` to a replica restored from it."""
        ...


class LogWriter(Protocol):
    """What a round writes (raft.wal.logstore.LogStore, or a simulated disk)."""

    def append(self, group_id: int, entries: Sequence[Entry]) -> None:
        """Encode entries (replacing any suffix from their first index)."""
        ...

    def set_hard_state(self, group_id: int, hard_state: HardState) -> None:
        """Encode a hard state."""
        ...

    def install_snapshot(self, group_id: int, snapshot: Snapshot) -> None:
        """Persist a snapshot from the leader (replaces the group's log)."""
        ...

    def set_conf_state(self, group_id: int, index: int, conf_state: ConfState) -> None:
        """Record the applied membership."""
        ...

    def save_local_snapshot(self, group_id: int, snapshot: Snapshot) -> None:
        """Persist a snapshot taken at an applied index (the log is kept)."""
        ...

    def compact(self, group_id: int, index: int) -> None:
        """Discard entries <= index (at most the snapshot index)."""
        ...

    def flush(self) -> None:
        """Write what was encoded (not yet durable)."""
        ...


ConfChangeApplier = Callable[[GroupNode, Entry], ConfState]
"""Applies a committed CONF_CHANGE(_V2) entry to its node and returns the new membership."""


class SnapshotRecorder(Protocol):
    """What finishing a compaction writes (raft.wal.logstore.LogStore)."""

    def note_local_snapshot(self, group_id: int, snapshot: Snapshot) -> bool:
        """Record a snapshot whose file is durable; False if it became stale."""
        ...

    def compact(self, group_id: int, index: int) -> None:
        """Discard entries <= index (at most the snapshot index)."""
        ...
