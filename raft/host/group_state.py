"""What the multi-group host keeps per hosted group, and what one round carries.

:class:`HostedGroup` is one group's record (its replica, state machine, peers,
proposals queued and pending, reads, apply position, quiescing);
:class:`Round` the Readys one round took; :class:`Outcome` how a proposal or
read ended. Kept and changed by :class:`raft.host.multiraft.MultiRaft` only.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.value_types import value_type
from raft.errors import ProposalDropped, RaftError
from raft.host import wire
from raft.host.collaborators import GroupNode, StateMachine
from raft.types import ConfChange, ConfChangeV2, Ready


@dataclass(slots=True)
class QueuedProposal:
    """Payloads proposed together; one token. ``single``: the result is not a list."""

    payloads: list[bytes]
    token: object
    single: bool
    conf_change: ConfChange | ConfChangeV2 | None = None


@dataclass(slots=True)
class PendingProposal:
    """An appended proposal awaiting apply: entries [first, last] of ``term``."""

    first: int
    last: int
    term: int
    token: object
    single: bool
    results: list[object] = field(default_factory=list)
    overwritten: bool = False
    conf_change: bool = False
    refused: bool = False  # a conf change the leader replaced with an empty entry


@dataclass(slots=True)
class HostedGroup:
    """What the host keeps for one group it hosts: its replica, state machine
    and peers, queued and pending proposals, reads, apply position, quiescing."""

    group_id: int
    node: GroupNode
    state_machine: StateMachine
    peers: tuple[int, ...]
    quiesced: bool = False
    idle_ticks: int = 0
    # Every configuration has two voters or more, so no entry commits on this
    # replica's own write alone (see raft.host.outgoing: early sends).
    early_send: bool = False
    proposals: list[QueuedProposal] = field(default_factory=list)
    conf_changes: list[QueuedProposal] = field(default_factory=list)
    pending: dict[int, PendingProposal] = field(default_factory=dict)  # by first index
    applying: PendingProposal | None = None  # the pending batch the apply position is inside
    applied: int = 0
    applied_term: int = 0
    snapshot_index: int = 0
    # Entries <= truncate_floor may be compacted (None: no limit): the
    # state machine host's retention (e.g. messages still served from the WAL).
    truncate_floor: int | None = None
    # Linearizable reads: asked (context -> token), then confirmed (index, token)
    # and released once ``applied`` reaches the index.
    reads_asked: dict[bytes, object] = field(default_factory=dict)
    reads_confirmed: list[tuple[int, object]] = field(default_factory=list)


@dataclass(slots=True)
class Round:
    """One round's work: the Readys taken, and what must be sent with them."""

    groups: list[HostedGroup]
    readies: list[Ready]
    must_sync: bool
    rejected: list[tuple[object, RaftError]]
    notices: dict[int, list[wire.QuiesceNotice]]

    def is_empty(self) -> bool:
        """Nothing to write, send, apply or report."""
        return not self.readies and not self.rejected and not self.notices


@value_type
class Outcome:
    """A proposal's end: ``error`` is None when it committed and applied with ``result``."""

    token: object
    result: object = None
    error: RaftError | None = None


def outcome_of(p: PendingProposal) -> Outcome:
    """How a pending proposal ended, once its last entry was applied."""
    if p.overwritten:
        return Outcome(p.token, error=ProposalDropped("overwritten by a new leader"))
    if p.refused:
        return Outcome(
            p.token, error=ProposalDropped("another membership change is still in progress")
        )
    return Outcome(p.token, p.results[0] if p.single else p.results)
