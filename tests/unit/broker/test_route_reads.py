"""broker.services.route_reads: concurrent route misses joined into one nameserver call."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from broker.errors import BrokerError, Reason
from broker.services.route_reads import RouteReads
from protocol import errors as codes
from protocol import nameserver_api as ns


def _route(topic: str) -> ns.RouteResponse:
    return ns.RouteResponse(ns.TopicInfo(topic, "c1", 8, 1, 0, 6), [], 7)


class _Nameserver:
    """Answers reads; the first single read waits for ``release`` (a read in flight)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()  # a single read began
        self.singles: list[str] = []
        self.joined: list[list[str]] = []
        self.missing: set[str] = set()
        self.joined_error: BrokerError | None = None

    def _answer(self, topic: str) -> ns.RouteResponse | BrokerError:
        if topic in self.missing:
            return BrokerError.of(Reason.TOPIC_NOT_FOUND, f"topic {topic!r}: no such topic")
        return _route(topic)

    async def read_one(self, topic: str) -> ns.RouteResponse:
        self.singles.append(topic)
        self.started.set()
        if len(self.singles) == 1:
            await self.release.wait()
        answer = self._answer(topic)
        if isinstance(answer, BrokerError):
            raise answer
        return answer

    async def read_many(self, topics: Sequence[str]) -> list[ns.RouteResponse | BrokerError]:
        self.joined.append(list(topics))
        if self.joined_error is not None:
            raise self.joined_error
        return [self._answer(topic) for topic in topics]


async def _in_flight(reads: RouteReads, nameserver: _Nameserver) -> asyncio.Task[ns.RouteResponse]:
    """A first read, held in flight until ``nameserver.release`` is set."""
    first = asyncio.create_task(reads.read("first"))
    await nameserver.started.wait()
    return first


async def _asked_during_a_read(
    reads: RouteReads, nameserver: _Nameserver, topics: Sequence[str]
) -> list[asyncio.Task[ns.RouteResponse]]:
    """Reads of ``topics`` asked while a first read is in flight, which then ends."""
    first = await _in_flight(reads, nameserver)
    waiting = [asyncio.create_task(reads.read(t)) for t in topics]
    await asyncio.sleep(0)
    assert nameserver.joined == []  # they wait for the read in flight
    nameserver.release.set()
    assert await first == _route("first")
    return waiting


async def test_an_idle_broker_reads_at_once_alone() -> None:
    nameserver = _Nameserver()
    nameserver.release.set()
    reads = RouteReads(nameserver.read_one, nameserver.read_many)
    assert await reads.read("a") == _route("a")
    assert await reads.read("b") == _route("b")
    assert nameserver.singles == ["a", "b"]
    assert nameserver.joined == []


async def test_misses_during_a_read_go_together_once_each() -> None:
    nameserver = _Nameserver()
    reads = RouteReads(nameserver.read_one, nameserver.read_many)
    waiting = await _asked_during_a_read(reads, nameserver, ("b", "c", "b", "d"))
    assert [await task for task in waiting] == [_route(t) for t in ("b", "c", "b", "d")]
    assert nameserver.joined == [["b", "c", "d"]]  # "b" asked twice, read once
    assert (reads.calls, reads.joined) == (1, 3)
    assert await reads.read("e") == _route("e")  # idle again: alone
    assert nameserver.singles == ["first", "e"]


async def test_a_missing_topic_fails_only_its_askers() -> None:
    nameserver = _Nameserver()
    nameserver.missing = {"gone"}
    reads = RouteReads(nameserver.read_one, nameserver.read_many)
    first = await _in_flight(reads, nameserver)
    gone = asyncio.create_task(reads.read("gone"))
    there = asyncio.create_task(reads.read("there"))
    await asyncio.sleep(0)
    nameserver.release.set()
    await first
    with pytest.raises(BrokerError) as failed:
        await gone
    assert failed.value.reason is Reason.TOPIC_NOT_FOUND
    assert "'gone'" in failed.value.message
    assert await there == _route("there")


