"""ACL 2.0 on the gRPC endpoint: every call authenticated and checked against the policies.

With ``--acl`` on, the broker's MessagingService handlers are registered
through :func:`guarded`. Before a handler runs, :func:`check_call` has the
guard (``broker/acl.py``) authenticate the caller by its ``authorization``
header and check the call's demand (``broker/grpc/acl_demands.py``), with the
caller's address as the source. A missing or malformed header, an unknown
user, a wrong signature or a stale date is refused with the v2 status
UNAUTHORIZED naming the cause; a demand no policy allows with FORBIDDEN naming
the user, the action and the resource.

A refused unary or server-streaming call gets one response of its type
carrying the status (gRPC OK, as every v2 answer; a SendMessage answer has one
entry per message); a refused Telemetry stream gets one command with the
status and ends. Errors become statuses in ``status.py`` only.

SHELL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
from google.protobuf.message import Message

from broker.acl import AclGuard, as_broker_error, host_of
from broker.errors import BrokerError
from broker.grpc.acl_demands import demand_of
from broker.grpc.screening import screened
from broker.grpc.status import status_of
from protocol.acl import Forbidden, Unauthenticated
from protocol.rocketmq.v2 import service_pb2 as spb

_METHODS = spb.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name


def source_ip_of(context: Any) -> str:
    """The caller's IP address ("" if unknown): grpc.aio's ``peer()`` is
    ``ipv4:1.2.3.4:5678`` or ``ipv6:[::1]:5678``, the broker's own server gives
    ``host:port``."""
    peer = getattr(context, "peer", None)
    text = str(peer()) if callable(peer) else ""
    for prefix in ("ipv4:", "ipv6:"):
        text = text.removeprefix(prefix)
    return host_of(text.replace("%5B", "[").replace("%5D", "]"))


def check_call(guard: AclGuard, method: str, request: Any, context: Any) -> None:
    """Raise the BrokerError (UNAUTHENTICATED, PERMISSION_DENIED; UNAVAILABLE before the
    tables are read) refusing this gRPC call, or return to let it through."""
    try:
        user, tables = guard.authenticate(context.invocation_metadata() or ())
        guard.authorize(user, tables, demand_of(method, request), source_ip_of(context))
    except (Unauthenticated, Forbidden) as error:
        raise as_broker_error(error) from None


def guarded(name: str, handler: grpc.RpcMethodHandler, guard: AclGuard) -> grpc.RpcMethodHandler:
    """``handler`` of method ``name``, run only for calls ``guard`` lets through; a
    refused call is answered with its status (see the module docstring)."""
    method = _METHODS[name]
    response_class: type[Message] = getattr(spb, method.output_type.name)
    decode = handler.request_deserializer
    serialize = handler.response_serializer

    def refused(request: Any, context: Any) -> Message | None:
        try:
            check_call(guard, name, request, context)
        except BrokerError as error:
            status = status_of(error)
            if name == "SendMessage":
                entries = [
                    spb.SendResultEntry(status=status, message_id=m.system_properties.message_id)
                    for m in request.messages
                ]
                return spb.SendMessageResponse(status=status, entries=entries)
            return response_class(status=status)
        return None

    single = screened(handler, refused)
    if single is not None:
        return single
    assert handler.stream_stream is not None, f"{name}: no client-streaming unary methods"
    both = handler.stream_stream

    async def stream_stream_call(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        try:
            check_call(guard, name, None, context)
        except BrokerError as error:
            yield spb.TelemetryCommand(status=status_of(error))
            return
        async for response in both(requests, context):
            yield response

    return grpc.stream_stream_rpc_method_handler(stream_stream_call, decode, serialize)


def guarded_handlers(
    handlers: Mapping[str, grpc.RpcMethodHandler], guard: AclGuard | None
) -> dict[str, grpc.RpcMethodHandler]:
    """Every handler of ``handlers`` guarded (unchanged without a guard)."""
    if guard is None:
        return dict(handlers)
    return {name: guarded(name, handler, guard) for name, handler in handlers.items()}
