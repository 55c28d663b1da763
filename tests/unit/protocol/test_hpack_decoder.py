"""protocol.hpack_decoder: RFC 7541's examples, and every block the hpack library encodes."""

from __future__ import annotations

import re

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import http2
from protocol.hpack_decoder import HpackDecoder


def test_the_rfc_examples_of_requests_without_and_with_huffman() -> None:
    # RFC 7541 C.3 (literals) and C.4 (Huffman): three requests on one connection.
    for blocks in (
        [
            "828684410f7777772e6578616d706c652e636f6d",
            "828684be58086e6f2d6361636865",
            "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
        ],
        [
            "828684418cf1e3c2e5f23a6ba0ab90f4ff",
            "828684be5886a8eb10649cbf",
            "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
        ],
    ):
        decoder = HpackDecoder()
        first, second, third = (decoder.decode(bytes.fromhex(block)) for block in blocks)
        assert first == [
            (b":method", b"GET"),
            (b":scheme", b"http"),
            (b":path", b"/"),
            (b":authority", b"www.example.com"),
        ]
        assert second == [*first, (b"cache-control", b"no-cache")]
        assert third == [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":path", b"/index.html"),
            (b":authority", b"www.example.com"),
            (b"custom-key", b"custom-value"),
        ]
        assert decoder.table == [
            (b"custom-key", b"custom-value"),
            (b"cache-control", b"no-cache"),
            (b":authority", b"www.example.com"),
        ]


def test_entries_are_evicted_oldest_first_and_a_size_update_shrinks_the_table() -> None:
    decoder = HpackDecoder(table_bytes_max=100)
    field = (b"k" * 10, b"v" * 20)  # 62 bytes as an entry: one fits, not two
    block = b"\x40" + http2.hpack_int(10, 7) + field[0] + http2.hpack_int(20, 7) + field[1]
    assert decoder.decode(block) == [field]
    assert decoder.decode(block.replace(b"v" * 20, b"w" * 20)) == [(field[0], b"w" * 20)]
    assert decoder.table == [(field[0], b"w" * 20)]
    assert decoder.decode(b"\xbe") == [(field[0], b"w" * 20)]  # index 62: the newest
    assert decoder.decode(b"\x20") == []  # a size update to 0 empties it
    assert decoder.table == []
    big = b"\x40" + http2.hpack_int(10, 7) + b"k" * 10 + http2.hpack_int(200, 7) + b"v" * 200
    decoder = HpackDecoder(table_bytes_max=100)
    assert decoder.decode(big) == [(b"k" * 10, b"v" * 200)]  # too big for the table: not kept
    assert decoder.table == []


_names = st.binary(min_size=1, max_size=20).map(lambda b: b.lower())
_fields = st.lists(st.tuples(_names, st.binary(max_size=300)), max_size=12)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    st.lists(
        st.tuples(_fields, st.booleans(), st.sampled_from([None, 0, 256, 4096])),
        min_size=1,
        max_size=6,
    )
)
def test_every_block_of_the_hpack_library_decodes_as_its_own_decoder_does(
    blocks: list[tuple[list[tuple[bytes, bytes]], bool, int | None]],
) -> None:
    encoder, reference, decoder = hpack.Encoder(), hpack.Decoder(), HpackDecoder()
    for fields, huffman, table_size in blocks:
        if table_size is not None:
            encoder.header_table_size = table_size  # the next block opens with a size update
        block = encoder.encode(fields, huffman=huffman)
        assert decoder.decode(block) == fields == reference.decode(block, raw=True)
    assert decoder.table == [(n, v) for n, v in reference.header_table.dynamic_entries]


@pytest.mark.parametrize(
    ("block", "cause"),
    [
        (b"\x80", "index 0"),
        (b"\xbe", "index 62"),
        (b"\xff\xff\xff\xff\xff\x0f", "over 2**28"),
        (b"\x00\x05ab", "inside a string"),
        (b"\x00\x03abc", "inside a field"),
        (b"\x82\x20", "after a header field"),
        (b"\x3f\xe2\x1f", "over the 4096 allowed"),
        (b"\x00\x81\xff\x00", "a header block"),  # Huffman code of all ones: EOS
        (b"\x00\x01a" + http2.hpack_int(66_000, 7) + b"v" * 66_000, "a header list of"),
    ],
)
def test_a_bad_block_is_a_compression_error_naming_its_cause(block: bytes, cause: str) -> None:
    with pytest.raises(http2.FrameError, match=re.escape(cause)) as caught:
        HpackDecoder().decode(block)
    assert caught.value.code == http2.COMPRESSION_ERROR
