"""Requests that are not the message their method takes: answered, counted, logged rarely.

A client (or anyone who can reach the port) may send bytes that do not decode
as the method's request message. That is the client's error, not the
broker's: it gets a clear answer naming the cause, never UNKNOWN, and no
traceback is logged (else any client could flood the logs).

How: the MessagingService handlers are registered through
:class:`CheckedRegistration`, which gives every method a request decoder that
never raises (a message, or an :class:`UndecodableRequest` naming the type and
protobuf's reason) and a handler that answers an undecodable request itself:

- a unary or server-streaming method: one response of the method's type with
  the in-band v2 status BAD_REQUEST (gRPC status OK, as every v2 answer);
- Telemetry (client-streaming): the stream ends with gRPC INVALID_ARGUMENT
  naming the cause, after the commands that came before it were served.

Both servers (the broker's own and grpc.aio) take the same registration, so
both answer alike. Each undecodable request is counted by method
(:attr:`BadRequests.counts`); a warning is logged at most once per
``LOG_INTERVAL_S``, saying how many came since the last one and the latest
cause.

SHELL: reads the monotonic clock for the log interval.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from broker.grpc.acl_guard import AclGuard, guarded_handlers
from broker.grpc.drain import DrainGate, gated
from broker.grpc.screening import screened
from broker.grpc.status import bad_request
from broker.metrics import BrokerMetrics, timed
from protocol.rocketmq.v2 import service_pb2 as spb

log = logging.getLogger("broker.grpc.bad_requests")

LOG_INTERVAL_S = 10.0
"""At most one warning about undecodable requests per this many seconds."""

SERVICE = "apache.rocketmq.v2.MessagingService"
_METHODS = spb.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name


class UndecodableRequest:
    """What a method's decoder gives for bytes that are not its request message."""

    __slots__ = ("cause",)

    def __init__(self, cause: str) -> None:
        self.cause = cause


class BadRequests:
    """The undecodable requests seen, by method, and the rate-limited log of them."""

    def __init__(self, *, interval_s: float = LOG_INTERVAL_S) -> None:
        self.counts: Counter[str] = Counter()
        self._interval_s = interval_s
        self._logged_at_s: float | None = None
        self._unlogged = 0

    @property
    def total(self) -> int:
        """Undecodable requests seen on every method."""
        return sum(self.counts.values())

    def note(self, method: str, cause: str, now_s: float) -> None:
        """Count one undecodable request of ``method``; log a warning if the last one
        was ``interval_s`` ago or more (``now_s`` is a monotonic time)."""
        self.counts[method] += 1
        self._unlogged += 1
        if self._logged_at_s is not None and now_s - self._logged_at_s < self._interval_s:
            return
        log.warning(
            "undecodable requests answered BAD_REQUEST: %d since the last report (latest: %s: %s)",
            self._unlogged,
            method,
            cause,
        )
        self._logged_at_s = now_s
        self._unlogged = 0


class CheckedRegistration:
    """Stands for a gRPC server while generated code registers MessagingService: each
    method's handler passes to ``server`` with the checks of this module."""

    def __init__(
        self,
        server: Any,
        bad_requests: BadRequests,
        guard: AclGuard | None = None,
        metrics: BrokerMetrics | None = None,
        gate: DrainGate | None = None,
    ) -> None:
        """``guard``: ACL 2.0 checks each decoded request first (None: ACL off).
        ``metrics``: also time each call (``rocketmq_rpc_latency``, broker/metrics.py).
        ``gate``: each method also passes behind it (``broker.grpc.drain``)."""
        self._server = server
        self._bad_requests = bad_requests
        self._guard = guard
        self._metrics = metrics
        self._gate = gate

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        """Ignored: the same methods come by name (add_registered_method_handlers), and
        both servers look those up first."""

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        """Register ``handlers`` on the server, each wrapped by :func:`checked`."""
        if service != SERVICE:
            raise ValueError(f"only {SERVICE} is checked, not {service}")
        gate = self._gate
        checked_handlers = {
            name: checked(
                name,
                handler if gate is None else gated(handler, gate, _response_class(name)),
                self._bad_requests,
            )
            for name, handler in guarded_handlers(handlers, self._guard).items()
        }
        if self._metrics is not None:
            metrics = self._metrics
            checked_handlers = {
                name: timed(name, handler, metrics) for name, handler in checked_handlers.items()
            }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, checked_handlers),)
        )
        self._server.add_registered_method_handlers(service, checked_handlers)


def checked(
    name: str, handler: grpc.RpcMethodHandler, bad_requests: BadRequests
) -> grpc.RpcMethodHandler:
    """``handler`` of method ``name`` with a decoder that never raises and an answer for
    what it could not decode (see the module docstring)."""
    method = _METHODS[name]
    request_type = method.input_type.name
    response_class = _response_class(name)
    decode = _lenient(handler.request_deserializer, request_type)
    serialize = handler.response_serializer

    def refused(request: Any, context: Any) -> Message | None:
        if not isinstance(request, UndecodableRequest):
            return None
        bad_requests.note(name, request.cause, time.monotonic())
        return response_class(status=bad_request(request.cause))

    single = screened(handler, refused, decode)
    if single is not None:
        return single
    assert handler.stream_stream is not None, f"{name}: no client-streaming unary methods"
    both = handler.stream_stream

    async def stream_stream_call(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        found: list[UndecodableRequest] = []

        async def decoded() -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, UndecodableRequest):
                    found.append(request)
                    return  # the handler sees its stream end here
                yield request

        async for response in both(decoded(), context):
            yield response
        if found:
            bad_requests.note(name, found[0].cause, time.monotonic())
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, found[0].cause)

    return grpc.stream_stream_rpc_method_handler(stream_stream_call, decode, serialize)


def _response_class(name: str) -> type[Message]:
    """The response message class of MessagingService method ``name``."""
    response_class: type[Message] = getattr(spb, _METHODS[name].output_type.name)
    return response_class


def _lenient(
    deserializer: Callable[[bytes], Any] | None, request_type: str
) -> Callable[[bytes], Any]:
    """``deserializer`` that returns an :class:`UndecodableRequest` instead of raising."""
    assert deserializer is not None

    def decode(data: bytes) -> Any:
        try:
            return deserializer(data)
        except DecodeError as error:
            return UndecodableRequest(f"the request is not a valid {request_type}: {error}")

    return decode


__all__ = [
    "BadRequests",
    "CheckedRegistration",
    "UndecodableRequest",
    "checked",
]
