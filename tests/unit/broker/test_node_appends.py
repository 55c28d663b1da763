"""Appends to different queues joined per storage node (fake storage calls)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from angelia_rpc import AngeliaError, RemoteError
from broker.domain import Message, QueueRef
from broker.services.node_appends import NodeAppends
from broker.services.storage import StorageStore
from protocol import errors
from protocol import nameserver_api as ns
from protocol import storage_api as st
from protocol.errors import WireError
from tests.waiting import async_wait_until

NODE, OTHER = "10.0.0.1:1", "10.0.0.2:1"


def _request(queue_id: int) -> st.AppendRequest:
    return st.AppendRequest("t", queue_id, records=b"r%d" % queue_id)


def _stored(offset: int) -> st.AppendResponse:
    return st.AppendResponse([], 7, ["m"], offset)


class _Calls:
    """Records each call; a queues call waits for :meth:`release` when ``held``."""

    def __init__(self, held: bool = False) -> None:
        self.queues: list[list[int]] = []
        self.single: list[int] = []
        self.held = held
        self._gate = asyncio.Event()
        self.answer: Callable[[st.AppendRequest], st.QueueAppended] = lambda r: st.QueueAppended(
            _stored(r.queue_id)
        )
        self.fail: BaseException | None = None

    def release(self) -> None:
        self._gate.set()

    async def call_queues(
        self, address: str, request: st.AppendQueuesRequest, timeout_ms: int
    ) -> st.AppendQueuesResponse:
        assert address == NODE
        assert timeout_ms > 0
        self.queues.append([a.queue_id for a in request.appends])
        if self.held:
            await self._gate.wait()
        if self.fail is not None:
            raise self.fail
        return st.AppendQueuesResponse([self.answer(a) for a in request.appends])

    async def call_single(
        self, address: str, request: st.AppendRequest, timeout_ms: int
    ) -> st.AppendResponse:
        self.single.append(request.queue_id)
        return _stored(request.queue_id)


async def test_appends_that_come_while_a_call_is_in_flight_go_together_in_the_next() -> None:
    calls = _Calls(held=True)
    appends = NodeAppends(calls.call_queues, calls.call_single)
    first = asyncio.create_task(appends.append(NODE, _request(0), 1000))
    await async_wait_until(lambda: calls.queues == [[0]], 5, "the first call, at once")
    rest = [asyncio.create_task(appends.append(NODE, _request(q), 1000)) for q in (1, 2, 3)]
    await asyncio.sleep(0)
    assert calls.queues == [[0]]  # they wait for the call in flight
    calls.release()
    answers = await asyncio.gather(first, *rest)
    assert [a.queued_from for a in answers] == [0, 1, 2, 3]
    assert calls.queues == [[0], [1, 2, 3]]
    assert (appends.calls, appends.appends) == (2, 4)


async def test_one_failed_append_fails_only_its_caller_with_its_own_flags() -> None:
    calls = _Calls()
    appends = NodeAppends(calls.call_queues, calls.call_single, calls_in_flight_max=1)

    def answer(request: st.AppendRequest) -> st.QueueAppended:
        if request.queue_id == 1:
            return st.QueueAppended(None, WireError(40, "not the leader", True, OTHER))
        return st.QueueAppended(_stored(request.queue_id))

    calls.answer = answer
    results = await asyncio.gather(
        *(appends.append(NODE, _request(q), 1000) for q in (0, 1, 2)), return_exceptions=True
    )
    assert [r.queued_from for r in results if isinstance(r, st.AppendResponse)] == [0, 2]
    error = results[1]
    assert isinstance(error, RemoteError)
    assert (error.code, error.retriable, error.leader_hint) == (errors.NOT_LEADER, True, OTHER)


async def test_a_failed_call_fails_every_append_it_carried() -> None:
    calls = _Calls()
    calls.fail = AngeliaError(errors.UNAVAILABLE, "down")
    appends = NodeAppends(calls.call_queues, calls.call_single)
    results = await asyncio.gather(
        *(appends.append(NODE, _request(q), 1000) for q in (0, 1)), return_exceptions=True
    )
    assert all(isinstance(r, AngeliaError) and r.code is errors.UNAVAILABLE for r in results)


async def test_a_node_without_the_call_gets_single_appends_from_then_on() -> None:
    calls = _Calls()
    calls.fail = RemoteError(errors.UNKNOWN_METHOD, "this server does not serve it")
    appends = NodeAppends(calls.call_queues, calls.call_single)
    first = await appends.append(NODE, _request(0), 1000)
    second = await appends.append(NODE, _request(1), 1000)
    assert (first.queued_from, second.queued_from) == (0, 1)
    assert calls.queues == [[0]]
    assert calls.single == [0, 1]


def test_bounds_below_one_are_refused() -> None:
    calls = _Calls()
    with pytest.raises(ValueError, match="at least 1"):
        NodeAppends(calls.call_queues, calls.call_single, calls_in_flight_max=0)


class _Metadata:
    def on_route_change(self, callback: Callable[[int | None], None]) -> None:
        del callback

    async def route(self, topic: str) -> ns.RouteResponse:
        info = ns.QueueRouteInfo(0, 1, 1, ns.EndpointInfo(1, NODE, True), [])
        return ns.RouteResponse(None, [info], 1)  # type: ignore[arg-type]

    def forget_route(self, topic: str | None = None) -> None:
        pass


class _Stub:
    def __init__(self, address: str, log: list[tuple[str, str]]) -> None:
        self.address = address
        self.log = log

    async def append(self, request: st.AppendRequest, timeout_ms: int) -> st.AppendResponse:
        self.log.append(("append", self.address))
        return _stored(5 if self.address == OTHER else 0)

    async def append_queues(
        self, request: st.AppendQueuesRequest, timeout_ms: int
    ) -> st.AppendQueuesResponse:
        self.log.append(("append_queues", self.address))
        failure = WireError(errors.NOT_LEADER.number, "deposed", True, OTHER)
        return st.AppendQueuesResponse([st.QueueAppended(None, failure)])


class _Peers:
    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []

    def stub(self, service: object, address: str, *, wait_for_ready: bool = True) -> _Stub:
        return _Stub(address, self.log)


async def test_the_store_fails_an_append_over_from_its_own_not_leader_in_a_joined_call() -> None:
    peers = _Peers()
    store = StorageStore(_Metadata(), peers)  # type: ignore[arg-type]
    queue = QueueRef("t", 0)
    first = await store.append(queue, [Message("t", b"x", "m")])
    # The leader is known now: the next append goes in a joined call, whose answer
    # names another leader for it; the failover sends it there alone.
    second = await store.append(queue, [Message("t", b"x", "m")])
    assert (first[0].offset, second[0].offset) == (0, 5)
    assert peers.log == [("append", NODE), ("append_queues", NODE), ("append", OTHER)]
