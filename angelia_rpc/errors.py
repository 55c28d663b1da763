"""Errors of Angelia: one root, each instance carrying a code from ``protocol.errors``.

After h11, the classes separate who broke the rules:

- :class:`LocalUsageError`: this process misused the API (a frame over the
  size limit before it was sent, a handler missing a declared method, a bad
  configuration). Nothing went over the wire.
- :class:`RemoteProtocolError`: the peer sent bytes that break the framing
  protocol; the connection is closed, other connections keep serving.
- :class:`RemoteError`: the peer's handler failed and said so in an error
  frame: (code, message, retriable, leader hint) crossed the wire intact.
- plain :class:`AngeliaError` with codes such as UNAVAILABLE,
  DEADLINE_EXCEEDED, CANCELLED: the call did not complete.

Callers decide by ``code`` and the flags, never by the class alone.

PURE.
"""

from __future__ import annotations

from protocol import errors
from protocol.errors import ErrorCode, WireError


class AngeliaError(Exception):
    """Root of every Angelia error.

    ``retriable`` defaults to the code's flag; a remote peer may override it.
    ``leader_hint`` is the address (or node id) of the replica the peer
    believes serves the request, or ``""`` when it does not know.
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        retriable: bool | None = None,
        leader_hint: str = "",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retriable = code.retriable if retriable is None else retriable
        self.leader_hint = leader_hint

    @property
    def refresh_route(self) -> bool:
        """Whether the caller should look up who serves this before retrying."""
        return self.code.refresh_route

    def __str__(self) -> str:
        hint = f" (leader hint: {self.leader_hint})" if self.leader_hint else ""
        return f"{self.code.name}: {self.message}{hint}"

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild,
            (type(self), self.code.number, self.message, self.retriable, self.leader_hint),
        )


def _rebuild(
    cls: type[AngeliaError], number: int, message: str, retriable: bool, leader_hint: str
) -> AngeliaError:
    return cls(errors.by_number(number), message, retriable=retriable, leader_hint=leader_hint)


class LocalUsageError(AngeliaError):
    """This process misused Angelia; nothing was sent."""


class RemoteProtocolError(AngeliaError):
    """The peer broke the framing protocol; its connection was closed."""


class RemoteError(AngeliaError):
    """The peer's handler reported an error; its fields crossed the wire."""


def unavailable(message: str) -> AngeliaError:
    """The peer cannot be reached or the connection was lost (retriable)."""
    return AngeliaError(errors.UNAVAILABLE, message)


def deadline_exceeded(message: str) -> AngeliaError:
    """The call's deadline passed before it completed (retriable)."""
    return AngeliaError(errors.DEADLINE_EXCEEDED, message)


def cancelled(message: str) -> AngeliaError:
    """The call was cancelled (not retriable: the caller chose to stop)."""
    return AngeliaError(errors.CANCELLED, message)


def to_wire(error: AngeliaError) -> WireError:
    """``error`` as it crosses the wire (its code's number and its flags)."""
    return WireError(error.code.number, error.message, error.retriable, error.leader_hint)


def from_wire(wire: WireError) -> RemoteError:
    """The error a peer sent (:func:`to_wire`), as raised on this side: its code (an
    unknown number reads as INTERNAL), message and flags intact."""
    return RemoteError(
        errors.by_number(wire.code),
        wire.message,
        retriable=wire.retriable,
        leader_hint=wire.leader_hint,
    )


def from_exception(exc: BaseException) -> AngeliaError:
    """The error to send for an exception raised by a handler.

    Any exception with a ``code`` attribute holding an :class:`ErrorCode`
    (every package's error root has one) keeps its code and its flags:
    ``retriable`` and ``leader_hint`` (``refresh_route`` is the code's).
    Anything else is INTERNAL, named by its type.
    """
    if isinstance(exc, AngeliaError):
        return exc
    code = getattr(exc, "code", None)
    if isinstance(code, ErrorCode):
        retriable = getattr(exc, "retriable", code.retriable)
        hint = getattr(exc, "leader_hint", "")
        return AngeliaError(
            code, str(exc) or code.description, retriable=bool(retriable), leader_hint=str(hint)
        )
    return AngeliaError(errors.INTERNAL, f"{type(exc).__name__}: {exc}")
