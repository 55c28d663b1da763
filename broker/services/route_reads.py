"""Joining a broker's concurrent route reads into one nameserver call.

A broker reads a topic's route from the nameserver when its cache lacks it
(a linearizable read: a read index on the nameserver's raft group). With
many fresh topics, e.g. a million queues each written once, every send is
such a miss, and each read was its own call: framing, codec, a read index
and the service method on the nameserver, a future and a task here.
:class:`RouteReads` joins them, as ``broker.services.node_appends`` joins
appends:

- one read in flight: a miss with nothing in flight is read at once, alone
  (``route``), so an idle broker adds no latency; misses that come while a
  read is in flight wait, and go together in the next call (``routes``,
  one outcome per name, all read at one linearizable point, which is after
  each of them began: each stays a linearizable read);
- a topic asked twice while waiting is read once, and both askers get it;
- each name has its own outcome: a missing topic fails only its askers,
  with the error a ``route`` call would have raised; a failure of the whole
  call fails every name it carried;
- a nameserver that does not serve ``routes`` (UNKNOWN_METHOD: an older
  one during a rolling upgrade) is sent single reads from then on;
- an asker that gives up (cancellation) leaves the read to the others.

SHELL: event loop tasks and futures.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from broker.errors import BrokerError
from broker.waiting import fail_waiting
from protocol import errors as codes
from protocol import nameserver_api as ns

NAMES_MAX = 256
"""The most topics one joined call names (the nameserver takes up to 1,024)."""

ReadOne = Callable[[str], Awaitable[ns.RouteResponse]]
"""``(topic)``: one ``route`` call; raises the BrokerError the read failed with."""
ReadMany = Callable[[Sequence[str]], Awaitable[list[ns.RouteResponse | BrokerError]]]
"""``(topics)``: one ``routes`` call; each topic's route or the BrokerError its read alone
would have raised, in order; raises the BrokerError the whole call failed with."""


class RouteReads:
    """Route reads joined while one is in flight (see the module docstring)."""

    def __init__(self, read_one: ReadOne, read_many: ReadMany, *, names_max: int = NAMES_MAX):
        if names_max < 1:
            raise ValueError(f"names_max must be at least 1, not {names_max}")
        self._read_one = read_one
        self._read_many = read_many
        self._names_max = names_max
        self._busy = False  # a read is in flight (an asker's own, or the flusher's)
        self._waiting: dict[str, asyncio.Future[ns.RouteResponse]] = {}
        self._single_only = False
        self._flushers: set[asyncio.Task[None]] = set()  # held: a loop keeps weak references
        self.calls = 0
        """Joined (``routes``) calls made (with :attr:`joined`: names per call)."""
        self.joined = 0
        """Names read in joined calls."""

    async def read(self, topic: str) -> ns.RouteResponse:
        """The route of ``topic``, read linearizably after this call began (maybe in one
        call with other topics); raises the BrokerError of its read."""
        if self._busy:
            future = self._waiting.get(topic)
            if future is None:
                future = self._waiting[topic] = asyncio.get_running_loop().create_future()
                future.add_done_callback(_retrieved)
            # Shared by every asker of the topic: one giving up cancels only its wait.
            return await asyncio.shield(future)
        self._busy = True
        try:
            return await self._read_one(topic)
        finally:
            self._hand_over()

    def _hand_over(self) -> None:
        """The read in flight ended: the waiting names go next, or nothing is in flight."""
        if not self._waiting:
            self._busy = False
            return
        flusher = asyncio.create_task(self._flush())
        self._flushers.add(flusher)
        flusher.add_done_callback(self._flushers.discard)

    async def _flush(self) -> None:
        try:
            while self._waiting:
                names = list(self._waiting)[: self._names_max]
                batch = {name: self._waiting.pop(name) for name in names}
                await self._send(batch)
        finally:
            self._busy = False

    async def _send(self, batch: dict[str, asyncio.Future[ns.RouteResponse]]) -> None:
        """Read ``batch``'s topics, settling each future; never raises."""
        if len(batch) == 1 or self._single_only:
            await asyncio.gather(*(self._alone(name, done) for name, done in batch.items()))
            return
        self.calls += 1
        self.joined += len(batch)
        try:
            outcomes = await self._read_many(list(batch))
        except BrokerError as error:
            if error.code is codes.UNKNOWN_METHOD:
                self._single_only = True
                await self._send(batch)
                return
            fail_waiting(batch.values(), error)
            return
        except Exception as error:  # noqa: BLE001 - handed to every waiting asker
            fail_waiting(batch.values(), error)
            return
        if len(outcomes) != len(batch):
            fail_waiting(
                batch.values(),
                BrokerError(
                    codes.INTERNAL,
                    f"the nameserver answered {len(outcomes)} routes for {len(batch)} topics",
                ),
            )
            return
        for done, outcome in zip(batch.values(), outcomes, strict=True):
            if done.done():
                continue
            if isinstance(outcome, BrokerError):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)

    async def _alone(self, topic: str, done: asyncio.Future[ns.RouteResponse]) -> None:
        try:
            route = await self._read_one(topic)
        except Exception as error:  # noqa: BLE001 - handed to its askers
            fail_waiting((done,), error)
            return
        if not done.done():
            done.set_result(route)


def _retrieved(future: asyncio.Future[ns.RouteResponse]) -> None:
    """Mark a shared read's error seen: every asker may have given up on it."""
    if not future.cancelled():
        future.exception()


__all__ = ["RouteReads"]
