"""ACL 2.0 on the gRPC endpoint: every call authenticated and checked against the policies.

With ``--acl`` on, the broker's MessagingService handlers are registered
through :func:`guarded`. Before a handler runs, the guard:

1. authenticates the caller: the ``authorization`` header names a user and
   signs ``x-mq-date-time`` with its secret (``protocol/acl_signature.py``);
   a missing or malformed header, an unknown user, a wrong signature or a
   date further than ``skew_ms`` from the broker's clock is refused with the
   v2 status UNAUTHORIZED naming the cause;
2. checks the call's demand (``broker/grpc/acl_demands.py``) against the
   user's policy (``protocol/acl.py``) with the caller's address as source:
   refused with FORBIDDEN naming the user, the action and the resource.

A refused unary or server-streaming call gets one response of its type
carrying the status (gRPC OK, as every v2 answer; a SendMessage answer has one
entry per message); a refused Telemetry stream gets one command with the
status and ends. Errors become statuses in ``status.py`` only.

The users and policies come from the nameserver (:class:`AclCache`): read
whole at start and every ``refresh_ms`` after. A failed refresh keeps the
last tables, so enforcement goes on while every nameserver is down; until
the first read succeeds, calls are answered with a retriable
HA_NOT_AVAILABLE.

SHELL: reads the wall clock (signature dates) and the nameserver.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import grpc
from google.protobuf.message import Message

from broker.errors import BrokerError
from broker.grpc.acl_demands import demand_of
from broker.grpc.screening import screened
from broker.grpc.status import status_of
from protocol import errors as codes
from protocol.acl import AclTables, Forbidden, Unauthenticated, User
from protocol.acl_signature import (
    AUTHORIZATION_HEADER,
    DATE_TIME_HEADER,
    SKEW_MS_DEFAULT,
    date_time_ms,
    parse_authorization,
    verify,
)
from protocol.rocketmq.v2 import service_pb2 as spb

log = logging.getLogger("broker.grpc.acl")

REFRESH_MS_DEFAULT = 1000
VERIFIED_MAX = 4096
"""Most verified signatures remembered (then forgotten all at once)."""
_METHODS = spb.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name


class AclCache:
    """The cluster's users and policies, as last read from the nameserver."""

    def __init__(
        self, fetch: Callable[[], Awaitable[AclTables]], refresh_ms: int = REFRESH_MS_DEFAULT
    ) -> None:
        """``fetch`` reads the tables (raising when no nameserver answers)."""
        self._fetch = fetch
        self.refresh_ms = refresh_ms
        self.tables: AclTables | None = None
        self._refreshed = asyncio.Event()

    async def refresh(self) -> None:
        """Read the tables once; on failure the last ones stay (and the error is raised)."""
        self.tables = await self._fetch()
        self._refreshed.set()

    async def wait_loaded(self, timeout_s: float) -> bool:
        """Whether the tables were read within ``timeout_s``."""
        try:
            await asyncio.wait_for(self._refreshed.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def run(self) -> None:
        """Refresh every ``refresh_ms`` until cancelled; failures are logged (warning
        once per outage) and the last tables stay in force."""
        failing = False
        while True:
            try:
                await self.refresh()
            except BrokerError as error:
                if not failing:
                    log.warning(
                        "ACL tables not refreshed; the last ones stay in force",
                        extra={"error": error.message},
                    )
                failing = True
            else:
                if failing:
                    log.info("ACL tables refreshed again")
                failing = False
            await asyncio.sleep(self.refresh_ms / 1000)


class AclGuard:
    """Authenticates and authorizes one call (see the module docstring)."""

    def __init__(
        self,
        cache: AclCache,
        *,
        skew_ms: int = SKEW_MS_DEFAULT,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        """``clock_ms``: the wall clock signature dates are compared with."""
        self.cache = cache
        self.skew_ms = skew_ms
        self._clock_ms = clock_ms
        # (authorization, date-time) -> (the tables it was verified with, its user, the
        # date in ms): the official clients sign with a date of second resolution, so
        # most calls repeat a header verified a moment ago. A hit skips parsing and the
        # HMAC; the skew is checked on every call, and a refresh of the tables (a new
        # secret, a deleted user) makes every entry miss.
        self._verified: dict[tuple[str, str], tuple[AclTables, User, int]] = {}

    def authenticate(self, metadata: Iterable[tuple[str, Any]]) -> tuple[User, AclTables]:
        """The user the call's headers authenticate, with the tables used; raises
        UNAUTHENTICATED (or UNAVAILABLE before the tables are first read)."""
        tables = self.cache.tables
        if tables is None:
            raise BrokerError(
                codes.UNAVAILABLE, "ACL tables not read from the nameserver yet; retry"
            )
        headers = dict(metadata)
        header = str(headers.get(AUTHORIZATION_HEADER) or "")
        if not header:
            raise Unauthenticated(
                f"ACL is on: header {AUTHORIZATION_HEADER} is required (set the client's "
                "credentials: access key and secret)"
            )
        date_time = str(headers.get(DATE_TIME_HEADER, ""))
        now_ms = self._clock_ms()
        known = self._verified.get((header, date_time))
        if known is not None and known[0] is tables and abs(now_ms - known[2]) <= self.skew_ms:
            return known[1], tables
        credential = parse_authorization(header)
        user = tables.user(credential.access_key)
        if user is None:
            raise Unauthenticated(f"user {credential.access_key!r} does not exist")
        verify(credential, user.secret, date_time, now_ms, self.skew_ms)
        if len(self._verified) >= VERIFIED_MAX:
            self._verified.clear()
        self._verified[(header, date_time)] = (tables, user, date_time_ms(date_time))
        return user, tables

    def check(self, method: str, request: Any, context: Any) -> None:
        """Raise the BrokerError (UNAUTHENTICATED or PERMISSION_DENIED) refusing this
        call, or return to let it through."""
        try:
            user, tables = self.authenticate(context.invocation_metadata() or ())
            demand = demand_of(method, request)
            if demand is None:
                return
            source_ip = source_ip_of(context)
            refusal: Forbidden | None = None
            for action in demand.actions:
                try:
                    tables.check(user, demand.resources, action, source_ip)
                except Forbidden as error:
                    refusal = refusal or error
                else:
                    return
            assert refusal is not None
            raise refusal
        except (Unauthenticated, Forbidden) as error:
            raise BrokerError(error.code, str(error)) from None


def source_ip_of(context: Any) -> str:
    """The caller's IP address ("" if unknown): grpc.aio's ``peer()`` is
    ``ipv4:1.2.3.4:5678`` or ``ipv6:[::1]:5678``, the broker's own server gives
    ``host:port``."""
    peer = getattr(context, "peer", None)
    text = str(peer()) if callable(peer) else ""
    for prefix in ("ipv4:", "ipv6:"):
        text = text.removeprefix(prefix)
    host = text.rpartition(":")[0]
    return host.strip("[]").replace("%5B", "").replace("%5D", "")


def guarded(name: str, handler: grpc.RpcMethodHandler, guard: AclGuard) -> grpc.RpcMethodHandler:
    """``handler`` of method ``name``, run only for calls ``guard`` lets through; a
    refused call is answered with its status (see the module docstring)."""
    method = _METHODS[name]
    response_class: type[Message] = getattr(spb, method.output_type.name)
    decode = handler.request_deserializer
    serialize = handler.response_serializer

    def refused(request: Any, context: Any) -> Message | None:
        try:
            guard.check(name, request, context)
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
            guard.check(name, None, context)
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
