"""The one table of rip5 error codes, shared by every package and every wire.

ONLY ADD TO THE END. A code's number is its identity on the wire (Angelia
error frames carry it between processes); renumbering or reusing one breaks
mixed-version clusters. Retire a code by leaving it in place.

Each package has its own error root (``AngeliaError``, ``RaftError``,
``StorageError`` ...) whose instances carry one of these codes; callers decide
by the flags (``retriable``, ``refresh_route``), never by ``isinstance``
ladders. Exactly one module per client protocol maps codes to that
protocol's status codes (``broker/grpc/status.py`` for RocketMQ v2).

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ErrorCode:
    """One row of the table.

    ``retriable``: the same request may succeed if sent again (after backoff).
    ``refresh_route``: the caller's idea of who serves this is stale; look it
    up again (e.g. NOT_LEADER) before retrying.
    """

    number: int
    name: str
    retriable: bool
    refresh_route: bool
    description: str


@dataclass(frozen=True, slots=True)
class WireError:
    """An error as it crosses a wire between processes: an Angelia ERROR frame, or one
    failed item of a call that answers item by item (``code``: an :class:`ErrorCode`
    number; the flags as the sender's error had them)."""

    code: int
    message: str
    retriable: bool
    leader_hint: str


_TABLE: list[ErrorCode] = []
_BY_NUMBER: dict[int, ErrorCode] = {}


def _code(
    number: int,
    name: str,
    description: str,
    *,
    retriable: bool = False,
    refresh_route: bool = False,
) -> ErrorCode:
    code = ErrorCode(number, name, retriable, refresh_route, description)
    if number in _BY_NUMBER or (_TABLE and number <= _TABLE[-1].number):
        raise ValueError(f"error code {number} ({name}) breaks the append-only order")
    _TABLE.append(code)
    _BY_NUMBER[number] = code
    return code


# -- general -------------------------------------------------------------------
INTERNAL = _code(1, "INTERNAL", "an unexpected failure inside the process")
BAD_REQUEST = _code(2, "BAD_REQUEST", "the request is malformed or violates a limit")
NOT_FOUND = _code(3, "NOT_FOUND", "the named resource does not exist")
ALREADY_EXISTS = _code(4, "ALREADY_EXISTS", "the named resource exists already")
UNAVAILABLE = _code(
    5, "UNAVAILABLE", "the peer cannot be reached or is not serving", retriable=True
)
DEADLINE_EXCEEDED = _code(6, "DEADLINE_EXCEEDED", "the call's deadline passed", retriable=True)
CANCELLED = _code(7, "CANCELLED", "the caller cancelled the call")
OVERLOADED = _code(8, "OVERLOADED", "too much in flight; back off and retry", retriable=True)
SHUTTING_DOWN = _code(
    9, "SHUTTING_DOWN", "the process is stopping", retriable=True, refresh_route=True
)
# -- rpc (Angelia) -----------------------------------------------------------------
UNKNOWN_METHOD = _code(20, "UNKNOWN_METHOD", "the server does not serve this method")
FRAME_TOO_LARGE = _code(21, "FRAME_TOO_LARGE", "a frame exceeds the maximum frame size")
PROTOCOL_VIOLATION = _code(22, "PROTOCOL_VIOLATION", "the peer broke the framing protocol")
CODEC_MISMATCH = _code(23, "CODEC_MISMATCH", "the peers are configured with different codecs")
DECODE_FAILED = _code(24, "DECODE_FAILED", "a payload could not be decoded as its type")
# -- consensus -------------------------------------------------------------------
NOT_LEADER = _code(
    40, "NOT_LEADER", "this replica is not the group's leader", retriable=True, refresh_route=True
)
PROPOSAL_DROPPED = _code(
    41,
    "PROPOSAL_DROPPED",
    "the proposal was dropped (no leader, leadership transfer or term change)",
    retriable=True,
)
GROUP_NOT_HOSTED = _code(
    42,
    "GROUP_NOT_HOSTED",
    "this node hosts no replica of the group",
    retriable=True,
    refresh_route=True,
)
STORAGE_FAILED = _code(43, "STORAGE_FAILED", "the log store failed; the replica stopped")
# -- storage -------------------------------------------------------------------
OFFSET_OUT_OF_RANGE = _code(60, "OFFSET_OUT_OF_RANGE", "the queue offset is outside the log")
INVALID_RECEIPT_HANDLE = _code(
    61, "INVALID_RECEIPT_HANDLE", "the receipt handle is forged, stale or expired"
)

# -- nameserver ------------------------------------------------------------------
TOPIC_NOT_FOUND = _code(80, "TOPIC_NOT_FOUND", "the topic does not exist", refresh_route=True)
CONSUMER_GROUP_NOT_FOUND = _code(
    81, "CONSUMER_GROUP_NOT_FOUND", "the consumer group does not exist"
)
INVALID_NAME = _code(
    82, "INVALID_NAME", "a topic or group name breaks the naming rules (length, characters)"
)
LEASE_HELD = _code(
    83, "LEASE_HELD", "the lease is held by another owner until it expires", retriable=True
)
LEASE_NOT_HELD = _code(
    84, "LEASE_NOT_HELD", "the caller does not hold the lease (never did, or it expired)"
)
# -- broker ---------------------------------------------------------------------
NOT_IMPLEMENTED = _code(100, "NOT_IMPLEMENTED", "the operation is not built yet")
UNSUPPORTED = _code(101, "UNSUPPORTED", "the operation or option is not supported")
# -- filters ---------------------------------------------------------------------
ILLEGAL_FILTER_EXPRESSION = _code(
    102, "ILLEGAL_FILTER_EXPRESSION", "a subscription's filter expression is invalid"
)
# -- access control (ACL 2.0) ---------------------------------------------------------
UNAUTHENTICATED = _code(
    103, "UNAUTHENTICATED", "the caller's credential is missing, unknown, stale or badly signed"
)
PERMISSION_DENIED = _code(
    104, "PERMISSION_DENIED", "no access policy lets the caller do this action on this resource"
)


class CodedError(Exception):
    """Base of the packages' error roots whose classes each carry one code.

    Subclasses set ``code``; the flags come from it. (Errors whose code is
    chosen per instance, like Angelia's and the broker's, set ``code`` in
    their constructors instead.) ``leader_hint`` is the third thing callers
    decide by: the replica that serves the request instead, as the caller
    addresses it ("" when none is known; an error that redirects sets it).
    """

    code: ErrorCode = INTERNAL
    leader_hint: str = ""

    @property
    def retriable(self) -> bool:
        """Whether the same request may succeed later."""
        return self.code.retriable

    @property
    def refresh_route(self) -> bool:
        """Whether the caller should look up who serves this before retrying."""
        return self.code.refresh_route


def by_number(number: int) -> ErrorCode:
    """The code with this number; unknown numbers (a newer peer) read as INTERNAL."""
    return _BY_NUMBER.get(number, INTERNAL)


def all_codes() -> tuple[ErrorCode, ...]:
    """Every code, in table order."""
    return tuple(_TABLE)
