"""Errors of the raft package: one root, each carrying a code from protocol.errors.

PURE.
"""

from __future__ import annotations

from protocol import errors
from protocol.errors import CodedError


class RaftError(CodedError):
    """Root of every raft error. ``code`` says what happened and whether to retry."""


class ProposalDropped(RaftError):
    """The proposal was not appended (no leader, transfer in progress, or not a member)."""

    code = errors.PROPOSAL_DROPPED


class RaftNotLeader(RaftError):
    """This replica cannot serve the request; ``leader`` is the known leader's node id
    or 0 (the leader hint is that id; the storage node's and the nameserver's
    services turn it into an address)."""

    code = errors.NOT_LEADER

    def __init__(self, message: str = "not the leader", leader: int = 0) -> None:
        super().__init__(message)
        self.leader = leader
        self.leader_hint = str(leader) if leader else ""


class LogCompacted(RaftError):
    """The requested index precedes the first available entry (it is in the snapshot)."""


class LogUnavailable(RaftError):
    """The requested index is beyond the last persisted entry."""


class StorageFailed(RaftError):
    """The log store failed; the replica must stop (it cannot keep its promises)."""

    code = errors.STORAGE_FAILED


class InvalidConfChange(RaftError):
    """A membership change that cannot be applied (it names why)."""

    code = errors.BAD_REQUEST


class BadMessage(RaftError):
    """A message the core refuses (e.g. a local-only type arriving from a peer)."""

    code = errors.BAD_REQUEST


class InvalidConfig(RaftError):
    """A Config whose values cannot work together (it names which)."""

    code = errors.BAD_REQUEST


class ProposalTooLarge(RaftError):
    """A proposed entry exceeds what the log store can hold in one record."""

    code = errors.BAD_REQUEST
