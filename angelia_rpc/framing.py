"""Angelia frames: the envelope every transport carries, and an incremental decoder.

Wire layout of one frame (network byte order)::

    u32 length      bytes after this field (the 16-byte rest of the header,
                    the method name and the payload)
    u8  kind        HELLO .. CREDIT below
    u8  flags       for REQUEST: the call kind (UNARY, SERVER_STREAM, BIDI)
    u8  codec_id    the codec of the payload (0 for frames without one)
    u8  method_len  length of the UTF-8 method name (REQUEST only, else 0)
    u64 call_id     correlation id chosen by the client; 0 = the connection
    u32 timeout_ms  REQUEST: time left until the caller's deadline (0 = none);
                    CREDIT: how many more stream messages the sender may send
    ... method      ``method_len`` bytes
    ... payload     the rest

A connection starts with HELLO (client) answered by WELCOME or a connection
ERROR (server), both with a JSON payload; a peer speaking another transport
or codec is refused there with a clear error. Then the client opens calls
with REQUEST; the server answers a unary call with one RESPONSE or ERROR; a
stream carries MESSAGE frames in either direction, each side ends its half
with END, and ERROR ends the whole call. CANCEL (client) abandons a call.
Stream messages are flow-controlled by CREDIT: a sender may have at most the
granted number of MESSAGE frames unacknowledged.

The total frame size (the 4-byte length field included) is bounded by
``frame_bytes_max``: an oversized frame is refused before it is sent
(:class:`LocalUsageError`) and, if a peer sends one anyway, the decoder
raises :class:`RemoteProtocolError` and the connection is closed.

PURE.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from angelia_rpc.errors import LocalUsageError, RemoteProtocolError
from protocol import errors

HELLO = 1
WELCOME = 2
REQUEST = 3
RESPONSE = 4
MESSAGE = 5
END = 6
ERROR = 7
CANCEL = 8
CREDIT = 9
KIND_NAMES = {
    HELLO: "HELLO",
    WELCOME: "WELCOME",
    REQUEST: "REQUEST",
    RESPONSE: "RESPONSE",
    MESSAGE: "MESSAGE",
    END: "END",
    ERROR: "ERROR",
    CANCEL: "CANCEL",
    CREDIT: "CREDIT",
}

# call kinds, in the flags of a REQUEST frame
UNARY = 0
SERVER_STREAM = 1
BIDI = 2

PROTOCOL_VERSION = 1
HEADER = struct.Struct("!IBBBBQI")
HEADER_BYTES = HEADER.size  # 20
FRAME_BYTES_MIN = HEADER_BYTES + 255
TIMEOUT_MS_MAX = 0xFFFFFFFF
HTTP2_PREFACE_START = b"PRI "


@dataclass(slots=True)
class Frame:
    """One decoded frame. ``payload`` is a copy owned by the frame."""

    kind: int
    flags: int
    codec_id: int
    call_id: int
    timeout_ms: int
    method: str
    payload: bytes


def encode_frame(
    kind: int,
    call_id: int,
    payload: bytes = b"",
    *,
    flags: int = 0,
    codec_id: int = 0,
    timeout_ms: int = 0,
    method: bytes = b"",
    frame_bytes_max: int,
) -> bytes:
    """The bytes of one frame; refuses (LocalUsageError FRAME_TOO_LARGE) an oversized one."""
    size = HEADER_BYTES + len(method) + len(payload)
    if size > frame_bytes_max:
        raise LocalUsageError(
            errors.FRAME_TOO_LARGE,
            f"{KIND_NAMES.get(kind, kind)} frame of {size} bytes exceeds the maximum frame size "
            f"of {frame_bytes_max} bytes (payload {len(payload)} bytes)",
        )
    header = HEADER.pack(size - 4, kind, flags, codec_id, len(method), call_id, timeout_ms)
    if method:
        return b"".join((header, method, payload))
    return header + payload


def encode_json(kind: int, call_id: int, document: dict[str, Any], frame_bytes_max: int) -> bytes:
    """A frame whose payload is a small JSON document (HELLO, WELCOME, connection ERROR)."""
    payload = json.dumps(document, separators=(",", ":")).encode()
    return encode_frame(kind, call_id, payload, frame_bytes_max=frame_bytes_max)


def decode_json(frame: Frame) -> dict[str, Any]:
    """The JSON document in ``frame``; a malformed one is a protocol violation."""
    try:
        document = json.loads(frame.payload)
    except ValueError as exc:
        raise violation(f"{KIND_NAMES[frame.kind]} payload is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise violation(f"{KIND_NAMES[frame.kind]} payload is not a JSON object")
    return document


def violation(message: str) -> RemoteProtocolError:
    """The error for a peer that broke the framing protocol."""
    return RemoteProtocolError(errors.PROTOCOL_VIOLATION, message)


class FrameDecoder:
    """Turns a byte stream into frames; feed it whatever the transport received.

    After it raises, the stream is unusable (the frame boundary is lost) and
    the connection must be closed.
    """

    __slots__ = ("_buffer", "frame_bytes_max")

    def __init__(self, frame_bytes_max: int) -> None:
        if frame_bytes_max < FRAME_BYTES_MIN:
            raise LocalUsageError(
                errors.BAD_REQUEST,
                f"frame_bytes_max must be at least {FRAME_BYTES_MIN}, not {frame_bytes_max}",
            )
        self.frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()

    @property
    def buffered_bytes(self) -> int:
        """Bytes received that do not make a whole frame yet."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Every whole frame that ``data`` completes, in order."""
        buffer = self._buffer
        buffer += data
        frames: list[Frame] = []
        offset = 0
        end = len(buffer)
        limit = self.frame_bytes_max
        unpack = HEADER.unpack_from
        view = memoryview(buffer)
        try:
            while end - offset >= 4:
                (length,) = struct.unpack_from("!I", buffer, offset)
                if length + 4 > limit:
                    if buffer[offset : offset + 4] == HTTP2_PREFACE_START:
                        raise violation(
                            "the peer speaks HTTP/2 (the grpc or http2 transport), "
                            "but this end uses the tcp transport"
                        )
                    raise RemoteProtocolError(
                        errors.FRAME_TOO_LARGE,
                        f"the peer sent a frame of {length + 4} bytes; the maximum frame size "
                        f"is {limit} bytes",
                    )
                if length + 4 < HEADER_BYTES:
                    raise violation(f"frame length {length + 4} is shorter than the header")
                if end - offset < length + 4:
                    break
                _, kind, flags, codec_id, method_len, call_id, timeout_ms = unpack(buffer, offset)
                if kind not in KIND_NAMES:
                    raise violation(f"unknown frame kind {kind}")
                start = offset + HEADER_BYTES
                stop = offset + 4 + length
                if method_len > stop - start:
                    raise violation(f"method length {method_len} runs past the end of the frame")
                if method_len:
                    raw_method = bytes(view[start : start + method_len])
                    method = _METHOD_NAMES.get(raw_method)
                    if method is None:
                        method = _method_name(raw_method)
                else:
                    method = ""
                frames.append(
                    Frame(
                        kind,
                        flags,
                        codec_id,
                        call_id,
                        timeout_ms,
                        method,
                        bytes(view[start + method_len : stop]),
                    )
                )
                offset = stop
        finally:
            view.release()
        if offset:
            del buffer[:offset]
        return frames


