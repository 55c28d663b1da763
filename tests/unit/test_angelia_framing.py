"""Angelia framing: frames survive any split of the byte stream; violations are clear."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from angelia_rpc.errors import AngeliaError, LocalUsageError, RemoteProtocolError
from angelia_rpc.framing import (
    CANCEL,
    HEADER_BYTES,
    HELLO,
    MESSAGE,
    REQUEST,
    FrameDecoder,
    check_hello,
    encode_frame,
    hello,
)
from protocol import errors

LIMIT = 4096
frames = st.lists(
    st.tuples(
        st.sampled_from([REQUEST, MESSAGE, CANCEL]),
        st.integers(0, 2**64 - 1),
        st.binary(max_size=300),
        st.integers(0, 2),
        st.integers(0, 2**32 - 1),
        st.text(max_size=40).map(str.encode).filter(lambda m: len(m) < 256),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(frames=frames, cuts=st.lists(st.integers(0, 5000), max_size=10))
def test_frames_round_trip_across_any_split(
    frames: list[tuple[int, int, bytes, int, int, bytes]], cuts: list[int]
) -> None:
    stream = b"".join(
        encode_frame(kind, call_id, payload, flags=flags, codec_id=1, timeout_ms=timeout_ms,
                     method=method, frame_bytes_max=LIMIT)
        for kind, call_id, payload, flags, timeout_ms, method in frames
    )  # fmt: skip
    decoder = FrameDecoder(LIMIT)
    decoded = []
    start = 0
    for cut in [*sorted(c % (len(stream) + 1) for c in cuts), len(stream)]:
        decoded.extend(decoder.feed(stream[start:cut]))
        start = cut
    assert decoder.buffered_bytes == 0
    assert [
        (f.kind, f.call_id, f.payload, f.flags, f.timeout_ms, f.method.encode()) for f in decoded
    ] == list(frames)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200))
def test_garbage_raises_only_protocol_errors(data: bytes) -> None:
    decoder = FrameDecoder(LIMIT)
    error: AngeliaError | None = None
    try:
        decoder.feed(data)
    except AngeliaError as exc:
        error = exc
    if error is not None:
        assert isinstance(error, RemoteProtocolError)
        assert error.code in (errors.PROTOCOL_VIOLATION, errors.FRAME_TOO_LARGE)


def test_frame_at_the_limit_passes_and_one_byte_over_is_refused_both_ways() -> None:
    payload = b"p" * (LIMIT - HEADER_BYTES)
    frame = encode_frame(MESSAGE, 1, payload, frame_bytes_max=LIMIT)
    assert len(frame) == LIMIT
    assert FrameDecoder(LIMIT).feed(frame)[0].payload == payload
    with pytest.raises(LocalUsageError) as local:
        encode_frame(MESSAGE, 1, payload + b"!", frame_bytes_max=LIMIT)
    assert local.value.code is errors.FRAME_TOO_LARGE
    assert f"{LIMIT + 1} bytes" in local.value.message
    oversized = encode_frame(MESSAGE, 1, payload + b"!", frame_bytes_max=LIMIT + 1)
    with pytest.raises(RemoteProtocolError) as remote:
        FrameDecoder(LIMIT).feed(oversized[:10])  # refused from the header alone
    assert remote.value.code is errors.FRAME_TOO_LARGE


def test_http2_preface_names_the_transport_mismatch() -> None:
    with pytest.raises(RemoteProtocolError, match="speaks HTTP/2"):
        FrameDecoder(LIMIT).feed(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")


def test_unknown_kind_and_short_length_are_violations() -> None:
    with pytest.raises(RemoteProtocolError, match="unknown frame kind 99"):
        FrameDecoder(LIMIT).feed(b"\x00\x00\x00\x10" + bytes([99]) + b"\x00" * 15)
    with pytest.raises(RemoteProtocolError, match="shorter than the header"):
        FrameDecoder(LIMIT).feed(b"\x00\x00\x00\x02\x01\x01")


def test_hello_mismatches_are_named() -> None:
    decoder = FrameDecoder(LIMIT)
    (frame,) = decoder.feed(hello("json", 3, "tcp", LIMIT))
    assert frame.kind == HELLO
    assert check_hello(frame, "json", "tcp")[1] is None
    refusal = check_hello(frame, "msgpack", "tcp")[1]
    assert refusal is not None
    assert refusal.code is errors.CODEC_MISMATCH
    assert "'json' codec" in refusal.message
    assert "msgpack" in refusal.message
    transport = check_hello(frame, "json", "grpc")[1]
    assert transport is not None
    assert "'tcp' transport" in transport.message


def test_a_too_small_limit_is_refused() -> None:
    with pytest.raises(LocalUsageError, match="frame_bytes_max must be at least"):
        FrameDecoder(100)