async def test_a_failed_joined_call_fails_every_name_it_carried() -> None:
    nameserver = _Nameserver()
    nameserver.joined_error = BrokerError(codes.UNAVAILABLE, "routes of 2 topics: no leader")
    reads = RouteReads(nameserver.read_one, nameserver.read_many)
    waiting = await _asked_during_a_read(reads, nameserver, ("b", "c"))
    for task in waiting:
        with pytest.raises(BrokerError) as failed:
            await task
        assert failed.value.code is codes.UNAVAILABLE
    nameserver.joined_error = None
    assert await reads.read("b") == _route("b")  # nothing left in flight


async def test_a_nameserver_without_routes_gets_single_reads_from_then_on() -> None:
    nameserver = _Nameserver()
    nameserver.joined_error = BrokerError(codes.UNKNOWN_METHOD, "no method routes")
    reads = RouteReads(nameserver.read_one, nameserver.read_many)
    waiting = await _asked_during_a_read(reads, nameserver, ("b", "c"))
    assert [await task for task in waiting] == [_route("b"), _route("c")]
    assert nameserver.joined == [["b", "c"]]  # tried once
    nameserver.release.clear()
    first = await _in_flight_again(reads, nameserver, "f2")
    more = [asyncio.create_task(reads.read(t)) for t in ("d", "e")]
    await asyncio.sleep(0)
    nameserver.release.set()
    await first
    assert [await task for task in more] == [_route("d"), _route("e")]
    assert nameserver.joined == [["b", "c"]]
    assert nameserver.singles[-2:] == ["d", "e"]


async def _in_flight_again(
    reads: RouteReads, nameserver: _Nameserver, topic: str
) -> asyncio.Task[ns.RouteResponse]:
    """A read of ``topic`` held in flight: the nameserver's single reads wait again."""
    nameserver.singles.clear()
    nameserver.started.clear()
    task = asyncio.create_task(reads.read(topic))
    await nameserver.started.wait()
    return task


async def test_an_asker_that_gives_up_leaves_the_read_to_the_others() -> None:
    nameserver = _Nameserver()
    reads = RouteReads(nameserver.read_one, nameserver.read_many)
    first = await _in_flight(reads, nameserver)
    quitter = asyncio.create_task(reads.read("b"))
    stayer = asyncio.create_task(reads.read("b"))
    other = asyncio.create_task(reads.read("c"))
    await asyncio.sleep(0)
    quitter.cancel()
    first.cancel()  # the asker whose read is in flight gives up too
    nameserver.release.set()
    with pytest.raises(asyncio.CancelledError):
        await quitter
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await stayer == _route("b")
    assert await other == _route("c")
    assert nameserver.joined == [["b", "c"]]


async def test_an_answer_of_the_wrong_length_fails_the_call() -> None:
    nameserver = _Nameserver()

    async def short(topics: Sequence[str]) -> list[ns.RouteResponse | BrokerError]:
        return [_route(topics[0])]

    reads = RouteReads(nameserver.read_one, short)
    waiting = await _asked_during_a_read(reads, nameserver, ("b", "c"))
    for task in waiting:
        with pytest.raises(BrokerError) as failed:
            await task
        assert failed.value.code is codes.INTERNAL
        assert "1 routes for 2 topics" in failed.value.message


async def test_a_joined_call_names_at_most_names_max() -> None:
    nameserver = _Nameserver()
    reads = RouteReads(nameserver.read_one, nameserver.read_many, names_max=2)
    waiting = await _asked_during_a_read(reads, nameserver, ("b", "c", "d", "e", "f"))
    assert [await task for task in waiting] == [_route(t) for t in ("b", "c", "d", "e", "f")]
    assert nameserver.joined == [["b", "c"], ["d", "e"]]
    assert nameserver.singles == ["first", "f"]  # the last one alone


def test_names_max_must_be_positive() -> None:
    nameserver = _Nameserver()
    with pytest.raises(ValueError, match="names_max must be at least 1, not 0"):
        RouteReads(nameserver.read_one, nameserver.read_many, names_max=0)
