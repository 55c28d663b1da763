"""Remoting producers that may be asked about their transactions (check-back).

A 4.x producer says which producer group it sends for; its half messages
carry the topic. The transaction processor asks for a check by the half
message's group, which for rip5 is its topic (``HalfMessage.producer_group``),
so producers are kept by topic: every connection that sent a half message
to a topic, with the producer group it sent for. A check goes as a oneway
CHECK_TRANSACTION_STATE to one of them in turn; the producer answers with
END_TRANSACTION marked as from a check.

PURE: connections are ids and a write function each, given by the server.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from broker.domain import HalfMessage
from broker.remoting import convert
from protocol.remoting.frames import RemotingCommand

Write = Callable[[RemotingCommand], bool]
"""Send a command on a connection; whether it could (False once it is closing)."""


class RemotingProducers:
    """Half-message producers by topic, on open connections (``LocalProducers``)."""

    def __init__(self) -> None:
        self.store_address = "0.0.0.0:0"  # the broker's remoting address, once bound
        self._writers: dict[int, Write] = {}
        self._by_topic: dict[str, dict[int, str]] = {}  # topic -> connection -> group
        self._opaques = itertools.count(1)
        self._turn = 0

    def connected(self, connection: int, write: Write) -> None:
        """A connection opened; ``write`` sends a command on it."""
        self._writers[connection] = write

    def closed(self, connection: int) -> None:
        """A connection closed: its producers can no longer be asked."""
        self._writers.pop(connection, None)
        for topic in list(self._by_topic):
            self._by_topic[topic].pop(connection, None)
            if not self._by_topic[topic]:
                del self._by_topic[topic]

    def sent_half(self, connection: int, topic: str, producer_group: str) -> None:
        """A producer of ``producer_group`` sent a half message to ``topic`` on ``connection``."""
        if connection in self._writers:
            self._by_topic.setdefault(topic, {})[connection] = producer_group

    @property
    def topics(self) -> list[str]:
        """Topics with a producer here that can be asked (reported in the broker's
        heartbeat, as the gRPC producers' groups are)."""
        return sorted(self._by_topic)

    def maybe_send_check(self, producer_group: str, half: HalfMessage, transaction_id: str) -> bool:
        """Ask one producer that sent half messages to the half message's topic; whether
        one was connected."""
        producers = sorted(self._by_topic.get(half.queue.topic, {}).items())
        for _ in range(len(producers)):
            self._turn += 1
            connection, group = producers[self._turn % len(producers)]
            request = convert.check_request(half, group, self.store_address, next(self._opaques))
            if self._writers[connection](request):
                return True
        return False
