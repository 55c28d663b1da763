"""The frame repr h2 builds for every received frame reads only the bytes it shows."""

from __future__ import annotations

import binascii

from hyperframe.frame import DataFrame
from hypothesis import given, settings
from hypothesis import strategies as st

from angelia_rpc.transport.h2_frames import data_repr


def _hyperframe_original(data: bytes | None) -> str:
    """hyperframe 6.1's ``_raw_data_repr``, which hexlifies all of ``data``."""
    if not data:
        return "None"
    r = binascii.hexlify(data).decode("ascii")
    if len(r) > 20:
        r = r[:20] + "..."
    return "<hex:" + r + ">"


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.one_of(st.none(), st.binary(max_size=40)))
def test_the_text_is_hyperframes(data: bytes | None) -> None:
    assert data_repr(data) == _hyperframe_original(data)


def test_a_data_frame_repr_uses_it() -> None:
    frame = DataFrame(1, data=bytes(range(200)) * 5000)  # 1 MB: not hexlified any more
    assert "<hex:00010203040506070809...>" in repr(frame)
