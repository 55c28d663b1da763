"""A caller of the nameserver group: finds the leader among the replicas it is given.

Storage nodes, the admin CLI and brokers are all given a list of nameserver
addresses (any replica will do). :meth:`NameserverClient.call` runs one call
on the leader: a NOT_LEADER answer is followed to the address it names (or
to the next replica when it names none), an unreachable replica is skipped,
and after ``attempts_max`` tries (or when every replica is unreachable) the
last error is raised.

Retrying is safe for the nameserver's API: a NOT_LEADER or unreachable
answer means the write was not acknowledged, and an unacknowledged create
that did commit shows up as ALREADY_EXISTS on the retry.

SHELL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from angelia_rpc.channel import Peers
from angelia_rpc.cluster_services import NameserverService
from angelia_rpc.config import RpcConfig
from angelia_rpc.errors import AngeliaError
from protocol import errors

T = TypeVar("T")

ATTEMPTS_MAX = 20
RETRY_BACKOFF_MS = 100


def parse_addresses(text: str) -> list[str]:
    """``h1:p1,h2:p2`` -> ["h1:p1", "h2:p2"]; raises ValueError naming a bad part."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    for part in parts:
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"nameserver address {part!r} is not host:port")
    if not parts:
        raise ValueError("give at least one nameserver host:port")
    return parts


class NameserverClient:
    """Calls one nameserver replica after another until the leader answers."""

    def __init__(
        self,
        addresses: Sequence[str],
        config: RpcConfig | None = None,
        *,
        attempts_max: int = ATTEMPTS_MAX,
    ) -> None:
        """``addresses``: where nameservers listen (any replica will do; at least one)."""
        if not addresses:
            raise ValueError("a nameserver client needs at least one address")
        self.addresses = list(addresses)
        self.peers = Peers(config or RpcConfig())
        self.attempts_max = attempts_max
        self._current = self.addresses[0]

    @property
    def current(self) -> str:
        """The replica the next call goes to first (the last one that answered)."""
        return self._current

    def stub(self, address: str) -> NameserverService:
        """The typed client of one replica."""
        return self.peers.stub(NameserverService, address)

    async def call(self, method: Callable[[NameserverService], Awaitable[T]]) -> T:
        """Run ``method`` on the leader: follow NOT_LEADER hints, skip unreachable replicas."""
        last: AngeliaError | None = None
        unreachable: set[str] = set()
        for _ in range(self.attempts_max):
            address = self._current
            try:
                return await method(self.stub(address))
            except AngeliaError as exc:
                last = exc
                if exc.code is errors.NOT_LEADER:
                    self._current = exc.leader_hint or self._next(address)
                elif exc.code in (errors.UNAVAILABLE, errors.DEADLINE_EXCEEDED):
                    unreachable.add(address)
                    if unreachable >= set(self.addresses):
                        raise
                    self._current = self._next(address)
                else:
                    raise
            # An election may be under way: back off, then retry.
            await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
        assert last is not None
        raise last

    def _next(self, address: str) -> str:
        if address not in self.addresses:
            return self.addresses[0]
        return self.addresses[(self.addresses.index(address) + 1) % len(self.addresses)]

    async def close(self) -> None:
        """Close the connections."""
        await self.peers.close()
