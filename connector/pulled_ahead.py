"""One source queue's messages pulled ahead of their sends (the connector's read-ahead).

The puller of a (rule, source queue) appends whole pulls; the sender takes batches
from the front (:mod:`connector.runner` runs both).

SHELL (asyncio events).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from dataclasses import dataclass

from connector.client import Pulled
from protocol.rocketmq.v2 import definition_pb2 as pb


@dataclass(frozen=True)
class Taken:
    """What a send takes from a :class:`PulledAhead`."""

    messages: list[pb.Message]
    """In source order."""
    body_bytes: int
    end_offset: int
    """Where the queue goes on past them: the next message still buffered, else where
    the next pull starts (past what the tag filter skipped)."""
    caught_up: bool
    """A pull found nothing more (before its long poll ended) and nothing is left."""
    pull_ms: tuple[int, int] = (0, 0)
    """When the pull that brought the last message went and came back (epoch ms, as
    :meth:`PulledAhead.put` was told; 0 when not told): the delay stages."""


class PulledAhead:
    """One source queue's messages pulled ahead of their sends.

    The puller appends whole pulls while fewer than ``bytes_max`` body bytes wait (the
    pull that crosses the bound is kept whole): at once after a full pull; after one
    that moved past fewer offsets than it asked for messages (the queue's end), once
    the sender took everything or ``linger_s`` passed, whichever comes first. So a
    queue copied at a moderate rate costs at most a pull per send or per ``linger_s``,
    not a pull per few messages, and what arrives while a send is in flight is
    pulled meanwhile: the next send takes it as soon as the last one is acknowledged
    (holding the next pull until the take would leave it in the source for another
    send's time). The sender takes a batch from the front.
    Offsets: :attr:`end_offset` is where the next pull starts; a pull's messages are in
    offset order, each past the last one's.
    """

    def __init__(self, offset: int, bytes_max: int, linger_s: float) -> None:
        """Empty, pulling from ``offset`` on."""
        self.end_offset = offset
        self._bytes_max = bytes_max
        self._linger_s = linger_s
        self._messages: deque[pb.Message] = deque()
        self._sizes: deque[int] = deque()  # each message's body bytes (a body read copies it)
        self._bytes = 0
        self._caught_up = False
        self._held = False  # a partial pull waits (lingers) to be taken before the next pull
        # Per pull that brought messages: its last offset, when it went and came back.
        self._pulls: deque[tuple[int, int, int]] = deque()
        self._error: BaseException | None = None
        self._news = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    def put(self, pulled: Pulled, *, full: bool, pull_ms: tuple[int, int] = (0, 0)) -> None:
        """Append a pull's answer; ``full``: it moved past as many offsets as it asked for
        messages (so the queue's end was not reached); ``pull_ms``: when it went and came
        back (epoch ms), handed on with the take of its messages (:attr:`Taken.pull_ms`)."""
        sizes = [len(m.body) for m in pulled.messages]
        if pulled.messages:
            last = pulled.messages[-1].system_properties.queue_offset
            self._pulls.append((last, *pull_ms))
        self._messages.extend(pulled.messages)
        self._sizes.extend(sizes)
        self._bytes += sum(sizes)
        self.end_offset = pulled.next_offset
        self._caught_up = not pulled.messages and pulled.status == "MESSAGE_NOT_FOUND"
        self._held = bool(pulled.messages) and not full
        if self._bytes >= self._bytes_max or self._held:
            self._room.clear()
        else:
            self._room.set()
        self._news.set()

    def fail(self, error: BaseException) -> None:
        """The puller ended by ``error``: the next :meth:`wait_news` raises it."""
        self._error = error
        self._news.set()

    async def wait_room(self) -> None:
        """Until the next pull may go (see the class docstring)."""
        if self._held and self._bytes < self._bytes_max:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._linger_s):
                    await self._room.wait()
            if self._bytes < self._bytes_max:
                return
        await self._room.wait()

    async def news_within(self, offset: int, timeout_s: float) -> bool:
        """Whether there is something to take past ``offset`` within ``timeout_s`` (see
        :meth:`wait_news`)."""
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):
                await self.wait_news(offset)
        except TimeoutError:
            return False
        return True

    async def wait_news(self, offset: int) -> None:
        """Until there is something to take past ``offset`` (messages, a moved end or a
        caught-up pull); raises the puller's error."""
        while self._error is None and not (
            self._messages or self.end_offset != offset or self._caught_up
        ):
            self._news.clear()
            await self._news.wait()
        if self._error is not None:
            raise self._error

    def take(self, messages_max: int, bytes_max: int) -> Taken:
        """The oldest messages, at most ``messages_max`` and ``bytes_max`` body bytes (at
        least one message, whatever its size)."""
        sizes = self._sizes
        count = size = 0
        for body in itertools.islice(sizes, messages_max):
            if count and size + body > bytes_max:
                break
            count += 1
            size += body
        messages = self._messages
        taken = [messages.popleft() for _ in range(count)]
        for _ in range(count):
            sizes.popleft()
        self._bytes -= size
        if not self._messages:
            self._held = False
        if self._bytes < self._bytes_max and not self._held:
            self._room.set()
        end = (
            self._messages[0].system_properties.queue_offset if self._messages else self.end_offset
        )
        caught_up = self._caught_up and not self._messages
        self._caught_up = False
        return Taken(taken, size, end, caught_up, self._pull_of(taken))

    def _pull_of(self, taken: list[pb.Message]) -> tuple[int, int]:
        """When the pull that brought the last of ``taken`` went and came back; the
        record of every pull taken whole is dropped."""
        pulls = self._pulls
        if not taken:
            return (0, 0)
        last = taken[-1].system_properties.queue_offset
        while pulls and pulls[0][0] < last:
            pulls.popleft()  # taken whole before
        if not pulls:
            return (0, 0)
        end, went, came = pulls[0]
        if end == last:
            pulls.popleft()  # taken whole now
        return (went, came)


def delay_stages(
    stored_ms: int, pull_ms: tuple[int, int], taken_ms: int, acked_ms: int
) -> dict[str, int]:
    """Where a copied batch's last message spent its delay (epoch ms in, ms out):
    ``wait_pull_ms`` in the source before the pull that brought it went (the puller
    lingering for a take, held by a full buffer or busy with earlier pulls);
    ``pull_ms`` from then (or its store, when the pull was long polling for it) until
    the pull came back; ``wait_send_ms`` pulled, until its send took it (the send
    before in flight); ``send_ms`` from the take until the target acknowledged it;
    ``delay_ms`` the whole (the ``rip5_connector_delay_milliseconds`` it set). Without
    the pull's times (0, 0) only the last two stages and the whole."""
    went_ms, came_ms = pull_ms
    stages = {"send_ms": acked_ms - taken_ms, "delay_ms": acked_ms - stored_ms}
    if came_ms:
        stages["wait_pull_ms"] = max(0, went_ms - stored_ms)
        stages["pull_ms"] = came_ms - max(went_ms, stored_ms)
        stages["wait_send_ms"] = taken_ms - came_ms
    return stages
