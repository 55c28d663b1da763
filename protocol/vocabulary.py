"""The domain words every process shares, each defined once.

Their numbers are written to disk (record batches, the nameserver's raft log
and snapshots) and sent between processes, so they are APPEND-ONLY: a number,
once given, keeps its meaning.

PURE.
"""

from __future__ import annotations

import enum


class MessageType(enum.IntEnum):
    """What kind of message a record is, and what kinds a topic accepts.

    Numbers match RocketMQ v2's ``MessageType`` (the client wire), so they
    cross it as they are.
    """

    NORMAL = 1
    FIFO = 2
    DELAY = 3
    TRANSACTION = 4


class Permission(enum.IntEnum):
    """What clients may do with a topic's queues.

    Numbers are RocketMQ's ``PermName`` bits (2 write, 4 read), as the
    nameserver keeps them in its log and snapshots and as its API carries
    them. RocketMQ v2's ``Permission`` enum numbers the same four values
    differently (1 none, 2 read, 3 write, 4 read-write): the broker's gRPC
    adapter converts at that wire, nothing else sees those numbers.
    """

    NONE = 0
    WRITE = 2
    READ = 4
    READ_WRITE = 6

    @property
    def readable(self) -> bool:
        """Consumers may receive from the queue."""
        return bool(self & Permission.READ)

    @property
    def writable(self) -> bool:
        """Producers may send to the queue."""
        return bool(self & Permission.WRITE)


class Placement(enum.IntEnum):
    """Where storage put an appended message (the storage API's ``placement`` number)."""

    QUEUED = 0  # visible in its queue at once, at its queue offset
    DELAYED = 1  # held until its delivery time, then queued
    HALF = 2  # a transaction's half message: queued only when committed
