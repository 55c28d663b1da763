"""HTTP/2 frames as gRPC uses them (RFC 9113): splitting, building, and header literals.

The frame codec under ``protocol.http2_connection`` (the sans-IO connection
of the broker's gRPC server and Angelia's http2 transport) and the load
generator's lean client. HPACK decoding, which keeps the dynamic table, is
``protocol.hpack_decoder``; what this module encodes are literals that never
touch a table
(RFC 7541 section 6.2.2, "without indexing", no Huffman), so an encoder
needs no state and a decoder's table is never changed by them.

PURE.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY_FRAME, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9

END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY = 0x20

SETTINGS_HEADER_TABLE_SIZE = 0x1
SETTINGS_ENABLE_PUSH = 0x2
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5

NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9

WINDOW_MAX = 2**31 - 1
DEFAULT_WINDOW = 65_535
DEFAULT_FRAME_BYTES = 16_384
FRAME_HEADER_BYTES = 9
FRAME_BYTES_LIMIT = 2**24 - 1
"""The largest SETTINGS_MAX_FRAME_SIZE a peer may announce."""

_FRAME = struct.Struct(">I B I")  # (length << 8 | type), flags, stream id
_SETTING = struct.Struct(">HI")
U32 = struct.Struct(">I")

Frame = tuple[int, int, int, bytes]
"""(type, flags, stream id, payload)."""


class FrameError(Exception):
    """The peer broke the framing; ``code`` is the HTTP/2 error code for its GOAWAY."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def frame(kind: int, flags: int, stream_id: int, payload: bytes | bytearray = b"") -> bytes:
    """One frame's bytes."""
    return _FRAME.pack(len(payload) << 8 | kind, flags, stream_id) + payload


def split_frames(buffer: bytearray, frame_bytes_max: int) -> list[Frame]:
    """Take the whole frames off the front of ``buffer``; a partial one stays.

    Raises FrameError (FRAME_SIZE_ERROR) for a frame longer than ``frame_bytes_max``.
    """
    frames: list[Frame] = []
    start = 0
    size = len(buffer)
    while size - start >= FRAME_HEADER_BYTES:
        head, flags, stream_id = _FRAME.unpack_from(buffer, start)
        length = head >> 8
        if length > frame_bytes_max:
            raise FrameError(
                FRAME_SIZE_ERROR, f"a frame of {length} bytes is over the {frame_bytes_max} allowed"
            )
        end = start + FRAME_HEADER_BYTES + length
        if end > size:
            break
        frames.append(
            (
                head & 0xFF,
                flags,
                stream_id & 0x7FFFFFFF,
                bytes(buffer[start + FRAME_HEADER_BYTES : end]),
            )
        )
        start = end
    del buffer[:start]
    return frames


def unpadded(flags: int, payload: bytes) -> bytes:
    """A DATA or HEADERS payload without its padding (PADDED flag)."""
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise FrameError(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1 : len(payload) - payload[0]]


def header_fragment(flags: int, payload: bytes) -> bytes:
    """A HEADERS frame's block fragment: without padding and priority fields."""
    payload = unpadded(flags, payload)
    if flags & PRIORITY:
        if len(payload) < 5:
            raise FrameError(FRAME_SIZE_ERROR, "a HEADERS frame too short for its priority")
        return payload[5:]
    return payload


def settings_payload(settings: Iterable[tuple[int, int]]) -> bytes:
    """A SETTINGS frame's payload."""
    return b"".join(_SETTING.pack(key, value) for key, value in settings)


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    """The (identifier, value) pairs of a SETTINGS payload."""
    if len(payload) % 6:
        raise FrameError(FRAME_SIZE_ERROR, "a SETTINGS payload is not a multiple of 6 bytes")
    return [_SETTING.unpack_from(payload, offset) for offset in range(0, len(payload), 6)]


def hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 5.1) whose first byte carries ``first``'s high bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: bytes, value: bytes) -> bytes:
    """A header field as a literal without indexing, with a literal name (no Huffman)."""
    return b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


def header_block(fields: Iterable[tuple[bytes, bytes]]) -> bytes:
    """A header block of ``fields``, each a literal without indexing (see :func:`literal`)."""
    return b"".join(literal(name, value) for name, value in fields)


def literal_indexed_name(name_index: int, value: bytes) -> bytes:
    """A literal without indexing whose name is entry ``name_index`` of the static table."""
    return hpack_int(name_index, 4) + hpack_int(len(value), 7) + value


def header_frames(stream_id: int, block: bytes, end_stream: bool, frame_bytes_max: int) -> bytes:
    """A header block as HEADERS, then CONTINUATION frames if it is over ``frame_bytes_max``."""
    first, rest = block[:frame_bytes_max], block[frame_bytes_max:]
    flags = END_STREAM if end_stream else 0
    if not rest:
        return frame(HEADERS, flags | END_HEADERS, stream_id, first)
    parts = [frame(HEADERS, flags, stream_id, first)]
    while rest:
        chunk, rest = rest[:frame_bytes_max], rest[frame_bytes_max:]
        parts.append(frame(CONTINUATION, 0 if rest else END_HEADERS, stream_id, chunk))
    return b"".join(parts)
