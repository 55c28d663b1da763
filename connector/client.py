"""The connector's gRPC v2 client of one cluster: the calls a replicator makes.

QueryRoute, PullMessage, UpdateOffset, GetOffset, QueryOffset and
SendMessage, against a cluster's brokers' client endpoints, over the lean
HTTP/2 client (:mod:`loadtest.grpc_lean`, one connection per endpoint): a
pull's stream of one response per message costs the connector a few
microseconds a message there, against tens on grpc.aio (its per-message
stream reads and its poller thread were half of the connector's CPU).
Brokers are stateless, so any one serves any call: a call that fails in
transport (UNAVAILABLE, DEADLINE_EXCEEDED) goes on to the next endpoint,
round robin, until one answers or every endpoint failed once; a lost
connection is opened again by the next call on it.

Failures raise :class:`ConnectorCallError`: ``name`` is the RocketMQ v2
``Code`` name of an in-band status, or the gRPC status name of a transport
failure; ``retriable`` says whether trying again later may succeed.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from loadtest.client import CallFailed
from loadtest.grpc_lean import LeanChannel
from protocol.rocketmq.pull import (
    BATCH_SIZE_MAX,
    REPLICATOR_BATCH_SIZE_MAX,
    REPLICATOR_HEADER,
    pull_request,
    read_pull,
)
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb

log = logging.getLogger("rip5.connector")
CLIENT_ID_HEADER = "x-mq-client-id"
CALL_TIMEOUT_S = 20.0
LONG_POLL_MS = 5_000
"""The long poll of a pull: the shortest a broker plans, so a rule's tasks notice a
stop or a reload within seconds."""
PULL_BATCH_MAX = REPLICATOR_BATCH_SIZE_MAX
"""What a pull asks for. The connector's calls say they are a replicator's
(``REPLICATOR_HEADER``): a broker answers its pulls with up to this many messages (and
no body digest, which a copy does not keep); one that does not know the header, with up
to RocketMQ's 32."""
PULL_FULL_OFFSETS = BATCH_SIZE_MAX
"""A pull that moved past at least this many offsets is taken as not at the queue's end
(the next one goes at once): every broker answers at least this many when it can."""
_SERVICE = "/apache.rocketmq.v2.MessagingService/"
_RESPONSES: dict[str, Any] = {
    "QueryRoute": spb.QueryRouteResponse,
    "PullMessage": spb.PullMessageResponse,
    "GetOffset": spb.GetOffsetResponse,
    "UpdateOffset": spb.UpdateOffsetResponse,
    "QueryOffset": spb.QueryOffsetResponse,
    "SendMessage": spb.SendMessageResponse,
}
"""The calls the connector makes and their response types (PullMessage streams)."""
_OK = frozenset({pb.OK, pb.MULTIPLE_RESULTS})
_TRANSPORT = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})
"""gRPC status names of a call that failed in transport: the next endpoint may answer."""
_RETRIABLE_CODES = frozenset(
    {
        pb.INTERNAL_SERVER_ERROR,
        pb.INTERNAL_ERROR,
        pb.PROXY_TIMEOUT,
        pb.MASTER_PERSISTENCE_TIMEOUT,
        pb.SLAVE_PERSISTENCE_TIMEOUT,
        pb.HA_NOT_AVAILABLE,
        pb.TOO_MANY_REQUESTS,
        pb.REQUEST_TIMEOUT,
    }
)


class ConnectorCallError(Exception):
    """A call to a cluster that did not succeed (see the module docstring)."""

    def __init__(self, name: str, detail: str, *, retriable: bool) -> None:
        """``name``: the status name; ``detail``: the server's message."""
        super().__init__(f"{name}: {detail}" if detail else name)
        self.name = name
        self.detail = detail
        self.retriable = retriable


def _code_name(code: int) -> str:
    try:
        return pb.Code.Name(code)
    except ValueError:
        return f"CODE_{code}"


def _check(status: pb.Status) -> None:
    if status.code not in _OK:
        raise ConnectorCallError(
            _code_name(status.code), status.message, retriable=status.code in _RETRIABLE_CODES
        )


def _queue(topic: str, queue_id: int) -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id)


@dataclass(frozen=True)
class Pulled:
    """A pull's answer: the messages (each with its ``queue_offset``) and where to go on."""

    messages: Sequence[pb.Message]
    next_offset: int
    status: str
    """``OK``, ``MESSAGE_NOT_FOUND`` (nothing matched before the poll's end) or
    ``ILLEGAL_OFFSET`` (``next_offset`` is then the nearest valid offset)."""
    detail: str = ""


