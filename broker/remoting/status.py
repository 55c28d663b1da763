"""The one place errors become remoting response codes.

Reasons map one to one; shared codes (from ports: storage, nameserver) map
by meaning, retriable cluster conditions to SERVICE_NOT_AVAILABLE or
SYSTEM_BUSY (4.x producers retry another broker on those); codec errors
(:class:`~protocol.remoting.errors.RemotingError`) to INVALID_PARAMETER or
MESSAGE_ILLEGAL; unreadable frames to SYSTEM_ERROR. Anything else is a
bug: logged with its traceback and answered SYSTEM_ERROR, so the client
gets an answer and the server keeps serving. The remark always says why.
"""

from __future__ import annotations

import logging

from broker.errors import BrokerError, Reason
from protocol import errors as codes
from protocol.remoting.codes import FLAG_RESPONSE, ResponseCode
from protocol.remoting.errors import BodyError, FrameError, RemotingError
from protocol.remoting.frames import Malformed, RemotingCommand

log = logging.getLogger("broker.remoting")

REASON_CODES: dict[Reason, ResponseCode] = {
    Reason.ILLEGAL_TOPIC: ResponseCode.INVALID_PARAMETER,
    Reason.ILLEGAL_CONSUMER_GROUP: ResponseCode.INVALID_PARAMETER,
    Reason.ILLEGAL_MESSAGE_TAG: ResponseCode.MESSAGE_ILLEGAL,
    Reason.ILLEGAL_MESSAGE_KEY: ResponseCode.MESSAGE_ILLEGAL,
    Reason.ILLEGAL_MESSAGE_GROUP: ResponseCode.MESSAGE_ILLEGAL,
    Reason.ILLEGAL_MESSAGE_PROPERTY_KEY: ResponseCode.MESSAGE_ILLEGAL,
    Reason.ILLEGAL_MESSAGE_ID: ResponseCode.MESSAGE_ILLEGAL,
    Reason.ILLEGAL_FILTER_EXPRESSION: ResponseCode.SUBSCRIPTION_PARSE_FAILED,
    Reason.ILLEGAL_INVISIBLE_TIME: ResponseCode.INVALID_PARAMETER,
    Reason.ILLEGAL_DELIVERY_TIME: ResponseCode.MESSAGE_ILLEGAL,
    Reason.ILLEGAL_POLLING_TIME: ResponseCode.INVALID_PARAMETER,
    Reason.INVALID_RECEIPT_HANDLE: ResponseCode.INVALID_PARAMETER,
    Reason.MESSAGE_TYPE_CONFLICT: ResponseCode.MESSAGE_ILLEGAL,
    Reason.MESSAGE_CORRUPTED: ResponseCode.MESSAGE_ILLEGAL,
    Reason.CLIENT_ID_REQUIRED: ResponseCode.INVALID_PARAMETER,
    Reason.UNRECOGNIZED_CLIENT_TYPE: ResponseCode.INVALID_PARAMETER,
    Reason.MESSAGE_BODY_EMPTY: ResponseCode.MESSAGE_ILLEGAL,
    Reason.MESSAGE_BODY_TOO_LARGE: ResponseCode.MESSAGE_ILLEGAL,
    Reason.MESSAGE_PROPERTIES_TOO_LARGE: ResponseCode.MESSAGE_ILLEGAL,
    Reason.TOPIC_NOT_FOUND: ResponseCode.TOPIC_NOT_EXIST,
    Reason.CONSUMER_GROUP_NOT_FOUND: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    Reason.NO_READABLE_QUEUE: ResponseCode.NO_PERMISSION,
    Reason.NO_WRITABLE_QUEUE: ResponseCode.NO_PERMISSION,
    Reason.INVALID_TRANSACTION_ID: ResponseCode.INVALID_PARAMETER,
    Reason.TRANSACTION_NOT_FOUND: ResponseCode.QUERY_NOT_FOUND,
    Reason.OFFSET_NOT_FOUND: ResponseCode.QUERY_NOT_FOUND,
}

# Shared codes without a reason (a code missing here maps by its retriable flag).
SHARED_CODES: dict[str, ResponseCode] = {
    codes.INTERNAL.name: ResponseCode.SYSTEM_ERROR,
    codes.BAD_REQUEST.name: ResponseCode.INVALID_PARAMETER,
    codes.UNAUTHENTICATED.name: ResponseCode.NO_PERMISSION,
    codes.PERMISSION_DENIED.name: ResponseCode.NO_PERMISSION,
    codes.NOT_FOUND.name: ResponseCode.QUERY_NOT_FOUND,
    codes.OVERLOADED.name: ResponseCode.SYSTEM_BUSY,
    codes.OFFSET_OUT_OF_RANGE.name: ResponseCode.PULL_OFFSET_MOVED,
    codes.TOPIC_NOT_FOUND.name: ResponseCode.TOPIC_NOT_EXIST,
    codes.CONSUMER_GROUP_NOT_FOUND.name: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    codes.INVALID_NAME.name: ResponseCode.INVALID_PARAMETER,
    codes.NOT_IMPLEMENTED.name: ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
    codes.UNSUPPORTED.name: ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
}


def code_of(error: BaseException) -> ResponseCode:
    """The response code for ``error`` (see the module docstring)."""
    if isinstance(error, BrokerError):
        if error.reason is not None:
            return REASON_CODES[error.reason]
        if error.code.name in SHARED_CODES:
            return SHARED_CODES[error.code.name]
        if error.code.retriable:
            return ResponseCode.SERVICE_NOT_AVAILABLE
        return ResponseCode.SYSTEM_ERROR
    if isinstance(error, BodyError):
        return ResponseCode.MESSAGE_ILLEGAL
    if isinstance(error, RemotingError):
        return ResponseCode.INVALID_PARAMETER
    return ResponseCode.SYSTEM_ERROR


def remark_of(error: BaseException) -> str:
    """What the response's remark says about ``error``; unexpected errors are logged."""
    if isinstance(error, BrokerError):
        return error.message
    if isinstance(error, RemotingError):
        return str(error)
    log.error("unexpected error serving a remoting request", exc_info=error)
    return f"internal error: {type(error).__name__}"


def unsupported_remark(code: int) -> str:
    """The remark of REQUEST_CODE_NOT_SUPPORTED."""
    return f"request code {code} is not supported by this broker"


def malformed_answer(item: Malformed) -> RemotingCommand:
    """The answer to a frame whose header could not be read (SYSTEM_ERROR, with the
    opaque as far as it could be recovered)."""
    return RemotingCommand(
        code=ResponseCode.SYSTEM_ERROR,
        opaque=item.opaque,
        flag=FLAG_RESPONSE,
        remark=f"malformed command: {item.reason}",
    )


def busy_answer(request: RemotingCommand, limit: int) -> RemotingCommand:
    """The answer to a request beyond its connection's limit of requests in flight."""
    return request.reply(
        ResponseCode.SYSTEM_BUSY,
        f"this connection has {limit} requests in flight already; retry when some are answered",
    )


def frame_error_answer(error: FrameError) -> RemotingCommand:
    """The last answer on a connection whose stream cannot be framed (opaque 0: no
    request can be named)."""
    return RemotingCommand(
        code=ResponseCode.SYSTEM_ERROR,
        opaque=0,
        flag=FLAG_RESPONSE,
        remark=f"bad frame, closing the connection: {error}",
    )
