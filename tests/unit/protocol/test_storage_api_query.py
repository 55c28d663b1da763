"""The storage API's message query and consumer progress types cross every codec."""

from __future__ import annotations

import pytest

from angelia_rpc.codec import CODEC_NAMES, codec_named
from protocol import storage_api as st

VALUES: list[object] = [
    st.QueryMessagesRequest(3),
    st.QueryMessagesRequest(3, "t", "", "k", 1_000, 2_000, 5),
    st.QueryMessagesRequest(3, message_id="01AB"),
    st.QueryMessagesResponse(
        [
            st.StoredMessage(
                7,
                1_700_000_000_000,
                st.Message("t", 1, "01AB", b"body", "tag", ["k1", "k2"], properties={"a": "b"}),
            )
        ],
        1024,
        False,
    ),
    st.QueryMessagesResponse([], 0, True),
    st.GroupProgressRequest(2, "g"),
    st.GroupProgressRequest(2, "g", "t"),
    st.GroupProgressResponse(
        [
            st.QueueProgress("t", 0, 0, 10, 4, 2, 6, 1_700_000_000_000),
            st.QueueProgress("t", 1, 3, 3, -1, 0, 0, -1),
        ]
    ),
]


@pytest.mark.parametrize("codec_name", CODEC_NAMES)
@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_query_and_progress_types_cross_every_codec(codec_name: str, value: object) -> None:
    codec = codec_named(codec_name)
    kind = type(value)
    assert codec.decoder(kind)(codec.encoder(kind)(value)) == value
