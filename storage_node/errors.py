"""Errors of the storage node: one root, each carrying a code from protocol.errors.

Callers decide by ``code`` and its flags (``retriable``, ``refresh_route``),
never by the subclass.

PURE.
"""

from __future__ import annotations

from protocol import errors
from protocol.errors import CodedError


class StorageError(CodedError):
    """Root of every storage node error."""


class BadCommand(StorageError):
    """A command's arguments violate its contract (negative count, unknown op ...)."""

    code = errors.BAD_REQUEST


class CommandCorrupted(StorageError):
    """The bytes of a log entry are not a command this version can read."""

    code = errors.DECODE_FAILED


class InvalidReceiptHandle(StorageError):
    """The receipt handle is unknown, stale (superseded generation) or expired."""

    code = errors.INVALID_RECEIPT_HANDLE


class OffsetOutOfRange(StorageError):
    """The queue offset is not in the queue."""

    code = errors.OFFSET_OUT_OF_RANGE


class NotFound(StorageError):
    """The named queue, half message or timer does not exist (or is resolved)."""

    code = errors.NOT_FOUND


class OutOfOrderApply(StorageError):
    """The host applied a log entry at or below the last applied index (a host bug)."""


class SnapshotCorrupted(StorageError):
    """Snapshot bytes that fail their CRC or do not decode."""

    code = errors.DECODE_FAILED


class StorageNotLeader(StorageError):
    """This replica does not lead the queue's group (the storage side of raft's
    RaftNotLeader); ``leader_hint`` is the leader's address (empty when unknown).
    Retry there."""

    code = errors.NOT_LEADER

    def __init__(self, message: str, leader_hint: str = "") -> None:
        super().__init__(message)
        self.leader_hint = leader_hint


class GroupNotHosted(StorageError):
    """This node hosts no replica of the group that serves the queue."""

    code = errors.GROUP_NOT_HOSTED


class BodyUnavailable(StorageError):
    """A queue entry's message body is neither in this replica's log nor in its message
    store (it was released, or a restore has not brought it yet)."""

    code = errors.UNAVAILABLE


class ExportFailed(StorageError):
    """Message objects could not be written where a snapshot export was sent (the
    destination refused or failed); nothing of the export is published."""

    code = errors.UNAVAILABLE


class TierUnavailable(StorageError):
    """Old messages (below a queue's local first offset) cannot be read from the tier now:
    an outage or a missing object. Retriable; local data is served meanwhile."""

    code = errors.UNAVAILABLE
