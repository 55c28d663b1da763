"""Draining the client endpoint: refuse new calls, let the calls in flight finish.

A broker being drained (``rip5 admin broker drain``) stops taking new calls
while its long polls and other calls in flight run to their end; then it
exits. :class:`DrainGate` counts the unary and server-streaming calls in
flight (Telemetry streams are not counted: they last as long as the client,
and end when the endpoint stops). Once :meth:`DrainGate.start` is called,
every new call is answered without reaching a processor:

- a unary or server-streaming method: one response of the method's type
  with the in-band status HA_NOT_AVAILABLE (``SHUTTING_DOWN``, retriable),
  which the official clients retry, on another queue (and so another broker)
  for sends;
- Telemetry: the stream ends with gRPC UNAVAILABLE.

Ordering: a call that entered before :meth:`start` runs to its end;
:meth:`wait_idle` returns once none is left (or at its deadline).

SHELL (asyncio).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf.message import Message

from broker.errors import BrokerError
from broker.grpc.status import status_of
from protocol import errors as codes

DRAINING_MESSAGE = "this broker is draining: send the call to another broker of the cluster"


class DrainGate:
    """Counts calls in flight and refuses new ones once draining (see the module)."""

    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self.refused = 0  # calls answered SHUTTING_DOWN since the drain started
        self._idle = asyncio.Event()
        self._idle.set()

    def start(self) -> None:
        """Refuse every call from now on; the calls in flight go on."""
        self.draining = True

    def enter(self) -> bool:
        """A call arrives: False if it must be refused (draining), else it is counted
        until :meth:`leave`."""
        if self.draining:
            self.refused += 1
            return False
        self.in_flight += 1
        self._idle.clear()
        return True

    def leave(self) -> None:
        """A counted call has ended."""
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no counted call is in flight; False if ``timeout_s`` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True


def refusal() -> BrokerError:
    """The error a call gets from a draining broker (retriable, refresh the route)."""
    return BrokerError(codes.SHUTTING_DOWN, DRAINING_MESSAGE)


def gated(
    handler: grpc.RpcMethodHandler, gate: DrainGate, response_class: type[Message]
) -> grpc.RpcMethodHandler:
    """``handler`` behind ``gate``: counted while it runs, refused while draining."""
    decode, serialize = handler.request_deserializer, handler.response_serializer
    if handler.unary_unary is not None:
        unary = handler.unary_unary

        async def unary_call(request: Any, context: Any) -> Any:
            if not gate.enter():
                return response_class(status=status_of(refusal()))
            try:
                return await unary(request, context)
            finally:
                gate.leave()

        return grpc.unary_unary_rpc_method_handler(unary_call, decode, serialize)
    if handler.unary_stream is not None:
        streamed = handler.unary_stream

        async def unary_stream_call(request: Any, context: Any) -> AsyncIterator[Any]:
            if not gate.enter():
                yield response_class(status=status_of(refusal()))
                return
            try:
                async for response in streamed(request, context):
                    yield response
            finally:
                gate.leave()

        return grpc.unary_stream_rpc_method_handler(unary_stream_call, decode, serialize)
    assert handler.stream_stream is not None
    both = handler.stream_stream

    async def stream_stream_call(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        if gate.draining:
            gate.refused += 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, DRAINING_MESSAGE)
        async for response in both(requests, context):
            yield response

    return grpc.stream_stream_rpc_method_handler(stream_stream_call, decode, serialize)