class ClusterClient:
    """Channels to one cluster's brokers and the calls the connector makes."""

    def __init__(self, name: str, endpoints: Sequence[str]) -> None:
        """A channel (connected on its first call) to each of ``endpoints`` (host:port)."""
        self.name = name
        self.endpoints = tuple(endpoints)
        self._channels = [LeanChannel(endpoint) for endpoint in self.endpoints]
        self._next = 0
        client_id = f"connector-{socket.gethostname()}-{os.getpid()}-{name}"
        self._metadata = ((CLIENT_ID_HEADER, client_id), (REPLICATOR_HEADER, "connector"))

    async def close(self) -> None:
        """Close every channel."""
        for channel in self._channels:
            await channel.close()

    async def _call(self, method: str, request: Any, timeout_s: float = CALL_TIMEOUT_S) -> Any:
        """A call (PullMessage: the list of its stream's responses) on the current
        endpoint, going on to the next on a transport failure."""
        payload = request.SerializeToString()
        response_type = _RESPONSES[method]
        last: CallFailed | None = None
        for _ in self._channels:
            index = self._next % len(self._channels)
            try:
                answers = await self._channels[index].call(
                    _SERVICE + method, payload, timeout_s=timeout_s, metadata=self._metadata
                )
            except CallFailed as error:
                last = error
                if error.name not in _TRANSPORT:
                    break
                log.warning(
                    "broker unreachable, trying the next",
                    extra={
                        "cluster": self.name,
                        "endpoint": self.endpoints[index],
                        "call": method,
                        "error": error.name,
                    },
                )
                self._next = index + 1
                continue
            try:
                responses = [response_type.FromString(answer) for answer in answers]
            except DecodeError as exc:
                raise ConnectorCallError("INTERNAL", f"{method}: {exc}", retriable=True) from None
            if method == "PullMessage":
                return responses
            if len(responses) != 1:
                raise ConnectorCallError(
                    "INTERNAL", f"{method} answered {len(responses)} messages", retriable=True
                )
            return responses[0]
        assert last is not None
        raise ConnectorCallError(last.name, last.detail, retriable=last.name in _TRANSPORT)

    async def queues(self, topic: str, *, writable: bool = False) -> list[int]:
        """The queue ids of ``topic`` (readable ones, or writable ones), ascending."""
        answer = await self._call(
            "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name=topic))
        )
        _check(answer.status)
        wanted = (pb.WRITE, pb.READ_WRITE) if writable else (pb.READ, pb.READ_WRITE)
        return sorted({q.id for q in answer.message_queues if q.permission in wanted})

    async def message_types(self, topic: str) -> frozenset[int]:
        """The message types ``topic``'s queues accept (v2 ``MessageType`` numbers)."""
        answer = await self._call(
            "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name=topic))
        )
        _check(answer.status)
        return frozenset(t for q in answer.message_queues for t in q.accept_message_types)

    async def pull(
        self, group: str, topic: str, queue_id: int, offset: int, expression: str
    ) -> Pulled:
        """One PullMessage (long polling :data:`LONG_POLL_MS`)."""
        request = pull_request(
            group,
            topic,
            queue_id,
            offset,
            batch_size=PULL_BATCH_MAX,
            poll_ms=LONG_POLL_MS,
            expression=expression,
        )
        responses = await self._call("PullMessage", request, LONG_POLL_MS / 1000 + CALL_TIMEOUT_S)
        answer = read_pull(responses, offset)
        status = answer.status
        if status.code in (pb.ILLEGAL_OFFSET, pb.MESSAGE_NOT_FOUND):
            return Pulled([], answer.next_offset, _code_name(status.code), status.message)
        _check(status)
        return Pulled(answer.messages, answer.next_offset, "OK")

    async def committed(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset in the queue; None when it has none."""
        answer = await self._call(
            "GetOffset",
            spb.GetOffsetRequest(
                group=pb.Resource(name=group), message_queue=_queue(topic, queue_id)
            ),
        )
        if answer.status.code == pb.OFFSET_NOT_FOUND:
            return None
        _check(answer.status)
        return int(answer.offset)

    async def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit the group's position in the queue."""
        answer = await self._call(
            "UpdateOffset",
            spb.UpdateOffsetRequest(
                group=pb.Resource(name=group), message_queue=_queue(topic, queue_id), offset=offset
            ),
        )
        _check(answer.status)

    async def bound(self, topic: str, queue_id: int, *, end: bool) -> int:
        """The queue's end offset (the next message's), or its first offset."""
        return await self._query_offset(topic, queue_id, pb.END if end else pb.BEGINNING)

    async def offset_at(self, topic: str, queue_id: int, at_ms: int) -> int:
        """The first offset of the queue stored at or after ``at_ms`` (its end if none)."""
        return await self._query_offset(topic, queue_id, pb.TIMESTAMP, max(0, at_ms))

    async def _query_offset(
        self, topic: str, queue_id: int, policy: pb.QueryOffsetPolicy, at_ms: int = 0
    ) -> int:
        request = spb.QueryOffsetRequest(
            message_queue=_queue(topic, queue_id), query_offset_policy=policy
        )
        if policy == pb.TIMESTAMP:
            request.timestamp.FromMilliseconds(at_ms)
        answer = await self._call("QueryOffset", request)
        _check(answer.status)
        return int(answer.offset)

    async def send(self, request: spb.SendMessageRequest) -> list[int]:
        """Send ``request``'s messages (one topic); each one's stored offset.

        A message id the target stored recently is answered with its first outcome
        (the storage's dedup window), so a resend returns the first copy's offset."""
        answer = await self._call("SendMessage", request)
        _check(answer.status)
        for entry in answer.entries:
            _check(entry.status)
        if len(answer.entries) != len(request.messages):
            raise ConnectorCallError(
                "ENTRY_COUNT_MISMATCH", f"{len(answer.entries)} entries", retriable=True
            )
        return [int(entry.offset) for entry in answer.entries]
