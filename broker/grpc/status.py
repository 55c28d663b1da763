"""The one place broker errors become RocketMQ v2 status codes.

Reasons map one to one; shared codes (from ports: storage, nameserver) map
by meaning; anything that is not a :class:`BrokerError` is a bug: it is
logged with its traceback and reported as INTERNAL_SERVER_ERROR, so the
client gets an answer and the server keeps serving.
"""

from __future__ import annotations

import logging

from broker.errors import BrokerError, Reason
from protocol import errors as codes
from protocol.rocketmq.v2 import definition_pb2 as pb

log = logging.getLogger("broker.grpc")

REASON_CODES: dict[Reason, int] = {
    Reason.ILLEGAL_TOPIC: pb.ILLEGAL_TOPIC,
    Reason.ILLEGAL_CONSUMER_GROUP: pb.ILLEGAL_CONSUMER_GROUP,
    Reason.ILLEGAL_MESSAGE_TAG: pb.ILLEGAL_MESSAGE_TAG,
    Reason.ILLEGAL_MESSAGE_KEY: pb.ILLEGAL_MESSAGE_KEY,
    Reason.ILLEGAL_MESSAGE_GROUP: pb.ILLEGAL_MESSAGE_GROUP,
    Reason.ILLEGAL_MESSAGE_PROPERTY_KEY: pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
    Reason.ILLEGAL_MESSAGE_ID: pb.ILLEGAL_MESSAGE_ID,
    Reason.ILLEGAL_FILTER_EXPRESSION: pb.ILLEGAL_FILTER_EXPRESSION,
    Reason.ILLEGAL_INVISIBLE_TIME: pb.ILLEGAL_INVISIBLE_TIME,
    Reason.ILLEGAL_DELIVERY_TIME: pb.ILLEGAL_DELIVERY_TIME,
    Reason.ILLEGAL_POLLING_TIME: pb.ILLEGAL_POLLING_TIME,
    Reason.INVALID_RECEIPT_HANDLE: pb.INVALID_RECEIPT_HANDLE,
    Reason.MESSAGE_TYPE_CONFLICT: pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    Reason.MESSAGE_CORRUPTED: pb.MESSAGE_CORRUPTED,
    Reason.CLIENT_ID_REQUIRED: pb.CLIENT_ID_REQUIRED,
    Reason.UNRECOGNIZED_CLIENT_TYPE: pb.UNRECOGNIZED_CLIENT_TYPE,
    Reason.MESSAGE_BODY_EMPTY: pb.MESSAGE_BODY_EMPTY,
    Reason.MESSAGE_BODY_TOO_LARGE: pb.MESSAGE_BODY_TOO_LARGE,
    Reason.MESSAGE_PROPERTIES_TOO_LARGE: pb.MESSAGE_PROPERTIES_TOO_LARGE,
    Reason.TOPIC_NOT_FOUND: pb.TOPIC_NOT_FOUND,
    Reason.CONSUMER_GROUP_NOT_FOUND: pb.CONSUMER_GROUP_NOT_FOUND,
    Reason.NO_READABLE_QUEUE: pb.FORBIDDEN,
    Reason.NO_WRITABLE_QUEUE: pb.FORBIDDEN,
    Reason.INVALID_TRANSACTION_ID: pb.INVALID_TRANSACTION_ID,
    Reason.TRANSACTION_NOT_FOUND: pb.NOT_FOUND,
    Reason.OFFSET_NOT_FOUND: pb.OFFSET_NOT_FOUND,
}

# Shared codes without a reason. Retriable cluster conditions become codes the
# clients treat as transient server errors (they retry sends on any error).
SHARED_CODES: dict[str, int] = {
    codes.INTERNAL.name: pb.INTERNAL_SERVER_ERROR,
    codes.BAD_REQUEST.name: pb.BAD_REQUEST,
    codes.NOT_FOUND.name: pb.NOT_FOUND,
    codes.ALREADY_EXISTS.name: pb.BAD_REQUEST,
    codes.UNAVAILABLE.name: pb.HA_NOT_AVAILABLE,
    codes.DEADLINE_EXCEEDED.name: pb.PROXY_TIMEOUT,
    codes.CANCELLED.name: pb.REQUEST_TIMEOUT,
    codes.OVERLOADED.name: pb.TOO_MANY_REQUESTS,
    codes.SHUTTING_DOWN.name: pb.HA_NOT_AVAILABLE,
    codes.NOT_LEADER.name: pb.HA_NOT_AVAILABLE,
    codes.PROPOSAL_DROPPED.name: pb.HA_NOT_AVAILABLE,
    codes.GROUP_NOT_HOSTED.name: pb.HA_NOT_AVAILABLE,
    codes.STORAGE_FAILED.name: pb.INTERNAL_SERVER_ERROR,
    codes.OFFSET_OUT_OF_RANGE.name: pb.ILLEGAL_OFFSET,
    codes.INVALID_RECEIPT_HANDLE.name: pb.INVALID_RECEIPT_HANDLE,
    codes.TOPIC_NOT_FOUND.name: pb.TOPIC_NOT_FOUND,
    codes.CONSUMER_GROUP_NOT_FOUND.name: pb.CONSUMER_GROUP_NOT_FOUND,
    codes.INVALID_NAME.name: pb.BAD_REQUEST,
    codes.LEASE_NOT_HELD.name: pb.INTERNAL_SERVER_ERROR,
    codes.NOT_IMPLEMENTED.name: pb.NOT_IMPLEMENTED,
    codes.UNSUPPORTED.name: pb.UNSUPPORTED,
    codes.ILLEGAL_FILTER_EXPRESSION.name: pb.ILLEGAL_FILTER_EXPRESSION,
    codes.UNAUTHENTICATED.name: pb.UNAUTHORIZED,
    codes.PERMISSION_DENIED.name: pb.FORBIDDEN,
}


def ok() -> pb.Status:
    """The success status (its message is the code name, as the proxy writes it)."""
    return pb.Status(code=pb.OK, message="OK")


def code_of(error: BaseException) -> int:
    """The v2 code for ``error`` (see the module docstring)."""
    if isinstance(error, BrokerError):
        if error.reason is not None:
            return REASON_CODES[error.reason]
        if error.code.retriable:
            return SHARED_CODES.get(error.code.name, pb.HA_NOT_AVAILABLE)
        return SHARED_CODES.get(error.code.name, pb.INTERNAL_SERVER_ERROR)
    return pb.INTERNAL_SERVER_ERROR


def status_of(error: BaseException) -> pb.Status:
    """The in-band status for a failed call; unexpected errors are logged."""
    if isinstance(error, BrokerError):
        return pb.Status(code=code_of(error), message=error.message)  # type: ignore[arg-type]
    log.error("unexpected error serving a client call", exc_info=error)
    return pb.Status(
        code=pb.INTERNAL_SERVER_ERROR, message=f"internal error: {type(error).__name__}"
    )


def bad_request(cause: str) -> pb.Status:
    """The in-band status for a request the client got wrong before any processor saw
    it (undecodable bytes): BAD_REQUEST naming ``cause``; nothing is logged."""
    return status_of(BrokerError(codes.BAD_REQUEST, cause))
