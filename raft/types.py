"""The values that cross the Raft core's boundary (after etcd-io/raft's raftpb).

These are what the core reads (through :class:`LogReader`), what it hands
out in a ``Ready``, and what travels between replicas of one group. The
multi-group host wraps a :class:`Message` with its group id; the core never
sees group ids.

Node ids are positive ints; 0 means "none" (no vote, no leader).

PURE. Owned by the core; other parts of raft/ (driver, log store, simulation)
depend on these names and fields, so change them only together with those.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from protocol.value_types import value_type

NONE = 0
"""The node id meaning "nobody" (no vote cast, no known leader)."""


class EntryType(enum.IntEnum):
    """What an entry's data means. Append-only."""

    NORMAL = 0  # application data (empty data: the leader's no-op of a new term)
    CONF_CHANGE = 1  # data is an encoded ConfChange
    CONF_CHANGE_V2 = 2  # data is an encoded ConfChangeV2 (joint consensus)


@value_type
class Entry:
    """One log entry. Invariant: index >= 1, term >= 1."""

    term: int
    index: int
    type: EntryType = EntryType.NORMAL
    data: bytes = b""


@value_type
class HardState:
    """What must be on disk before any message that depends on it is sent."""

    term: int = 0
    vote: int = NONE
    commit: int = 0

    def is_empty(self) -> bool:
        """True for the zero state of a fresh replica."""
        return self.term == 0 and self.vote == NONE and self.commit == 0


@dataclass(frozen=True, slots=True)
class ConfState:
    """The group's membership at some log index.

    ``voters_outgoing`` is non-empty only inside a joint configuration;
    ``learners_next`` are outgoing voters that become learners when the
    joint configuration is left, and ``auto_leave`` says the leader leaves
    it by itself once it is applied.
    """

    voters: frozenset[int] = frozenset()
    learners: frozenset[int] = frozenset()
    voters_outgoing: frozenset[int] = frozenset()
    learners_next: frozenset[int] = frozenset()
    auto_leave: bool = False


class ConfChangeType(enum.IntEnum):
    """One membership step. Append-only."""

    ADD_VOTER = 0
    REMOVE_NODE = 1
    ADD_LEARNER = 2


@dataclass(frozen=True, slots=True)
class ConfChange:
    """A single-node membership change carried by a CONF_CHANGE entry."""

    type: ConfChangeType
    node_id: int


class ConfChangeTransition(enum.IntEnum):
    """How a ConfChangeV2 moves between configurations. Append-only."""

    AUTO = 0  # a single change applies directly; several go through an auto-left joint
    JOINT_IMPLICIT = 1  # always joint; the leader leaves it by itself
    JOINT_EXPLICIT = 2  # always joint; the host proposes an empty ConfChangeV2 to leave


@dataclass(frozen=True, slots=True)
class ConfChangeV2:
    """Several membership changes at once (joint consensus, Raft thesis §4.3).

    No changes at all means "leave the joint configuration".
    """

    changes: tuple[ConfChange, ...] = ()
    transition: ConfChangeTransition = ConfChangeTransition.AUTO

    def leaves_joint(self) -> bool:
        """True for the empty change that ends a joint configuration."""
        return not self.changes


@dataclass(frozen=True, slots=True)
class SnapshotMetadata:
    """Where a snapshot sits in the log and the membership at that point."""

    index: int = 0
    term: int = 0
    conf_state: ConfState = field(default_factory=ConfState)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A state machine image at ``metadata.index``; ``data`` is opaque to the core."""

    metadata: SnapshotMetadata = field(default_factory=SnapshotMetadata)
    data: bytes = b""

    def is_empty(self) -> bool:
        """True when there is no snapshot."""
        return self.metadata.index == 0


class MsgType(enum.IntEnum):
    """The kind of a raft :class:`Message`: messages between replicas, and local inputs
    to the core (etcd's ``MessageType``; ``MsgType`` here so that it is not taken for
    the message type of a topic, ``protocol.vocabulary.MessageType``). Append-only."""

    HUP = 0  # local: start an election
    BEAT = 1  # local: leader should heartbeat
    PROP = 2  # local or forwarded: propose entries
    APP = 3
    APP_RESP = 4
    VOTE = 5
    VOTE_RESP = 6
    PRE_VOTE = 7
    PRE_VOTE_RESP = 8
    SNAP = 9
    SNAP_STATUS = 10  # local: the host reports a snapshot send's outcome
    HEARTBEAT = 11
    HEARTBEAT_RESP = 12
    UNREACHABLE = 13  # local: the host reports a peer unreachable
    TRANSFER_LEADER = 14
    TIMEOUT_NOW = 15
    READ_INDEX = 16
    READ_INDEX_RESP = 17
    CHECK_QUORUM = 18  # local


@value_type
class Message:
    """One message of one group. Fields unused by a type keep their zero value."""

    type: MsgType
    to: int = NONE
    from_: int = NONE
    term: int = 0
    log_term: int = 0
    index: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0
    snapshot: Snapshot | None = None
    context: bytes = b""


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read may be served once the applied index reaches ``index``.

    ``request_ctx`` is the caller's id for the read, as passed to read_index().
    """

    index: int
    request_ctx: bytes


