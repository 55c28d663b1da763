"""A small synchronous RocketMQ gRPC v2 client for load tests (our generated stubs).

It speaks only what a producer and a simple consumer need: QueryRoute,
SendMessage (one message or a batch; NORMAL or FIFO), ReceiveMessage and
AckMessage. Every call carries the ``x-mq-client-id`` header the broker
requires; no Telemetry stream is opened (SendMessage and ReceiveMessage do
not need one). Calls are blocking: under Locust, grpc must have been put
on gevent first (:func:`loadtest.locustfile` does it at import).

A call that does not succeed raises :class:`CallFailed` whose text is a
short name: the gRPC status code name (``UNAVAILABLE``) for a transport
failure, the RocketMQ v2 ``Code`` name (``TOPIC_NOT_FOUND``) for an in-band
status. Locust groups failures by that name.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.descriptor import FieldDescriptor

from protocol.protowire import LENGTH_DELIMITED, VARINT, field_key, varint
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc

CLIENT_ID_HEADER = "x-mq-client-id"
OK_CODES = frozenset({pb.OK, pb.MULTIPLE_RESULTS})


class CallFailed(Exception):
    """A call that did not succeed; ``str()`` is a short name for grouping failures."""

    def __init__(self, name: str, detail: str = "") -> None:
        """``name``: the status code name; ``detail``: the server's message, if any."""
        super().__init__(name)
        self.name = name
        self.detail = detail

    def __repr__(self) -> str:
        """The short name only (Locust keys its failure table on the repr)."""
        return f"CallFailed({self.name})"


def _code_name(code: int) -> str:
    try:
        return pb.Code.Name(code)
    except ValueError:
        return f"CODE_{code}"


def check_status(status: pb.Status) -> None:
    """Raise :class:`CallFailed` unless ``status`` is OK."""
    if status.code not in OK_CODES:
        raise CallFailed(_code_name(status.code), status.message)


@dataclass(frozen=True)
class Received:
    """One received message: what an ack needs."""

    message_id: str
    receipt_handle: str
    body_bytes: int


def _timestamp_now() -> timestamp_pb2.Timestamp:
    now_ns = time.time_ns()
    return timestamp_pb2.Timestamp(seconds=now_ns // 1_000_000_000, nanos=now_ns % 1_000_000_000)


def _duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def build_message(
    topic: str,
    body: bytes,
    born_host: str,
    *,
    message_group: str | None = None,
    tag: str | None = None,
    keys: Sequence[str] = (),
) -> pb.Message:
    """A message as the official clients build it (FIFO when ``message_group`` is set):
    a fresh message id, the body's CRC32 digest, the born timestamp and host."""
    system = pb.SystemProperties(
        message_id=uuid.uuid4().hex.upper(),
        body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(body):08X}"),
        body_encoding=pb.IDENTITY,
        message_type=pb.FIFO if message_group else pb.NORMAL,
        born_timestamp=_timestamp_now(),
        born_host=born_host,
        keys=list(keys),
    )
    if tag:
        system.tag = tag
    if message_group:
        system.message_group = message_group
    return pb.Message(topic=pb.Resource(name=topic), system_properties=system, body=body)


_ID_PREFIX = os.urandom(8).hex().upper()
_ID_COUNTER = itertools.count()


