"""The broker's nameserver link and the nameserver client over fake replicas: leader
hints followed, unreachable replicas passed over, leases answered, not waited out."""

from __future__ import annotations

from typing import Any

import pytest

from angelia_rpc.errors import AngeliaError
from angelia_rpc.nameserver_client import NameserverClient
from broker.errors import BrokerError
from broker.services.nameserver import ClusterMetadata, NameserverLink
from broker.services.peers import ClusterCoordination
from protocol import errors
from protocol import nameserver_api as api

A, B, C = "ns-a:1", "ns-b:1", "ns-c:1"
STATUS = api.NameRequest("c")


class _Replica:
    """A fake nameserver's stub: every method answers the next scripted answer."""

    def __init__(self, address: str, calls: list[str], answers: list[object]) -> None:
        self.address = address
        self.calls = calls
        self.answers = answers

    def __getattr__(self, name: str) -> Any:
        async def answer(request: object = None, timeout_ms: int = 0) -> object:
            self.calls.append(self.address)
            reply = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
            if isinstance(reply, BaseException):
                raise reply
            return reply

        return answer


class _Peers:
    def __init__(self, answers: dict[str, list[object]]) -> None:
        self.calls: list[str] = []
        self.replicas = {a: _Replica(a, self.calls, list(r)) for a, r in answers.items()}

    def stub(self, service: object, address: str, *, wait_for_ready: bool = True) -> _Replica:
        return self.replicas[address]


def _not_leader(hint: str = "") -> AngeliaError:
    return AngeliaError(errors.NOT_LEADER, "follower", leader_hint=hint)


def _down() -> AngeliaError:
    return AngeliaError(errors.UNAVAILABLE, "down")


def _link(answers: dict[str, list[object]], **options: Any) -> tuple[NameserverLink, _Peers]:
    peers = _Peers(answers)
    return NameserverLink(list(answers), peers, **options), peers  # type: ignore[arg-type]


async def _status(link: NameserverLink) -> object:
    return await link.call("status", lambda stub, timeout_ms: stub.cluster_status(STATUS))


async def test_the_link_follows_a_hint_and_starts_the_next_call_at_the_leader() -> None:
    link, peers = _link({A: [_not_leader(C)], B: [_down()], C: ["ok"]})
    assert await _status(link) == "ok"
    assert await _status(link) == "ok"
    assert peers.calls == [A, C, C]


async def test_the_link_passes_over_an_unreachable_replica() -> None:
    link, peers = _link({A: [_down()], B: ["ok"], C: ["ok"]})
    assert await _status(link) == "ok"
    assert peers.calls == [A, B]


async def test_the_link_turns_a_final_error_into_a_broker_error_at_once() -> None:
    link, peers = _link({A: [AngeliaError(errors.NOT_FOUND, "no cluster")], B: ["ok"]})
    with pytest.raises(BrokerError) as raised:
        await _status(link)
    assert raised.value.code is errors.NOT_FOUND
    assert peers.calls == [A]


async def test_the_link_gives_up_at_its_deadline_with_a_retriable_error() -> None:
    link, peers = _link({A: [_not_leader()], B: [_down()]}, deadline_ms=150)
    with pytest.raises(BrokerError) as raised:
        await _status(link)
    assert raised.value.code in (errors.NOT_LEADER, errors.UNAVAILABLE)
    assert raised.value.retriable
    assert 2 <= len(peers.calls) < 30


def test_the_watch_reconnects_at_a_hint_else_at_the_next_replica() -> None:
    link, _ = _link({A: [], B: [], C: []})
    link.moved(_down())
    assert link.stub().address == B  # type: ignore[attr-defined]
    link.moved(AngeliaError(errors.UNAVAILABLE, "stopping", leader_hint=A))
    assert link.stub().address == A  # type: ignore[attr-defined]


async def test_a_lease_held_elsewhere_is_an_answer_not_a_failure_to_retry() -> None:
    held = AngeliaError(errors.LEASE_HELD, "held by broker-2")
    assert held.retriable  # the table's flag: it would be retried until the deadline
    link, peers = _link({A: [held]})
    coordination = ClusterCoordination(link, ClusterMetadata(link, cluster="c"))
    assert not await coordination.try_lease("checkback", "broker-1", 10_000)
    assert peers.calls == [A]


def _client(answers: dict[str, list[object]], **options: Any) -> tuple[NameserverClient, _Peers]:
    peers = _Peers(answers)
    client = NameserverClient(list(answers), **options)
    client.stub = peers.replicas.__getitem__  # type: ignore[assignment,method-assign]
    return client, peers


async def test_the_client_gives_up_after_a_pass_in_which_every_replica_was_unreachable() -> None:
    client, peers = _client({A: [_down()], B: [_down()], C: [_down()]})
    with pytest.raises(AngeliaError) as raised:
        await client.call(lambda ns: ns.cluster_status(STATUS))
    assert raised.value.code is errors.UNAVAILABLE
    assert peers.calls == [A, B, C]
    await client.close()


async def test_the_client_follows_hints_and_remembers_who_answered() -> None:
    client, peers = _client({A: [_down()], B: [_not_leader(C)], C: ["ok"]}, attempts_max=4)
    assert await client.call(lambda ns: ns.cluster_status(STATUS)) == "ok"
    assert peers.calls == [A, B, C]
    assert client.current == C
    await client.close()


async def test_the_client_stops_after_attempts_max_while_an_election_runs() -> None:
    client, peers = _client({A: [_not_leader()]}, attempts_max=3)
    with pytest.raises(AngeliaError) as raised:
        await client.call(lambda ns: ns.cluster_status(STATUS))
    assert raised.value.code is errors.NOT_LEADER
    assert peers.calls == [A, A, A]
    await client.close()
