"""A minimal RocketMQ v2 client over gRPC: what the Spark writer sends with.

The writer and the streaming reader are clients of the cluster (DESIGN.md
section 8): they speak the brokers' public protocol, ``QueryRoute``,
``SendMessage`` (here) and the offset calls (``spark_batch.consumer``),
nothing internal. :class:`TopicClient` holds the channels and the failover
both share; one :class:`TopicProducer` per writer task.

Retries: a call that fails with a transient gRPC or v2 status is sent again,
the same messages with the same ids, to the next endpoint; the storage's
dedup window answers a message stored already with its first outcome, so a
retry never stores twice (as long as the retry reaches the same queue: the
caller names the queue, see ``spark_batch.writer``).

SHELL (network).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import grpc

from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc as rpc
from spark_batch.source import ReadOptionError, option_value

CLIENT_ID_HEADER = "x-mq-client-id"
CALL_TIMEOUT_S = 30.0
SEND_ATTEMPTS = 6
RETRY_BACKOFF_S = 0.2
WRITABLE = (pb.WRITE, pb.READ_WRITE)
READABLE = (pb.READ, pb.READ_WRITE)
TRANSIENT_GRPC = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
)
TRANSIENT_CODES = (
    pb.TOO_MANY_REQUESTS,
    pb.REQUEST_TIMEOUT,
    pb.INTERNAL_ERROR,
    pb.INTERNAL_SERVER_ERROR,
    pb.HA_NOT_AVAILABLE,
    pb.PROXY_TIMEOUT,
    pb.MASTER_PERSISTENCE_TIMEOUT,
    pb.SLAVE_PERSISTENCE_TIMEOUT,
)


T = TypeVar("T")


class BrokerCallFailed(RuntimeError):
    """The brokers refused a call, or stayed unreachable through every retry."""


class SendFailed(BrokerCallFailed):
    """The brokers refused a send (or stayed unreachable through every retry)."""


def parse_endpoints(text: str) -> list[str]:
    """``host:port[,host:port...]`` as a list; ValueError naming a malformed one."""
    endpoints = [part.strip() for part in text.split(",") if part.strip()]
    for endpoint in endpoints:
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"endpoint {endpoint!r} is not host:port")
    if not endpoints:
        raise ValueError("give at least one broker endpoint host:port")
    return endpoints


def broker_target(options: Mapping[str, str], doing: str) -> tuple[list[str], str]:
    """The ``endpoints`` and ``topic`` options of a write or a stream (``doing`` names
    which); ReadOptionError when one is missing or malformed."""
    endpoints = option_value(options, "endpoints")
    topic = option_value(options, "topic")
    if not endpoints or not topic:
        raise ReadOptionError(f'{doing} needs option("endpoints", ...) and option("topic", ...)')
    try:
        return parse_endpoints(endpoints), topic
    except ValueError as exc:
        raise ReadOptionError(f"option endpoints: {exc}") from exc


class TopicClient:
    """Channels to the brokers at ``endpoints`` (any of them serves one topic's calls)."""

    def __init__(self, endpoints: Sequence[str], topic: str, client_id: str) -> None:
        """Channels are opened lazily, one per endpoint used."""
        self.endpoints = list(endpoints)
        self.topic = topic
        self.metadata = ((CLIENT_ID_HEADER, client_id),)
        self._current = 0
        self._channels: dict[str, grpc.Channel] = {}

    def _stub(self) -> rpc.MessagingServiceStub:
        endpoint = self.endpoints[self._current % len(self.endpoints)]
        channel = self._channels.get(endpoint)
        if channel is None:
            channel = self._channels[endpoint] = grpc.insecure_channel(endpoint)
        return rpc.MessagingServiceStub(channel)

    def close(self) -> None:
        """Close the channels."""
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def writable_queue_ids(self) -> list[int]:
        """The ids of the topic's writable queues, sorted (QueryRoute)."""
        return self._route_queue_ids(WRITABLE)

    def readable_queue_ids(self) -> list[int]:
        """The ids of the topic's readable queues, sorted (QueryRoute)."""
        return self._route_queue_ids(READABLE)

    def _route_queue_ids(self, permissions: tuple[int, ...]) -> list[int]:
        request = spb.QueryRouteRequest(topic=pb.Resource(name=self.topic))
        response = self._call(lambda stub: stub.QueryRoute(request, **self._options()))
        if response.status.code != pb.OK:
            raise BrokerCallFailed(
                f"route of topic {self.topic!r}: {pb.Code.Name(response.status.code)}: "
                f"{response.status.message}"
            )
        return sorted({q.id for q in response.message_queues if q.permission in permissions})

    def _options(self) -> dict[str, object]:
        return {"metadata": self.metadata, "timeout": CALL_TIMEOUT_S}

    def _call(self, method: Callable[[rpc.MessagingServiceStub], T]) -> T:
        """``method(stub)``, on the next endpoint after a transient gRPC failure."""
        for attempt in range(SEND_ATTEMPTS):
            try:
                return method(self._stub())
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                if code not in TRANSIENT_GRPC or attempt == SEND_ATTEMPTS - 1:
                    raise BrokerCallFailed(f"broker call failed: {code}: {exc}") from exc
                self._current += 1
                time.sleep(RETRY_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")


class TopicProducer(TopicClient):
    """Sends messages of one topic to the brokers at ``endpoints`` (any of them)."""

    def send(self, messages: Sequence[pb.Message]) -> list[spb.SendResultEntry]:
        """Store ``messages`` (one request); one entry per message. Transient failures
        are retried with the same messages; a refusal raises :class:`SendFailed`."""
        request = spb.SendMessageRequest(messages=messages)
        for attempt in range(SEND_ATTEMPTS):
            response = self._call(lambda stub: stub.SendMessage(request, **self._options()))
            code = response.status.code
            if code == pb.OK and all(e.status.code == pb.OK for e in response.entries):
                return list(response.entries)
            if code not in TRANSIENT_CODES or attempt == SEND_ATTEMPTS - 1:
                raise SendFailed(
                    f"send to topic {self.topic!r}: {pb.Code.Name(code)}: {response.status.message}"
                )
            self._current += 1
            time.sleep(RETRY_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")  # the last attempt returned or raised