def next_message_id() -> str:
    """A message id unique to this process run: 32 hex digits like a UUID's, a random
    per-process prefix and a counter (cheaper than ``uuid4`` in a hot send loop)."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):016X}"


class SendRequests:
    """SendMessageRequests of the same messages, serialized, each with fresh ids and born time.

    A load generator sends the same bodies again and again. Every request
    :meth:`next` gives is a new send of every message (a fresh message id
    each, the broker deduplicates by id; the born time of the call), the
    rest of each message as it was given. The request is joined from bytes
    serialized once (each message without its id and born time) and the new
    fields, at a fraction of the cost of renewing protobuf objects and
    serializing them again. Fields come in another order than protobuf's own
    serializer writes them, which parsers accept.
    """

    def __init__(self, messages: Sequence[pb.Message]) -> None:
        """Requests of ``messages`` (their ids and born times are replaced in each)."""
        # Each message, and its system properties, serialized without the id and born time.
        self._message_rests: list[bytes] = []
        self._system_rests: list[bytes] = []
        for message in messages:
            rest = pb.Message()
            rest.CopyFrom(message)
            system = rest.system_properties
            system.ClearField("message_id")
            system.ClearField("born_timestamp")
            self._system_rests.append(system.SerializeToString())
            rest.ClearField("system_properties")
            self._message_rests.append(rest.SerializeToString())
        # Per length of the born time field: each message's bytes before its id.
        self._heads: dict[int, list[bytes]] = {}

    def _heads_for(self, born_bytes: int) -> list[bytes]:
        heads = []
        for message_rest, system_rest in zip(self._message_rests, self._system_rests, strict=True):
            system_bytes = len(_ID_HEAD) + _ID_BYTES + born_bytes + len(system_rest)
            system_head = _SYSTEM_KEY + varint(system_bytes) + _ID_HEAD
            message_bytes = len(message_rest) + len(system_head) + system_bytes - len(_ID_HEAD)
            heads.append(_MESSAGES_KEY + varint(message_bytes) + message_rest + system_head)
        self._heads[born_bytes] = heads
        return heads

    def next(self) -> bytes:
        """A request of every message, with fresh message ids and the born time of now."""
        seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
        stamp = _SECONDS_KEY + varint(seconds) + (_NANOS_KEY + varint(nanos) if nanos else b"")
        born = _BORN_KEY + varint(len(stamp)) + stamp
        heads = self._heads.get(len(born)) or self._heads_for(len(born))
        parts: list[bytes] = []
        numbers = itertools.islice(_ID_COUNTER, len(heads))
        for head, system_rest, number in zip(heads, self._system_rests, numbers, strict=True):
            parts += (head, b"%s%016X" % (_ID_PREFIX_BYTES, number), born, system_rest)
        return b"".join(parts)


def _key(message: type, field: str) -> bytes:
    """The key of a varint or length-delimited ``field`` of ``message``."""
    descriptor = message.DESCRIPTOR.fields_by_name[field]  # type: ignore[attr-defined]
    delimited = descriptor.type in _DELIMITED_TYPES
    return field_key(descriptor.number, LENGTH_DELIMITED if delimited else VARINT)


_DELIMITED_TYPES = frozenset({FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING})
_MESSAGES_KEY = _key(spb.SendMessageRequest, "messages")
_SYSTEM_KEY = _key(pb.Message, "system_properties")
_ID_BYTES = len(_ID_PREFIX) + 16  # next_message_id()'s
_ID_HEAD = _key(pb.SystemProperties, "message_id") + varint(_ID_BYTES)
_ID_PREFIX_BYTES = _ID_PREFIX.encode()
_BORN_KEY = _key(pb.SystemProperties, "born_timestamp")
_SECONDS_KEY = _key(timestamp_pb2.Timestamp, "seconds")
_NANOS_KEY = _key(timestamp_pb2.Timestamp, "nanos")


def endpoints_of(address: str) -> pb.Endpoints:
    """``host:port`` as v2 Endpoints."""
    host, _, port = address.rpartition(":")
    return pb.Endpoints(
        scheme=pb.IPv4, addresses=[pb.Address(host=host or "127.0.0.1", port=int(port))]
    )


def receive_request(
    group: str,
    topic: str,
    endpoints: pb.Endpoints,
    *,
    batch_size: int,
    invisible_ms: int,
    long_polling_ms: int,
) -> spb.ReceiveMessageRequest:
    """A simple consumer's receive: any tag, the whole topic (queue -1), no auto-renew."""
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(
            topic=pb.Resource(name=topic),
            id=-1,
            permission=pb.READ_WRITE,
            broker=pb.Broker(name="rip5", endpoints=endpoints),
        ),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=batch_size,
        invisible_duration=_duration(invisible_ms),
        auto_renew=False,
        long_polling_timeout=_duration(long_polling_ms),
    )


def received_of(response: spb.ReceiveMessageResponse) -> Received | None:
    """The message a receive response carries; None for the status and timestamp parts.

    Raises :class:`CallFailed` for a status other than OK or MESSAGE_NOT_FOUND."""
    which = response.WhichOneof("content")
    if which == "status":
        if response.status.code != pb.MESSAGE_NOT_FOUND:
            check_status(response.status)
        return None
    if which == "message":
        message = response.message
        return Received(
            message.system_properties.message_id,
            message.system_properties.receipt_handle,
            len(message.body),
        )
    return None


def ack_request(group: str, topic: str, messages: Sequence[Received]) -> spb.AckMessageRequest:
    """One ack for ``messages``."""
    request = spb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic))
    add = request.entries.add  # built inside the request, not as messages of their own
    for m in messages:
        add(message_id=m.message_id, receipt_handle=m.receipt_handle)
    return request


def check_send(response: spb.SendMessageResponse, sent: int) -> None:
    """Raise :class:`CallFailed` unless every one of ``sent`` messages was stored."""
    check_status(response.status)
    entries = response.entries
    if not OK_CODES.issuperset([entry.status.code for entry in entries]):
        for entry in entries:
            check_status(entry.status)  # raises for the first failed entry
    if len(entries) != sent:
        raise CallFailed("ENTRY_COUNT_MISMATCH", f"{len(entries)} entries")


def check_ack(response: spb.AckMessageResponse) -> None:
    """Raise :class:`CallFailed` unless every entry was acknowledged."""
    check_status(response.status)
    for entry in response.entries:
        check_status(entry.status)


