"""Draining a broker: the gate over its calls, routes spread over the live brokers,
and the admin's broker lookup."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from broker.domain import QueueInfo, TopicInfo
from broker.grpc import convert
from broker.grpc.bad_requests import BadRequests, CheckedRegistration
from broker.grpc.drain import DRAINING_MESSAGE, DrainGate, gated
from broker.remoting.brokers import ClusterBrokers
from protocol import nameserver_api as ns
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from protocol.vocabulary import MessageType, Permission
from rip5.admin_nodes import broker_id_of


class _Context:
    """What a handler needs of a call context here: abort."""

    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        self.aborted = (code, details)
        raise asyncio.CancelledError  # as the servers end the call


async def test_a_call_in_flight_finishes_and_new_ones_are_refused() -> None:
    gate = DrainGate()
    release = asyncio.Event()

    async def send(request: Any, context: Any) -> spb.SendMessageResponse:
        await release.wait()
        return spb.SendMessageResponse(status=pb.Status(code=pb.OK))

    handler = gated(grpc.unary_unary_rpc_method_handler(send), gate, spb.SendMessageResponse)
    in_flight = asyncio.create_task(handler.unary_unary(spb.SendMessageRequest(), _Context()))
    await asyncio.sleep(0)  # the call enters the gate
    assert gate.in_flight == 1
    gate.start()
    refused = await handler.unary_unary(spb.SendMessageRequest(), _Context())
    assert refused.status.code == pb.HA_NOT_AVAILABLE
    assert refused.status.message == DRAINING_MESSAGE
    assert gate.refused == 1
    assert not await gate.wait_idle(0.01)  # the first call still runs
    release.set()
    assert (await in_flight).status.code == pb.OK
    assert await gate.wait_idle(1.0)
    assert gate.in_flight == 0


async def test_a_long_poll_in_flight_runs_to_its_end() -> None:
    gate = DrainGate()
    release = asyncio.Event()

    async def receive(request: Any, context: Any) -> Any:
        await release.wait()
        yield spb.ReceiveMessageResponse(status=pb.Status(code=pb.OK))

    handler = gated(grpc.unary_stream_rpc_method_handler(receive), gate, spb.ReceiveMessageResponse)

    async def collect(context: _Context) -> list[Any]:
        return [r async for r in handler.unary_stream(spb.ReceiveMessageRequest(), context)]

    polling = asyncio.create_task(collect(_Context()))
    await asyncio.sleep(0)
    gate.start()
    refused = await collect(_Context())
    assert [r.status.code for r in refused] == [pb.HA_NOT_AVAILABLE]
    release.set()
    assert [r.status.code for r in await polling] == [pb.OK]
    assert await gate.wait_idle(1.0)


async def test_a_new_telemetry_stream_is_refused_unavailable() -> None:
    gate = DrainGate()

    async def telemetry(requests: Any, context: Any) -> Any:
        async for _request in requests:
            yield spb.TelemetryCommand()

    handler = gated(grpc.stream_stream_rpc_method_handler(telemetry), gate, spb.TelemetryCommand)
    gate.start()
    context = _Context()

    async def nothing() -> Any:
        return
        yield  # an async generator that yields nothing

    with pytest.raises(asyncio.CancelledError):
        [r async for r in handler.stream_stream(nothing(), context)]
    assert context.aborted == (grpc.StatusCode.UNAVAILABLE, DRAINING_MESSAGE)
    assert gate.in_flight == 0  # streams are not counted


class _Recorder:
    def __init__(self) -> None:
        self.registered: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.registered.update(handlers)


async def test_every_method_passes_the_gate() -> None:
    recorder, gate = _Recorder(), DrainGate()
    service_pb2_grpc.add_MessagingServiceServicer_to_server(
        service_pb2_grpc.MessagingServiceServicer(),
        CheckedRegistration(recorder, BadRequests(), gate=gate),
    )
    gate.start()
    answer = await recorder.registered["QueryRoute"].unary_unary(spb.QueryRouteRequest(), None)
    assert answer.status.code == pb.HA_NOT_AVAILABLE
    assert gate.refused == 1


def _topic(queues: int) -> TopicInfo:
    return TopicInfo(
        "orders",
        tuple(QueueInfo(i, Permission.READ_WRITE) for i in range(queues)),
        frozenset({MessageType.NORMAL}),
    )


def test_a_spread_route_alternates_the_brokers() -> None:
    queues = convert.spread_route_pb(_topic(5), "ns", ["10.0.0.1:8081", "10.0.0.2:8081"])
    hosts = [q.broker.endpoints.addresses[0].host for q in queues]
    assert hosts == ["10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.2", "10.0.0.1"]
    assert [q.id for q in queues] == [0, 1, 2, 3, 4]
    assert {q.broker.id for q in queues} == {0}  # every broker is a master of every queue
    assert queues[0].broker.name != queues[1].broker.name
    assert queues[0].broker.endpoints.scheme == pb.IPv4
    with pytest.raises(ValueError, match="at least one broker"):
        convert.spread_route_pb(_topic(1), "ns", [])


def _status(brokers: list[ns.BrokerInfo]) -> ns.ClusterStatusResponse:
    return ns.ClusterStatusResponse(ns.ClusterInfo("c", 1, 1, 3), [], brokers, [], 0, 0, 0)


class _Metadata:
    def __init__(self, brokers: list[ns.BrokerInfo]) -> None:
        self.brokers = brokers

    async def cluster_status(self) -> ns.ClusterStatusResponse:
        return _status(self.brokers)


def _broker(address: str, alive: bool = True) -> ns.BrokerInfo:
    return ns.BrokerInfo(f"peer-{address}", "c", address, alive, 0)


async def test_routes_list_the_live_brokers_and_a_draining_one_leaves_itself_out() -> None:
    metadata = _Metadata([_broker("h:1"), _broker("h:2"), _broker("h:3", alive=False)])
    brokers = ClusterBrokers(metadata, "", own_grpc_address="h:1", refresh_ms=0)  # type: ignore[arg-type]
    assert await brokers.grpc_addresses() == ["h:1", "h:2"]
    brokers.draining = True
    assert await brokers.grpc_addresses() == ["h:2"]
    metadata.brokers = [_broker("h:1")]
    assert await brokers.grpc_addresses() == ["h:1"]  # nobody else: still answer


def test_the_admin_finds_a_broker_by_id_or_client_address() -> None:
    status = _status([_broker("h:1")])
    assert broker_id_of(status, "h:1") == "peer-h:1"
    assert broker_id_of(status, "peer-h:1") == "peer-h:1"
    with pytest.raises(ValueError, match=r"no broker 'h:9' is registered; brokers: peer-h:1"):
        broker_id_of(status, "h:9")
