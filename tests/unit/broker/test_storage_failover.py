"""Where the storage store sends a call, and what it makes of failures (fake storage nodes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from angelia_rpc.errors import AngeliaError
from broker.domain import QueueRef
from broker.errors import BrokerError
from broker.services.storage import StorageStore
from protocol import errors
from protocol import nameserver_api as ns
from protocol import storage_api as st

QUEUE = QueueRef("t", 0)
REQUEST = st.AppendRequest("t", 0)
GROUP = 1
LEADER, FOLLOWER, OTHER = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"


class _Metadata:
    """A route naming LEADER and FOLLOWER for every queue; counts the reads."""

    def __init__(self) -> None:
        self.reads = 0
        self.forgotten = 0

    def on_route_change(self, callback: Callable[[int | None], None]) -> None:
        del callback

    async def route(self, topic: str) -> ns.RouteResponse:
        self.reads += 1
        leader = ns.EndpointInfo(1, LEADER, True)
        info = ns.QueueRouteInfo(0, GROUP, 1, leader, [ns.EndpointInfo(2, FOLLOWER, True)])
        return ns.RouteResponse(None, [info], 1)  # type: ignore[arg-type]

    def forget_route(self, topic: str | None = None) -> None:
        self.forgotten += 1


class _Node:
    """A fake storage node's stub: its scripted answers, in turn (the last repeats)."""

    def __init__(self, address: str, calls: list[str], answers: list[object]) -> None:
        self.address = address
        self.calls = calls
        self.answers = answers

    async def append(self, request: object, timeout_ms: int) -> object:
        assert timeout_ms > 0
        self.calls.append(self.address)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


class _Peers:
    def __init__(self, answers: dict[str, list[object]]) -> None:
        self.calls: list[str] = []
        self.nodes = {
            address: _Node(address, self.calls, list(a)) for address, a in answers.items()
        }

    def stub(self, service: object, address: str, *, wait_for_ready: bool = True) -> _Node:
        assert not wait_for_ready  # a dead node must be passed over at once
        return self.nodes[address]


def _store(answers: dict[str, list[object]], **options: Any) -> tuple[StorageStore, _Peers]:
    peers = _Peers(answers)
    store = StorageStore(_Metadata(), peers, **options)  # type: ignore[arg-type]
    return store, peers


async def _append(store: StorageStore) -> object:
    return await store._call(
        QUEUE, "append", lambda stub, timeout_ms: stub.append(REQUEST, timeout_ms=timeout_ms)
    )


def _not_leader(hint: str = "") -> AngeliaError:
    return AngeliaError(errors.NOT_LEADER, "follower", leader_hint=hint)


async def test_the_leader_last_seen_is_called_straight_away() -> None:
    store, peers = _store({LEADER: ["ok"]})
    assert await _append(store) == "ok"
    reads = store._metadata.reads  # type: ignore[attr-defined]
    assert await _append(store) == "ok"
    assert peers.calls == [LEADER, LEADER]
    assert store._metadata.reads == reads + 1  # type: ignore[attr-defined]


async def test_a_hint_from_the_leader_last_seen_is_followed_and_remembered() -> None:
    store, peers = _store({LEADER: ["ok", _not_leader(OTHER)], OTHER: ["new"]})
    assert await _append(store) == "ok"
    assert await _append(store) == "new"
    assert await _append(store) == "new"
    assert peers.calls == [LEADER, LEADER, OTHER, OTHER]


async def test_an_unreachable_leader_last_seen_is_passed_over_for_the_next_replica() -> None:
    down = AngeliaError(errors.UNAVAILABLE, "down")
    store, peers = _store({LEADER: ["ok", down], FOLLOWER: ["took over"]})
    assert await _append(store) == "ok"
    assert await _append(store) == "took over"
    assert await _append(store) == "took over"
    assert peers.calls == [LEADER, LEADER, FOLLOWER, FOLLOWER]


async def test_an_error_that_is_not_retriable_is_the_answer_at_once() -> None:
    final = AngeliaError(errors.INVALID_RECEIPT_HANDLE, "stale")
    store, peers = _store({LEADER: ["ok", final]})
    assert await _append(store) == "ok"
    with pytest.raises(BrokerError) as raised:
        await _append(store)
    assert raised.value.code is errors.INVALID_RECEIPT_HANDLE
    assert peers.calls == [LEADER, LEADER]


async def test_every_replica_failing_reads_the_route_again_until_the_deadline() -> None:
    store, peers = _store({LEADER: [_not_leader()], FOLLOWER: [_not_leader()]}, deadline_ms=200)
    with pytest.raises(BrokerError) as raised:
        await _append(store)
    assert raised.value.code is errors.NOT_LEADER
    assert raised.value.retriable
    assert store._metadata.forgotten >= 1  # type: ignore[attr-defined]
    assert len(peers.calls) >= 4  # more than one pass over both
    assert len(peers.calls) < 40  # with pauses between the passes


async def test_the_scan_of_a_group_makes_one_pass_without_pausing() -> None:
    down = AngeliaError(errors.UNAVAILABLE, "down")
    store, peers = _store({LEADER: [down], FOLLOWER: [_not_leader(LEADER)], OTHER: [down]})
    with pytest.raises(BrokerError) as raised:
        await store._call_group(
            GROUP,
            [LEADER, FOLLOWER, OTHER],
            "scan",
            lambda stub, timeout_ms: stub.append(REQUEST, timeout_ms=timeout_ms),
        )
    assert raised.value.code is errors.UNAVAILABLE
    assert peers.calls == [LEADER, FOLLOWER, OTHER]  # the hint names a replica that failed