class RocketClient:
    """One channel to a broker endpoint (host:port) and the calls a load test makes."""

    def __init__(
        self,
        endpoint: str,
        *,
        client_id: str = "",
        timeout_s: float = 10.0,
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """Open the channel (lazily connected by grpc); ``metadata``: more headers on
        every call (an ACL signature)."""
        self.endpoint = endpoint
        self.client_id = (
            client_id or f"loadtest-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4()}"
        )
        self.timeout_s = timeout_s
        self._metadata = ((CLIENT_ID_HEADER, self.client_id), *metadata)
        self._channel = grpc.insecure_channel(
            endpoint, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        )
        self._stub = service_pb2_grpc.MessagingServiceStub(self._channel)
        self._endpoints = endpoints_of(endpoint)
        self._born_host = socket.gethostname()

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def _rpc_error(self, error: grpc.RpcError) -> CallFailed:
        code = error.code() if hasattr(error, "code") else None
        name = code.name if code is not None else "RPC_ERROR"
        details = error.details() if hasattr(error, "details") else ""
        return CallFailed(name, details or "")

    # -- routing ----------------------------------------------------------------

    def query_route(self, topic: str) -> int:
        """The number of queues of ``topic``."""
        request = spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=self._endpoints)
        try:
            response = self._stub.QueryRoute(
                request, timeout=self.timeout_s, metadata=self._metadata
            )
        except grpc.RpcError as error:
            raise self._rpc_error(error) from None
        check_status(response.status)
        return len(response.message_queues)

    # -- producing ----------------------------------------------------------------

    def message(
        self,
        topic: str,
        body: bytes,
        *,
        message_group: str | None = None,
        tag: str | None = None,
        keys: Sequence[str] = (),
    ) -> pb.Message:
        """A message as the official clients build it (see :func:`build_message`)."""
        return build_message(
            topic, body, self._born_host, message_group=message_group, tag=tag, keys=keys
        )

    def send(self, messages: Sequence[pb.Message]) -> int:
        """Send one request carrying ``messages``; the bytes sent. Raises on any failed entry."""
        request = spb.SendMessageRequest(messages=list(messages))
        try:
            response = self._stub.SendMessage(
                request, timeout=self.timeout_s, metadata=self._metadata
            )
        except grpc.RpcError as error:
            raise self._rpc_error(error) from None
        check_send(response, len(messages))
        return sum(len(m.body) for m in messages)

    # -- consuming ----------------------------------------------------------------

    def receive(
        self,
        group: str,
        topic: str,
        *,
        batch_size: int = 32,
        invisible_ms: int = 30_000,
        long_polling_ms: int = 5_000,
    ) -> list[Received]:
        """Up to ``batch_size`` messages (empty after a long poll that found none)."""
        request = receive_request(
            group,
            topic,
            self._endpoints,
            batch_size=batch_size,
            invisible_ms=invisible_ms,
            long_polling_ms=long_polling_ms,
        )
        received: list[Received] = []
        try:
            for response in self._stub.ReceiveMessage(
                request,
                timeout=long_polling_ms / 1000 + self.timeout_s,
                metadata=self._metadata,
            ):
                message = received_of(response)
                if message is not None:
                    received.append(message)
        except grpc.RpcError as error:
            raise self._rpc_error(error) from None
        return received

    def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        batch_size: int = 32,
        long_polling_ms: int = 1_000,
    ) -> tuple[list[str], int]:
        """A pull consumer's read of one queue from ``offset`` (PullMessage: an offset
        read, no pop): the message ids read and the next offset."""
        request = spb.PullMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(
                topic=pb.Resource(name=topic),
                id=queue_id,
                permission=pb.READ_WRITE,
                broker=pb.Broker(name="rip5", endpoints=self._endpoints),
            ),
            offset=offset,
            batch_size=batch_size,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            long_polling_timeout=_duration(long_polling_ms),
        )
        ids: list[str] = []
        next_offset = offset
        try:
            for response in self._stub.PullMessage(
                request,
                timeout=long_polling_ms / 1000 + self.timeout_s,
                metadata=self._metadata,
            ):
                which = response.WhichOneof("content")
                if which == "status":
                    if response.status.code != pb.MESSAGE_NOT_FOUND:
                        check_status(response.status)
                elif which == "message":
                    ids.append(response.message.system_properties.message_id)
                elif which == "next_offset":
                    next_offset = response.next_offset
        except grpc.RpcError as error:
            raise self._rpc_error(error) from None
        return ids, next_offset

    def ack(self, group: str, topic: str, messages: Sequence[Received]) -> None:
        """Acknowledge ``messages`` in one call; raises if any entry failed."""
        request = ack_request(group, topic, messages)
        try:
            response = self._stub.AckMessage(
                request, timeout=self.timeout_s, metadata=self._metadata
            )
        except grpc.RpcError as error:
            raise self._rpc_error(error) from None
        check_ack(response)
