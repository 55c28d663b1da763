"""The remoting codec's one error root.

:class:`FrameError` means the byte stream itself is broken (a length the
decoder cannot trust, or a frame cut off by the end of the stream): nothing
after it can be framed, so the connection must end. A frame whose header
cannot be read leaves the framing intact and is reported as a value by the
decoder instead (``frames.Malformed``). :class:`HeaderError` is a request
header field that is missing or not of its type; the request is answered
and the connection goes on.

PURE.
"""

from __future__ import annotations

from protocol import errors as codes
from protocol.errors import CodedError


class RemotingError(CodedError):
    """A remoting command or stream the codec cannot accept; the message says why."""

    code = codes.BAD_REQUEST


class FrameError(RemotingError):
    """The stream cannot be framed any further (see the module docstring)."""


class HeaderError(RemotingError):
    """A request header field is missing or not of its type."""


class BodyError(RemotingError):
    """A request body (a message batch, a JSON body) cannot be read."""
