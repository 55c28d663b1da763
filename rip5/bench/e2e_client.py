"""``rip5 bench e2e``'s client side: its connections to the broker, the calls every
phase makes through either gRPC client, and how a phase's figures are kept.

SHELL (network).
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc

from loadtest.client import CLIENT_ID_HEADER, CallFailed, endpoints_of
from loadtest.grpc_lean import LeanChannel
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from rip5.bench import acl

Metadata = Sequence[tuple[str, str]]


def failure_name(error: Exception) -> str:
    if isinstance(error, CallFailed):
        return error.name
    if isinstance(error, grpc.aio.AioRpcError):
        return str(error.code().name)
    return type(error).__name__


def count_failure(error_names: dict[str, int], name: str) -> None:
    error_names[name] = error_names.get(name, 0) + 1


async def failed(error_names: dict[str, int], error: Exception) -> None:
    """Count a failed call by its name and back off a little before the next."""
    count_failure(error_names, failure_name(error))
    await asyncio.sleep(0.01)


_SERVICE = "/apache.rocketmq.v2.MessagingService/"


class LeanStub:
    """The MessagingService calls the generator makes, over a lean channel, with the
    signatures of grpc's generated stub."""

    def __init__(self, channel: LeanChannel) -> None:
        """Calls go over ``channel``."""
        self._channel = channel

    async def _unary(
        self, method: str, request: Any, timeout_s: float, metadata: Metadata
    ) -> bytes:
        """One unary call of ``request``, a message or its serialized bytes."""
        data = request if isinstance(request, bytes) else request.SerializeToString()
        return await self._channel.unary(
            _SERVICE + method, data, timeout_s=timeout_s, metadata=metadata
        )

    async def SendMessage(
        self,
        request: spb.SendMessageRequest | bytes,
        *,
        timeout: float,  # noqa: ASYNC109 - grpc's stub signature
        metadata: Metadata,
    ) -> spb.SendMessageResponse:
        """One SendMessage call (of a request, or of its serialized bytes)."""
        return spb.SendMessageResponse.FromString(
            await self._unary("SendMessage", request, timeout, metadata)
        )

    async def ReceiveMessage(
        self,
        request: spb.ReceiveMessageRequest,
        *,
        timeout: float,  # noqa: ASYNC109 - grpc's stub signature
        metadata: Metadata,
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """One ReceiveMessage call: its responses as they come."""
        parse = spb.ReceiveMessageResponse.FromString
        async for answer in self._channel.stream(
            _SERVICE + "ReceiveMessage",
            request.SerializeToString(),
            timeout_s=timeout,
            metadata=metadata,
        ):
            yield parse(answer)

    async def call_all(
        self,
        method: str,
        request: Any,
        parse: Callable[[bytes], Any],
        *,
        timeout: float,  # noqa: ASYNC109 - as the stub's calls
        metadata: Metadata,
    ) -> list[Any]:
        """One call of ``method`` (unary or server streaming): all its responses (each
        read by ``parse``), once it ended."""
        answers = await self._channel.call(
            _SERVICE + method, request.SerializeToString(), timeout_s=timeout, metadata=metadata
        )
        return [parse(answer) for answer in answers]

    async def AckMessage(
        self,
        request: spb.AckMessageRequest,
        *,
        timeout: float,  # noqa: ASYNC109 - grpc's stub signature
        metadata: Metadata,
    ) -> spb.AckMessageResponse:
        """One AckMessage call."""
        return spb.AckMessageResponse.FromString(
            await self._unary("AckMessage", request, timeout, metadata)
        )


async def unary_answer(
    stub: Any, method: str, request: Any, parse: Callable[[bytes], Any], metadata: Metadata
) -> Any:
    """The response of a unary call of ``method``, through either client."""
    if isinstance(stub, LeanStub):  # a unary call is a call of one answer
        (answer,) = await stub.call_all(method, request, parse, timeout=30, metadata=metadata)
        return answer
    return await getattr(stub, method)(request, timeout=30, metadata=metadata)


async def all_answers(
    stub: Any, method: str, request: Any, parse: Callable[[bytes], Any], metadata: Metadata
) -> list[Any]:
    """The responses of a server-streaming call, once it ended: in one piece from the
    lean client, gathered from grpc's stream otherwise."""
    if isinstance(stub, LeanStub):
        return await stub.call_all(method, request, parse, timeout=10, metadata=metadata)
    call = getattr(stub, method)
    return [response async for response in call(request, timeout=10, metadata=metadata)]


class Clients:
    """``channels`` connections to one broker, of the lean client or grpc.aio, as one
    client of ``topic`` and consumer group ``group``."""

    def __init__(
        self,
        endpoint: str,
        channels: int,
        topic: str,
        group: str,
        client: str = "lean",
        credentials: tuple[str, str] | None = None,
    ) -> None:
        """Open the channels (connected lazily) of ``client``: "lean" or "grpcio".
        ``credentials``: sign every call as this ACL user (see :meth:`sign`)."""
        self.endpoint = endpoint
        self.topic = topic
        self.group = group
        self.endpoints = endpoints_of(endpoint)
        self._client_id = (CLIENT_ID_HEADER, f"bench-e2e-{os.getpid()}-{uuid.uuid4()}")
        self.credentials = credentials
        self.metadata: tuple[tuple[str, str], ...] = ()
        self.sign()
        self._channels: list[Any]  # each with an async close()
        self.stubs: list[Any]
        if client == "lean":
            self._channels = [LeanChannel(endpoint) for _ in range(channels)]
            self.stubs = [LeanStub(c) for c in self._channels]
        else:
            self._channels = [
                grpc.aio.insecure_channel(
                    endpoint,
                    options=[
                        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                        ("grpc.use_local_subchannel_pool", 1),  # one connection per channel
                    ],
                )
                for _ in range(channels)
            ]
            self.stubs = [service_pb2_grpc.MessagingServiceStub(c) for c in self._channels]
        self.born_host = socket.gethostname()

    def sign(self) -> None:
        """The headers of the calls from now on: the client id and, with credentials, a
        signature of the current time (done per run: a broker accepts a signature for
        its skew bound, 15 minutes by default)."""
        self.metadata = (self._client_id, *acl.headers(self.credentials))

    async def close(self) -> None:
        """Close every channel."""
        for channel in self._channels:
            await channel.close()