class Role(enum.IntEnum):
    """A replica's role in its group."""

    FOLLOWER = 0
    CANDIDATE = 1
    LEADER = 2
    PRE_CANDIDATE = 3


@value_type
class SoftState:
    """Volatile state the host may want to observe; never persisted."""

    lead: int = NONE
    role: Role = Role.FOLLOWER


@value_type
class Ready:
    """Work the host must do, in this order, then call ``advance(ready)``.

    1. Persist ``hard_state`` (if not None), ``entries`` (replacing any
       persisted entries at the same or higher index) and ``snapshot`` (if not
       None); fsync first when ``must_sync``.
    2. Send ``messages`` (only after step 1 is durable). For every SNAP
       message, call ``report_snapshot(to, ok)`` once its send finished or
       failed (the leader sends nothing else to that follower until then).
    3. Apply ``snapshot`` then ``committed_entries`` to the state machine, in
       order, and serve ``read_states`` whose index has been applied. A
       CONF_CHANGE or CONF_CHANGE_V2 entry is applied with
       ``apply_conf_change(raft.core.confchange.decode_entry(entry))``; persist the
       ConfState it returns (it is the membership at that index).
    """

    soft_state: SoftState | None = None
    hard_state: HardState | None = None
    entries: Sequence[Entry] = ()
    snapshot: Snapshot | None = None
    committed_entries: Sequence[Entry] = ()
    messages: Sequence[Message] = ()
    read_states: Sequence[ReadState] = ()
    must_sync: bool = False


class LogReader(Protocol):
    """What the core reads of the durable log; the host writes it.

    Implementations: an in-memory log for tests and simulation, and the WAL's
    per-group view. Indices are inclusive-exclusive where a range is asked.
    """

    def initial_state(self) -> tuple[HardState, ConfState]:
        """The persisted hard state and membership at start-up."""
        ...

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries [lo, hi), at least one if any, at most ``max_bytes`` of data.

        Raises ``LogCompacted`` if lo <= the snapshot index and
        ``LogUnavailable`` if hi > last_index() + 1.
        """
        ...

    def term(self, index: int) -> int:
        """Term of the entry at ``index`` (the snapshot's term at its index)."""
        ...

    def first_index(self) -> int:
        """Index of the first entry still available (snapshot index + 1)."""
        ...

    def last_index(self) -> int:
        """Index of the last entry persisted."""
        ...

    def snapshot(self) -> Snapshot:
        """The most recent snapshot."""
        ...


@dataclass(frozen=True, slots=True)
class ProgressStatus:
    """The leader's view of one member (see raft.core.progress).

    ``state`` is "probe", "replicate" or "snapshot".
    """

    match: int
    next: int
    state: str
    recent_active: bool
    paused: bool
    is_learner: bool
    pending_snapshot: int = 0
    inflight: int = 0


@dataclass(frozen=True, slots=True)
class Status:
    """A point-in-time view of one replica, for hosts (quiescing, leader balance).

    ``progress`` is filled only on the leader.
    """

    id: int
    term: int
    vote: int
    lead: int
    role: Role
    commit: int
    applied: int
    last_index: int
    lead_transferee: int = NONE
    conf_state: ConfState = field(default_factory=ConfState)
    progress: dict[int, ProgressStatus] = field(default_factory=dict)