_METHOD_NAMES: dict[bytes, str] = {}


def _method_name(raw: bytes) -> str:
    """Decode a method name, remembering the first few hundred names seen."""
    try:
        method = raw.decode()
    except UnicodeDecodeError as exc:
        raise violation(f"method name is not UTF-8: {exc}") from exc
    if len(_METHOD_NAMES) < 1024:
        _METHOD_NAMES[raw] = method
    return method


def hello(codec: str, codec_id: int, transport: str, frame_bytes_max: int) -> bytes:
    """The client's first frame: who it is and how it speaks."""
    return encode_json(
        HELLO,
        0,
        {
            "angelia": PROTOCOL_VERSION,
            "codec": codec,
            "codec_id": codec_id,
            "transport": transport,
            "frame_bytes_max": frame_bytes_max,
        },
        frame_bytes_max,
    )


def check_hello(
    frame: Frame, codec: str, transport: str
) -> tuple[dict[str, Any], RemoteProtocolError | None]:
    """The client's HELLO document, and the refusal to send if it does not match this server."""
    if frame.kind != HELLO:
        raise violation(f"expected HELLO as the first frame, got {KIND_NAMES[frame.kind]}")
    document = decode_json(frame)
    if document.get("angelia") != PROTOCOL_VERSION:
        return document, violation(
            f"protocol version {document.get('angelia')!r} is not supported "
            f"(this end speaks {PROTOCOL_VERSION})"
        )
    if document.get("transport") != transport:
        return document, violation(
            f"the client uses the {document.get('transport')!r} transport, "
            f"this server uses {transport!r}"
        )
    if document.get("codec") != codec:
        return document, RemoteProtocolError(
            errors.CODEC_MISMATCH,
            f"the client uses the {document.get('codec')!r} codec, this server uses {codec!r}: "
            "every process of a cluster must use the same codec",
        )
    return document, None
