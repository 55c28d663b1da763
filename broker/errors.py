"""The broker's one error root.

Every failure the broker reports to a client is a :class:`BrokerError`. It
carries a code from the shared table (``protocol/errors.py``), which gives the
``retriable`` / ``refresh_route`` flags callers decide by, and an optional
:class:`Reason` that names the client-visible cause more precisely than the
shared code can (``ILLEGAL_TOPIC`` and ``MESSAGE_BODY_EMPTY`` are both
``BAD_REQUEST`` inside the cluster, but the official clients tell them apart).

Reasons are protocol-agnostic domain words; ``broker/grpc/status.py`` is the
one place that turns a reason or a code into a RocketMQ v2 ``Code`` (a future
remoting adapter gets its own mapping).

Errors raised by port implementations (storage, nameserver through Angelia)
may be any :class:`BrokerError`; anything else that escapes a processor is a
bug and reaches the client as an internal error.

PURE.
"""

from __future__ import annotations

import enum

from protocol import errors as codes
from protocol.errors import ErrorCode


class Reason(enum.Enum):
    """A precise client-visible cause; each maps to one shared code."""

    ILLEGAL_TOPIC = "ILLEGAL_TOPIC"
    ILLEGAL_CONSUMER_GROUP = "ILLEGAL_CONSUMER_GROUP"
    ILLEGAL_MESSAGE_TAG = "ILLEGAL_MESSAGE_TAG"
    ILLEGAL_MESSAGE_KEY = "ILLEGAL_MESSAGE_KEY"
    ILLEGAL_MESSAGE_GROUP = "ILLEGAL_MESSAGE_GROUP"
    ILLEGAL_MESSAGE_PROPERTY_KEY = "ILLEGAL_MESSAGE_PROPERTY_KEY"
    ILLEGAL_MESSAGE_ID = "ILLEGAL_MESSAGE_ID"
    ILLEGAL_FILTER_EXPRESSION = "ILLEGAL_FILTER_EXPRESSION"
    ILLEGAL_INVISIBLE_TIME = "ILLEGAL_INVISIBLE_TIME"
    ILLEGAL_DELIVERY_TIME = "ILLEGAL_DELIVERY_TIME"
    ILLEGAL_POLLING_TIME = "ILLEGAL_POLLING_TIME"
    INVALID_RECEIPT_HANDLE = "INVALID_RECEIPT_HANDLE"
    MESSAGE_TYPE_CONFLICT = "MESSAGE_TYPE_CONFLICT"
    MESSAGE_CORRUPTED = "MESSAGE_CORRUPTED"
    CLIENT_ID_REQUIRED = "CLIENT_ID_REQUIRED"
    UNRECOGNIZED_CLIENT_TYPE = "UNRECOGNIZED_CLIENT_TYPE"
    MESSAGE_BODY_EMPTY = "MESSAGE_BODY_EMPTY"
    MESSAGE_BODY_TOO_LARGE = "MESSAGE_BODY_TOO_LARGE"
    MESSAGE_PROPERTIES_TOO_LARGE = "MESSAGE_PROPERTIES_TOO_LARGE"
    TOPIC_NOT_FOUND = "TOPIC_NOT_FOUND"
    CONSUMER_GROUP_NOT_FOUND = "CONSUMER_GROUP_NOT_FOUND"
    NO_READABLE_QUEUE = "NO_READABLE_QUEUE"
    NO_WRITABLE_QUEUE = "NO_WRITABLE_QUEUE"
    INVALID_TRANSACTION_ID = "INVALID_TRANSACTION_ID"
    TRANSACTION_NOT_FOUND = "TRANSACTION_NOT_FOUND"
    OFFSET_NOT_FOUND = "OFFSET_NOT_FOUND"

    @property
    def code(self) -> ErrorCode:
        """The shared code this reason refines."""
        return _REASON_CODES.get(self, codes.BAD_REQUEST)


_REASON_CODES: dict[Reason, ErrorCode] = {
    Reason.INVALID_RECEIPT_HANDLE: codes.INVALID_RECEIPT_HANDLE,
    Reason.TOPIC_NOT_FOUND: codes.TOPIC_NOT_FOUND,
    Reason.CONSUMER_GROUP_NOT_FOUND: codes.CONSUMER_GROUP_NOT_FOUND,
    Reason.NO_READABLE_QUEUE: codes.NOT_FOUND,
    Reason.NO_WRITABLE_QUEUE: codes.NOT_FOUND,
    Reason.TRANSACTION_NOT_FOUND: codes.NOT_FOUND,
    Reason.OFFSET_NOT_FOUND: codes.NOT_FOUND,
}


class BrokerError(Exception):
    """A failure reported to the client; ``code`` decides retry, ``reason`` the wire status."""

    def __init__(self, code: ErrorCode, message: str, *, reason: Reason | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    @classmethod
    def of(cls, reason: Reason, message: str) -> BrokerError:
        """An error for a precise client-visible cause."""
        return cls(reason.code, message, reason=reason)

    @property
    def retriable(self) -> bool:
        """The same request may succeed if sent again (after backoff)."""
        return self.code.retriable

    @property
    def refresh_route(self) -> bool:
        """The caller's route is stale; query it again before retrying."""
        return self.code.refresh_route

    def __repr__(self) -> str:
        reason = f", reason={self.reason.name}" if self.reason else ""
        return f"BrokerError({self.code.name}{reason}: {self.message})"


def not_implemented(what: str) -> BrokerError:
    """The error for an operation this broker does not provide yet."""
    return BrokerError(codes.NOT_IMPLEMENTED, f"{what} is not implemented by this broker yet")


def unsupported(what: str) -> BrokerError:
    """The error for an option this broker does not support."""
    return BrokerError(codes.UNSUPPORTED, f"{what} is not supported by this broker")
