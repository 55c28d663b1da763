"""ACL 2.0 in the broker: the users and policies cached from the nameserver, and the
guard that authenticates a caller and checks a demand, for both client protocols.

The users and policies come from the nameserver (:class:`AclCache`): read
whole at start and every ``refresh_ms`` after. A failed refresh keeps the
last tables, so enforcement goes on while every nameserver is down; until
the first read succeeds, calls are answered with a retriable UNAVAILABLE.

:class:`AclGuard` authenticates a gRPC call by its ``authorization`` header
(HMAC-SHA1 over ``x-mq-date-time``, dates further than ``skew_ms`` from the
broker's clock refused) or a classic remoting request by its ``AccessKey``
and ``Signature`` ext fields (HMAC-SHA1 over the sorted fields and the body;
the classic protocol signs no date, so a captured request can be replayed:
use TLS), then checks the call's demand (``broker/grpc/acl_demands.py``,
``broker/remoting/acl_demands.py``) against the user's policy
(``protocol/acl.py``) with the caller's address as its source. Refusals are
UNAUTHENTICATED or PERMISSION_DENIED errors naming the user, the action and
the resource; each wire's one status mapping turns them into its codes.

SHELL: reads the wall clock (signature dates) and the nameserver.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from broker.acl_demand import Demand
from broker.errors import BrokerError
from protocol import errors as codes
from protocol.acl import AclTables, Forbidden, Unauthenticated, User
from protocol.acl_signature import (
    AUTHORIZATION_HEADER,
    CLASSIC_ACCESS_KEY,
    CLASSIC_SIGNATURE,
    DATE_TIME_HEADER,
    SKEW_MS_DEFAULT,
    date_time_ms,
    parse_authorization,
    verify,
    verify_classic,
)

log = logging.getLogger("broker.acl")

REFRESH_MS_DEFAULT = 1000
VERIFIED_MAX = 4096
"""Most verified signatures remembered (then forgotten all at once)."""


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

    def tables(self) -> AclTables:
        """The tables in force; UNAVAILABLE (retriable) before the first read."""
        tables = self.cache.tables
        if tables is None:
            raise BrokerError(
                codes.UNAVAILABLE, "ACL tables not read from the nameserver yet; retry"
            )
        return tables

    def authenticate(self, metadata: Iterable[tuple[str, Any]]) -> tuple[User, AclTables]:
        """The user a gRPC call's headers authenticate, with the tables used; raises
        UNAUTHENTICATED (or UNAVAILABLE before the tables are first read)."""
        tables = self.tables()
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

    def authenticate_classic(
        self, fields: Mapping[str, str], body: bytes
    ) -> tuple[User, AclTables]:
        """The user a classic (4.x remoting) request authenticates: its ``AccessKey`` and
        ``Signature`` ext fields (``protocol.acl_signature.classic_signature``); raises
        UNAUTHENTICATED (or UNAVAILABLE before the tables are first read)."""
        tables = self.tables()
        access_key = fields.get(CLASSIC_ACCESS_KEY, "")
        if not access_key or not fields.get(CLASSIC_SIGNATURE):
            raise Unauthenticated(
                f"ACL is on: ext fields {CLASSIC_ACCESS_KEY} and {CLASSIC_SIGNATURE} are "
                "required (set the client's session credentials)"
            )
        user = tables.user(access_key)
        if user is None:
            raise Unauthenticated(f"user {access_key!r} does not exist")
        verify_classic(fields, body, user.secret)
        return user, tables

    @staticmethod
    def authorize(user: User, tables: AclTables, demand: Demand | None, source_ip: str) -> None:
        """Raise :class:`Forbidden` unless, for some action of ``demand``, ``user`` may do
        it on every resource of it (None: nothing to check)."""
        if demand is None:
            return
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


def host_of(peer: str) -> str:
    """The host of a ``host:port`` or ``[v6 host]:port`` peer address ("" if none)."""
    return peer.rpartition(":")[0].strip("[]")


def as_broker_error(error: Unauthenticated | Forbidden) -> BrokerError:
    """An ACL refusal as the broker's error (its code maps to each wire's status)."""
    return BrokerError(error.code, str(error))
