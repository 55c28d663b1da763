"""A caller of the nameserver group: finds the leader among the replicas it is given.

Storage nodes, the admin CLI and brokers are all given a list of nameserver
addresses (any replica will do). :meth:`NameserverClient.call` runs one call
on the leader through :func:`angelia_rpc.failover.call_leader`, starting at
the replica that answered last: a leader hint is followed, a replica that
names none is passed over after a pause of ``RETRY_BACKOFF_MS``, and after
``attempts_max`` tries, or a pass in which every replica was unreachable
(none redirected), the last error is raised. Only the error's flags decide.

Retrying is safe for the nameserver's API: a NOT_LEADER or unreachable
answer means the write was not acknowledged, and an unacknowledged create
that did commit shows up as ALREADY_EXISTS on the retry.

SHELL.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from angelia_rpc.channel import Peers
from angelia_rpc.cluster_services import NameserverService
from angelia_rpc.config import RpcConfig
from angelia_rpc.failover import Failover, FailoverPolicy, call_leader, starting_at
from angelia_rpc.service import Service

T = TypeVar("T")
S = TypeVar("S", bound=Service)

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
        self.policy = FailoverPolicy(
            pause_first_s=RETRY_BACKOFF_MS / 1000,
            pause_max_s=RETRY_BACKOFF_MS / 1000,
            attempts_max=attempts_max,
            unreachable_ends=True,
        )
        self._current = self.addresses[0]

    @property
    def current(self) -> str:
        """The replica the next call goes to first (the last one that answered)."""
        return self._current

    def stub(self, address: str) -> NameserverService:
        """The typed client of one replica. With another replica to try, a dead one
        is passed over at once (the stub does not wait for it to come up)."""
        return self.service_stub(NameserverService, address)

    def service_stub(self, service: type[S], address: str) -> S:
        """:meth:`stub`, for another service the nameservers serve (``ControlService``)."""
        return self.peers.stub(service, address, wait_for_ready=len(self.addresses) == 1)

    async def call(self, method: Callable[[NameserverService], Awaitable[T]]) -> T:
        """Run ``method`` on the leader (see the module docstring); the last
        :class:`AngeliaError` when that cannot be done."""
        return await self._call_leader(self.stub, method)

    async def call_service(self, service: type[S], method: Callable[[S], Awaitable[T]]) -> T:
        """:meth:`call`, for another service the nameservers serve (``ControlService``)."""
        return await self._call_leader(lambda address: self.service_stub(service, address), method)

    async def _call_leader(
        self, stub: Callable[[str], S], method: Callable[[S], Awaitable[T]]
    ) -> T:
        failover = Failover(starting_at(self._current, self.addresses), self.policy, math.inf)

        def attempt(address: str, _timeout_ms: int) -> Awaitable[T]:
            return method(stub(address))  # the method brings its own timeout

        try:
            return await call_leader(
                failover, attempt, clock=asyncio.get_running_loop().time, sleep=asyncio.sleep
            )
        finally:
            self._current = failover.address

    async def close(self) -> None:
        """Close the connections."""
        await self.peers.close()
