"""The broker's ACL guard: demands by method, authentication, refusals as v2 statuses."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from broker.acl import AclCache, AclGuard
from broker.errors import BrokerError
from broker.grpc.acl_demands import GROUP, TOPIC, demand_of
from broker.grpc.acl_guard import check_call, guarded, source_ip_of
from broker.grpc.status import status_of
from broker.remoting.acl_demands import demand_of as remoting_demand_of
from broker.remoting.status import code_of as status_code_of
from protocol import errors
from protocol.acl import (
    Acl,
    AclTables,
    Action,
    Forbidden,
    PolicyEntry,
    Unauthenticated,
    User,
    parse_resource,
)
from protocol.acl_signature import (
    CLASSIC_ACCESS_KEY,
    CLASSIC_SIGNATURE,
    authorization,
    classic_signature,
    format_date_time,
)
from protocol.remoting.codes import RequestCode, ResponseCode
from protocol.remoting.frames import RemotingCommand
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb

NOW_MS = 1_795_000_000_000
TABLES = AclTables(
    (User("alice", "s3cret"),),
    (
        Acl(
            "alice",
            (
                PolicyEntry(parse_resource("Topic:orders"), (Action.PUB,)),
                PolicyEntry(parse_resource("Group:g"), (Action.SUB,)),
            ),
        ),
    ),
)


class Context:
    def __init__(self, metadata: tuple[tuple[str, str], ...], peer: str = "") -> None:
        self._metadata = metadata
        self._peer = peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer


def signed(user: str, secret: str, date_ms: int = NOW_MS) -> Context:
    date_time = format_date_time(date_ms)
    return Context(
        (("x-mq-date-time", date_time), ("authorization", authorization(user, secret, date_time))),
        "ipv4:10.0.0.7:5555",
    )


async def loaded_guard() -> AclGuard:
    async def fetch() -> AclTables:
        return TABLES

    cache = AclCache(fetch)
    await cache.refresh()
    return AclGuard(cache, skew_ms=60_000, clock_ms=lambda: NOW_MS)


def send_request(topic: str) -> spb.SendMessageRequest:
    message = pb.Message(
        topic=pb.Resource(name=topic), system_properties=pb.SystemProperties(message_id="m1")
    )
    return spb.SendMessageRequest(messages=[message])


def test_each_method_demands_rocketmqs_action_and_resources() -> None:
    route = demand_of("QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name="t")))
    assert route is not None
    assert route.actions == (Action.PUB, Action.SUB)
    send = demand_of("SendMessage", send_request("t"))
    assert send is not None
    assert (send.actions, send.resources) == ((Action.PUB,), ((TOPIC, "t"),))
    receive = spb.ReceiveMessageRequest(
        group=pb.Resource(name="g"), message_queue=pb.MessageQueue(topic=pb.Resource(name="t"))
    )
    got = demand_of("ReceiveMessage", receive)
    assert got is not None
    assert got.resources == ((TOPIC, "t"), (GROUP, "g"))
    ack = spb.AckMessageRequest(group=pb.Resource(name="g"), topic=pb.Resource(name="t"))
    acked = demand_of("AckMessage", ack)
    assert acked is not None
    assert acked.resources == ((TOPIC, "t"), (GROUP, "g"))
    assert demand_of("Heartbeat", spb.HeartbeatRequest()) is None


def test_the_guard_authenticates_then_checks_the_demand() -> None:
    guard = asyncio.run(loaded_guard())
    check_call(guard, "SendMessage", send_request("orders"), signed("alice", "s3cret"))
    cases = [
        (send_request("orders"), Context(()), errors.UNAUTHENTICATED, "header authorization"),
        (send_request("orders"), signed("alice", "wrong"), errors.UNAUTHENTICATED, "mismatch"),
        (send_request("orders"), signed("bob", "x"), errors.UNAUTHENTICATED, "does not exist"),
        (
            send_request("orders"),
            signed("alice", "s3cret", NOW_MS - 61_000),
            errors.UNAUTHENTICATED,
            "more than 60 s",
        ),
        (send_request("payments"), signed("alice", "s3cret"), errors.PERMISSION_DENIED,
         "may not Pub on Topic:payments"),
    ]  # fmt: skip
    for request, context, code, words in cases:
        with pytest.raises(BrokerError, match=words) as raised:
            check_call(guard, "SendMessage", request, context)
        assert raised.value.code is code
    # Route lookups pass with Pub or Sub: alice may Pub on orders.
    route = spb.QueryRouteRequest(topic=pb.Resource(name="orders"))
    check_call(guard, "QueryRoute", route, signed("alice", "s3cret"))


def test_statuses_are_unauthorized_and_forbidden() -> None:
    assert status_of(BrokerError(errors.UNAUTHENTICATED, "x")).code == pb.UNAUTHORIZED
    assert status_of(BrokerError(errors.PERMISSION_DENIED, "x")).code == pb.FORBIDDEN


def test_before_the_tables_are_read_calls_are_unavailable() -> None:
    async def fetch() -> AclTables:
        raise BrokerError(errors.UNAVAILABLE, "no nameserver")

    guard = AclGuard(AclCache(fetch), clock_ms=lambda: NOW_MS)
    with pytest.raises(BrokerError, match="not read") as raised:
        check_call(guard, "SendMessage", send_request("orders"), signed("alice", "s3cret"))
    assert raised.value.code.retriable


def test_a_refused_send_answers_one_entry_per_message_without_running_the_handler() -> None:
    guard = asyncio.run(loaded_guard())
    ran: list[Any] = []

    async def handler(request: Any, context: Any) -> Any:
        ran.append(request)
        return spb.SendMessageResponse()

    wrapped = guarded("SendMessage", grpc.unary_unary_rpc_method_handler(handler), guard)
    answer = asyncio.run(wrapped.unary_unary(send_request("payments"), signed("alice", "s3cret")))
    assert answer.status.code == pb.FORBIDDEN
    assert [(e.status.code, e.message_id) for e in answer.entries] == [(pb.FORBIDDEN, "m1")]
    assert not ran
    asyncio.run(wrapped.unary_unary(send_request("orders"), signed("alice", "s3cret")))
    assert len(ran) == 1


def test_source_addresses_come_from_either_servers_peer() -> None:
    assert source_ip_of(Context((), "ipv4:10.0.0.7:5555")) == "10.0.0.7"
    assert source_ip_of(Context((), "ipv6:[::1]:5555")) == "::1"
    assert source_ip_of(Context((), "127.0.0.1:80")) == "127.0.0.1"
    assert source_ip_of(Context((), "")) == ""


def test_a_verified_signature_is_reused_only_within_the_skew_and_the_same_tables() -> None:
    now = [NOW_MS]
    current = [TABLES]

    async def fetch() -> AclTables:
        return current[0]

    async def guard_of() -> AclGuard:
        cache = AclCache(fetch)
        await cache.refresh()
        return AclGuard(cache, skew_ms=60_000, clock_ms=lambda: now[0])

    guard = asyncio.run(guard_of())
    context = signed("alice", "s3cret")
    check_call(guard, "SendMessage", send_request("orders"), context)
    check_call(guard, "SendMessage", send_request("orders"), context)  # remembered
    now[0] += 61_000  # the same header, now stale: refused though remembered
    with pytest.raises(BrokerError, match="more than 60 s"):
        check_call(guard, "SendMessage", send_request("orders"), context)
    now[0] = NOW_MS
    current[0] = AclTables((User("alice", "n3w"),), TABLES.acls)  # the secret changed
    asyncio.run(guard.cache.refresh())
    with pytest.raises(BrokerError, match="signature mismatch"):
        check_call(guard, "SendMessage", send_request("orders"), context)


# -- the remoting port (classic clients) ---------------------------------------------


def classic_request(code: int, fields: dict[str, str], user: str, secret: str) -> RemotingCommand:
    signed_fields = {**fields, CLASSIC_ACCESS_KEY: user}
    signed_fields[CLASSIC_SIGNATURE] = classic_signature(signed_fields, b"body", secret)
    return RemotingCommand(code, 7, ext_fields=signed_fields, body=b"body")


def test_classic_requests_are_authenticated_by_their_signed_ext_fields() -> None:
    guard = asyncio.run(loaded_guard())
    send_v2 = {"a": "producers", "b": "orders"}  # SEND_MESSAGE_V2's short keys
    request = classic_request(RequestCode.SEND_MESSAGE_V2, send_v2, "alice", "s3cret")
    user, tables = guard.authenticate_classic(request.ext_fields, request.body)
    demand = remoting_demand_of(request)
    assert demand is not None
    assert demand.resources == ((TOPIC, "orders"),)
    guard.authorize(user, tables, demand, "10.0.0.7")
    tampered = {**request.ext_fields, "b": "payments"}
    with pytest.raises(Unauthenticated, match="signature mismatch"):
        guard.authenticate_classic(tampered, request.body)
    with pytest.raises(Unauthenticated, match="AccessKey and Signature"):
        guard.authenticate_classic(send_v2, b"")
    other = classic_request(RequestCode.SEND_MESSAGE_V2, {**send_v2, "b": "x"}, "alice", "s3cret")
    with pytest.raises(Forbidden, match="may not Pub on Topic:x"):
        guard.authorize(user, tables, remoting_demand_of(other), "10.0.0.7")


def test_classic_demands_follow_rocketmq_and_retry_topics_are_their_groups() -> None:
    pull = RemotingCommand(
        RequestCode.PULL_MESSAGE, 1, ext_fields={"topic": "%RETRY%g", "consumerGroup": "g"}
    )
    demand = remoting_demand_of(pull)
    assert demand is not None
    assert demand.resources == ((GROUP, "g"), (GROUP, "g"))
    route = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, ext_fields={"topic": "TBW102"})
    assert remoting_demand_of(route) is None
    assert status_code_of(BrokerError(errors.PERMISSION_DENIED, "x")) == ResponseCode.NO_PERMISSION
    assert status_code_of(BrokerError(errors.UNAUTHENTICATED, "x")) == ResponseCode.NO_PERMISSION
