"""Random and mutated frame sequences into a server-side Http2Connection (Hypothesis,
derandomized, a bounded budget; ``RIP5_FUZZ_EXAMPLES`` for a long run).

Whatever the bytes, ``receive_data`` returns events or raises ``FrameError`` (never
another exception); after a FrameError the connection has queued a GOAWAY naming the
error and takes nothing more; what it queues to send is always whole frames.
"""

from __future__ import annotations

import os

import hpack
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import http2
from protocol.http2_connection import Http2Connection
from tests.fuzzing import REQUEST_HEADERS

FUZZ_EXAMPLES = int(os.environ.get("RIP5_FUZZ_EXAMPLES", "400"))
REQUEST = [*REQUEST_HEADERS, (b"x-mq-client-id", b"fuzz")]
KINDS = [
    http2.DATA,
    http2.HEADERS,
    0x02,  # PRIORITY (the module names its flag, not its frame type)
    http2.RST_STREAM,
    http2.SETTINGS,
    http2.PUSH_PROMISE,
    http2.PING,
    http2.GOAWAY,
    http2.WINDOW_UPDATE,
    http2.CONTINUATION,
    0x0A,  # an unknown type
]


def _valid_opening() -> list[bytes]:
    """A client's preface, SETTINGS and one call (headers, a message, its end)."""
    block = hpack.Encoder().encode(REQUEST)
    message = b"\0\0\0\0\5hello"
    return [
        http2.PREFACE,
        http2.frame(http2.SETTINGS, 0, 0, http2.settings_payload([(4, 1 << 20)])),
        http2.frame(http2.HEADERS, http2.END_HEADERS, 1, block),
        http2.frame(http2.DATA, http2.END_STREAM, 1, message),
    ]


FRAMES = st.builds(
    http2.frame,
    st.sampled_from(KINDS),
    st.integers(0, 255),
    st.sampled_from([0, 1, 2, 3, 5, 7, 0x7FFFFFFF]),
    st.binary(max_size=64),
)


@st.composite
def _inputs(draw: st.DrawFn) -> list[bytes]:
    """The valid opening (whole, mutated or cut short) then random frames, as chunks."""
    opening = _valid_opening()
    keep = draw(st.integers(0, len(opening)))
    data = bytearray(b"".join(opening[:keep]))
    if data and draw(st.booleans()):
        for _ in range(draw(st.integers(1, 3))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    data += b"".join(draw(st.lists(FRAMES, max_size=8)))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=4)))
    chunks, start = [], 0
    for cut in [*cuts, len(data)]:
        chunks.append(bytes(data[start:cut]))
        start = cut
    return chunks


def _whole_frames(data: bytes) -> list[http2.Frame]:
    buffer = bytearray(data)
    frames = http2.split_frames(buffer, http2.FRAME_BYTES_LIMIT)
    assert not buffer, "a partial frame was queued"
    return frames


@settings(max_examples=FUZZ_EXAMPLES, derandomize=True, deadline=None, database=None)
@given(chunks=_inputs())
def test_any_bytes_give_events_or_a_connection_error_with_goaway(chunks: list[bytes]) -> None:
    server = Http2Connection(client_side=False, window_bytes=1 << 20, frame_bytes_max=1 << 20)
    server.initiate()
    _whole_frames(server.data_to_send())
    failure: http2.FrameError | None = None
    for chunk in chunks:
        try:
            server.receive_data(chunk)
        except http2.FrameError as error:
            failure = error
            break
        _whole_frames(server.data_to_send())
    if failure is None:
        return
    frames = _whole_frames(server.data_to_send())
    assert frames, "no GOAWAY after a connection error"
    kind, _flags, stream_id, payload = frames[-1]
    assert (kind, stream_id) == (http2.GOAWAY, 0)
    assert http2.U32.unpack_from(payload, 4)[0] == failure.code
    assert server.receive_data(b"\0" * 9) == []  # takes nothing more
