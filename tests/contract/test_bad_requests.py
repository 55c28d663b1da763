"""Random and mutated bytes to every MessagingService method, over a real socket, on both
gRPC servers: each call gets an answer naming the cause (never UNKNOWN or INTERNAL),
the undecodable ones are counted and logged rarely without a traceback, and the broker
serves on.

Hypothesis draws the inputs with a fixed budget (``FUZZ_EXAMPLES`` per server,
derandomized so every run tries the same inputs); a longer run is
``RIP5_FUZZ_EXAMPLES=100000 pytest tests/contract/test_bad_requests.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf.message import DecodeError, Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.domain import QueueInfo, TopicInfo
from broker.grpc.bad_requests import LOG_INTERVAL_S, SERVICE
from broker.grpc.server import SERVERS, GrpcEndpoint, Ports, build_service
from broker.services.clock import SystemClock
from broker.services.memory import MemoryCoordination, MemoryMetadata, MemoryStore
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.vocabulary import MessageType
from tests.waiting import async_wait_until

FUZZ_EXAMPLES = int(os.environ.get("RIP5_FUZZ_EXAMPLES", "150"))
METHODS = spb.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name
CLIENT = (("x-mq-client-id", "fuzz-client"),)
TOPIC = pb.Resource(name="normal")

# One valid request per method to mutate (the others start from their empty request).
SEEDS: dict[str, Message] = {
    "QueryRoute": spb.QueryRouteRequest(topic=TOPIC),
    "Heartbeat": spb.HeartbeatRequest(client_type=pb.PRODUCER),
    "SendMessage": spb.SendMessageRequest(
        messages=[
            pb.Message(
                topic=TOPIC,
                body=b"fuzz",
                system_properties=pb.SystemProperties(
                    message_id="0100000000000000000000000000000001",
                    message_type=pb.NORMAL,
                    body_encoding=pb.IDENTITY,
                    tag="t",
                ),
            )
        ]
    ),
    "ReceiveMessage": spb.ReceiveMessageRequest(
        group=pb.Resource(name="g"),
        message_queue=pb.MessageQueue(topic=TOPIC, id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=4,
    ),
    "AckMessage": spb.AckMessageRequest(
        group=pb.Resource(name="g"),
        topic=TOPIC,
        entries=[spb.AckMessageEntry(message_id="01", receipt_handle="not-a-handle")],
    ),
    "Telemetry": spb.TelemetryCommand(
        settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[TOPIC]))
    ),
}


def _seed(method: str) -> bytes:
    seed = SEEDS.get(method)
    if seed is None:
        seed = getattr(spb, METHODS[method].input_type.name)()
    return seed.SerializeToString()


@st.composite
def _mutated(draw: st.DrawFn, method: str) -> bytes:
    """The method's seed request with a few bytes replaced, inserted or cut, a bit flipped,
    the tail truncated, a slice duplicated in place, or the whole message repeated (each
    field then comes twice: repeated fields grow, the last scalar wins)."""
    data = bytearray(_seed(method))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        how = draw(
            st.sampled_from(["replace", "insert", "cut", "flip", "truncate", "duplicate", "repeat"])
        )
        if how == "insert" or (at == len(data) and how in ("replace", "flip")):
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif how == "replace":
            data[at] = draw(st.integers(0, 255))
        elif how == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "truncate":
            del data[at:]
        elif how == "duplicate":
            end = min(len(data), at + draw(st.integers(1, 32)))
            data[end:end] = bytes(data[at:end])
        elif how == "repeat":
            data += bytes(data)
        else:
            del data[at : at + draw(st.integers(1, 8))]
    return bytes(data)


CASES = st.sampled_from(sorted(METHODS)).flatmap(
    lambda method: st.tuples(st.just(method), st.one_of(st.binary(max_size=256), _mutated(method)))
)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _decodes(method: str, data: bytes) -> bool:
    try:
        getattr(spb, METHODS[method].input_type.name).FromString(data)
    except DecodeError:
        return False
    return True


@pytest.fixture(scope="module", params=SERVERS)
def server_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
async def endpoint(server_kind: str) -> AsyncIterator[GrpcEndpoint]:
    """A broker endpoint over the in-memory ports (topic ``normal``) on 127.0.0.1."""
    clock = SystemClock()
    metadata = MemoryMetadata(
        [TopicInfo("normal", (QueueInfo(0), QueueInfo(1)), frozenset({MessageType.NORMAL}))]
    )
    service = build_service(
        Ports(metadata, MemoryStore(clock, metadata), clock, MemoryCoordination(clock)),
        receipt_secret=b"fuzz-secret",
        endpoint="127.0.0.1:0",
    )
    served = GrpcEndpoint(service, "127.0.0.1:0", server_kind)
    await served.start()
    try:
        yield served
    finally:
        await served.stop(0.5)


async def _call(channel: grpc.aio.Channel, method: str, data: bytes) -> tuple[Any, list[Any]]:
    """Send ``data`` as the request of ``method``: the gRPC code and the decoded answers."""
    path = f"/{SERVICE}/{method}"
    answer_class = getattr(spb, METHODS[method].output_type.name)
    info = METHODS[method]
    try:
        if info.client_streaming:
            call = channel.stream_stream(path)(metadata=CLIENT, timeout=10)
            await call.write(data)
            await call.done_writing()
            raw = [r async for r in call]
        elif info.server_streaming:
            raw = [r async for r in channel.unary_stream(path)(data, metadata=CLIENT, timeout=2)]
        else:
            raw = [await channel.unary_unary(path)(data, metadata=CLIENT, timeout=10)]
    except grpc.aio.AioRpcError as error:
        return error.code(), [error.details()]
    return grpc.StatusCode.OK, [answer_class.FromString(r) for r in raw]


async def test_bad_bytes_get_bad_request_naming_the_cause_and_the_broker_serves_on(
    endpoint: GrpcEndpoint, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    started_s = time.monotonic()
    undecodable = 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{endpoint.port}") as channel:

        async def one(case: tuple[str, bytes]) -> None:
            nonlocal undecodable
            method, data = case
            code, answers = await _call(channel, method, data)
            request_type = METHODS[method].input_type.name
            if _decodes(method, data):
                # A request that decodes is the service's to judge: an in-band status
                # (or, for a long poll, messages), never a gRPC failure.
                assert code is grpc.StatusCode.OK, (method, data, answers)
                return
            undecodable += 1
            cause = f"the request is not a valid {request_type}"
            if METHODS[method].client_streaming:
                assert code is grpc.StatusCode.INVALID_ARGUMENT, (method, answers)
                assert cause in answers[0]
            else:
                assert code is grpc.StatusCode.OK, (method, answers)
                (answer,) = answers
                assert answer.status.code == pb.BAD_REQUEST, answer
                assert cause in answer.status.message

        loop = asyncio.get_running_loop()

        # Hypothesis runs sync functions: it drives the cases from a thread, each one a
        # coroutine on this loop (where the server and the channel live).
        @settings(
            max_examples=FUZZ_EXAMPLES,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(case=CASES)
        def each(case: tuple[str, bytes]) -> None:
            asyncio.run_coroutine_threadsafe(one(case), loop).result(timeout=60)

        await one(("QueryRoute", b"\xff"))  # the connection is up: count from here
        fds_before = _open_fds()
        tasks_before = len(asyncio.all_tasks())
        await asyncio.to_thread(each)
        # The broker serves on.
        route = spb.QueryRouteResponse.FromString(
            await channel.unary_unary(f"/{SERVICE}/QueryRoute")(
                spb.QueryRouteRequest(topic=TOPIC).SerializeToString(), metadata=CLIENT, timeout=10
            )
        )
        assert route.status.code == pb.OK
        # Nothing leaked: the calls' tasks ended, no descriptor per call stayed open
        # (a few may come and go with grpc's own machinery).
        await async_wait_until(
            lambda: len(asyncio.all_tasks()) <= tasks_before, what="the calls' tasks to end"
        )
        assert _open_fds() <= fds_before + 8, (fds_before, _open_fds())
    assert undecodable > FUZZ_EXAMPLES // 4  # the budget reached the decoders' refusals
    assert endpoint.bad_requests.total == undecodable
    # Logged rarely and without a traceback; nothing else logged a traceback either.
    # py4j's records are not this process's broker: the suite's one Spark session lives
    # on in the worker that ran the Spark files, and its gateway logs (with a traceback)
    # each connection to the JVM it replaces, whenever that happens.
    records = [r for r in caplog.records if f"{os.sep}py4j{os.sep}" not in r.pathname]
    warnings = [r for r in records if r.name == "broker.grpc.bad_requests"]
    reports_max = 1 + int((time.monotonic() - started_s) / LOG_INTERVAL_S)
    assert 1 <= len(warnings) <= reports_max, [r.getMessage() for r in warnings]
    assert not [r for r in records if r.exc_info], [r.getMessage() for r in records if r.exc_info]
