"""Errors of the nameserver: one root, each carrying a code from protocol.errors.

The metadata state machine raises these from ``apply`` deterministically (every
replica raises the same error for the same command) and changes nothing when it
does, so the service can hand the error to the proposer and go on.

PURE.
"""

from __future__ import annotations

from protocol import errors
from protocol.errors import CodedError


class NameserverError(CodedError):
    """Root of every nameserver error. ``code`` says what happened and whether to retry."""


class BadRequest(NameserverError):
    """The command is malformed or breaks a limit (the message names the cause)."""

    code = errors.BAD_REQUEST


class InvalidName(NameserverError):
    """A topic or consumer group name breaks RocketMQ's naming rules."""

    code = errors.INVALID_NAME


class NotFound(NameserverError):
    """A cluster, storage node, broker or raft group does not exist."""

    code = errors.NOT_FOUND


class AlreadyExists(NameserverError):
    """A cluster, topic or consumer group of that name exists already."""

    code = errors.ALREADY_EXISTS


class TopicNotFound(NameserverError):
    """The topic does not exist."""

    code = errors.TOPIC_NOT_FOUND


class ConsumerGroupNotFound(NameserverError):
    """The consumer group does not exist."""

    code = errors.CONSUMER_GROUP_NOT_FOUND


class LeaseHeld(NameserverError):
    """Another owner holds the lease; ``owner`` and ``expires_ms`` say who and until when."""

    code = errors.LEASE_HELD

    def __init__(self, message: str, owner: str, expires_ms: int) -> None:
        super().__init__(message)
        self.owner = owner
        self.expires_ms = expires_ms


class LeaseNotHeld(NameserverError):
    """The caller does not hold the lease it tried to renew or release."""

    code = errors.LEASE_NOT_HELD


class DecodeFailed(NameserverError):
    """Bytes (a log entry, a snapshot) do not decode as what they claim to be."""

    code = errors.DECODE_FAILED


class NameserverNotLeader(NameserverError):
    """This nameserver does not lead its metadata group; ``leader_hint`` is the leader's
    address ("" if unknown)."""

    code = errors.NOT_LEADER

    def __init__(self, message: str, leader_hint: str) -> None:
        super().__init__(message)
        self.leader_hint = leader_hint
