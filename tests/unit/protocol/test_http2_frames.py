"""protocol.http2: frames split and built, header literals any HPACK decoder reads."""

from __future__ import annotations

import hpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import http2


def test_whole_frames_are_taken_and_a_partial_one_stays() -> None:
    first = http2.frame(http2.PING, 0, 0, b"12345678")
    second = http2.frame(http2.DATA, http2.END_STREAM, 3, b"hello")
    buffer = bytearray(first + second[:7])
    assert http2.split_frames(buffer, 16_384) == [(http2.PING, 0, 0, b"12345678")]
    assert buffer == second[:7]
    buffer += second[7:]
    assert http2.split_frames(buffer, 16_384) == [(http2.DATA, http2.END_STREAM, 3, b"hello")]
    assert buffer == b""


def test_the_reserved_bit_of_a_stream_id_is_ignored() -> None:
    raw = bytearray(http2.frame(http2.DATA, 0, 5, b"x"))
    raw[5] |= 0x80
    assert http2.split_frames(raw, 16_384) == [(http2.DATA, 0, 5, b"x")]


def test_a_frame_over_the_limit_is_a_frame_size_error() -> None:
    buffer = bytearray(http2.frame(http2.DATA, 0, 1, b"x" * 101)[:9])  # its header is enough
    with pytest.raises(http2.FrameError) as caught:
        http2.split_frames(buffer, 100)
    assert caught.value.code == http2.FRAME_SIZE_ERROR


def test_padding_and_priority_are_taken_off() -> None:
    padded = bytes([3]) + b"data" + b"\0\0\0"
    assert http2.unpadded(http2.PADDED, padded) == b"data"
    assert http2.unpadded(0, padded) == padded
    with_priority = bytes([2]) + b"\0\0\0\1\x10" + b"block" + b"\0\0"
    assert http2.header_fragment(http2.PADDED | http2.PRIORITY, with_priority) == b"block"
    with pytest.raises(http2.FrameError):
        http2.unpadded(http2.PADDED, bytes([9]) + b"short")
    with pytest.raises(http2.FrameError):
        http2.unpadded(http2.PADDED, b"")
    with pytest.raises(http2.FrameError):
        http2.header_fragment(http2.PRIORITY, b"abc")


def test_settings_round_trip_and_a_ragged_payload_is_refused() -> None:
    pairs = [(http2.SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20), (http2.SETTINGS_MAX_FRAME_SIZE, 16_384)]
    assert http2.parse_settings(http2.settings_payload(pairs)) == pairs
    with pytest.raises(http2.FrameError) as caught:
        http2.parse_settings(b"\0\4\0\0\0")
    assert caught.value.code == http2.FRAME_SIZE_ERROR


@given(st.integers(0, 2**31), st.sampled_from([4, 5, 6, 7]))
def test_hpack_integers_match_the_rfc_7541_examples_and_round_trip(value: int, bits: int) -> None:
    encoded = http2.hpack_int(value, bits)
    prefix = (1 << bits) - 1
    decoded = encoded[0] & prefix
    if decoded == prefix:
        shift = 0
        decoded = 0
        for byte in encoded[1:]:
            decoded |= (byte & 0x7F) << shift
            shift += 7
        decoded += prefix
    assert decoded == value
    assert http2.hpack_int(10, 5) == b"\x0a"  # RFC 7541 C.1.1
    assert http2.hpack_int(1337, 5) == b"\x1f\x9a\x0a"  # C.1.2


@given(
    st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=40).map(lambda b: b.lower()),
            st.binary(max_size=300),
        ),
        max_size=6,
    )
)
def test_literals_decode_with_hpack_and_leave_its_table_empty(
    fields: list[tuple[bytes, bytes]],
) -> None:
    decoder = hpack.Decoder()
    block = b"".join(http2.literal(name, value) for name, value in fields)
    block += http2.literal_indexed_name(31, b"application/grpc")
    decoded = decoder.decode(block, raw=True)
    assert [tuple(field) for field in decoded] == [*fields, (b"content-type", b"application/grpc")]
    assert len(decoder.header_table.dynamic_entries) == 0


def test_a_long_header_block_goes_out_as_headers_and_continuations() -> None:
    block = http2.literal(b"grpc-message", b"m" * 40_000)
    raw = bytearray(http2.header_frames(7, block, True, 16_384))
    frames = http2.split_frames(raw, 16_384)
    assert [(kind, flags, stream) for kind, flags, stream, _ in frames] == [
        (http2.HEADERS, http2.END_STREAM, 7),
        (http2.CONTINUATION, 0, 7),
        (http2.CONTINUATION, http2.END_HEADERS, 7),
    ]
    assert b"".join(payload for *_, payload in frames) == block
    short = http2.header_frames(7, b"\x88", False, 16_384)
    assert http2.split_frames(bytearray(short), 16_384) == [
        (http2.HEADERS, http2.END_HEADERS, 7, b"\x88")
    ]
