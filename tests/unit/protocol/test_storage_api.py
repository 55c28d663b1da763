"""The storage API's own types: the two forms of an append's answer."""

from __future__ import annotations

import pytest

from angelia_rpc.codec import CODEC_NAMES, codec_named
from protocol.storage_api import AppendOutcome, AppendResponse


def test_the_queued_form_reads_as_the_listed_outcomes_it_stands_for() -> None:
    queued = AppendResponse([], 1_000, ["a", "b", "c"], 7)
    listed = AppendResponse(
        [AppendOutcome("a", 0, 7, False), AppendOutcome("b", 0, 8, False)], 1_000
    )
    assert queued.outcomes == [
        AppendOutcome("a", 0, 7, False),
        AppendOutcome("b", 0, 8, False),
        AppendOutcome("c", 0, 9, False),
    ]
    assert listed.outcomes == listed.listed
    assert AppendResponse([], 1_000).outcomes == []


@pytest.mark.parametrize("codec_name", CODEC_NAMES)
@pytest.mark.parametrize(
    "response",
    [
        AppendResponse([], 5, ["x", "y"], 0),
        AppendResponse([AppendOutcome("x", 1, -1, False), AppendOutcome("y", 0, 3, True)], 5),
    ],
)
def test_both_forms_cross_every_codec(codec_name: str, response: AppendResponse) -> None:
    codec = codec_named(codec_name)
    decoded = codec.decoder(AppendResponse)(codec.encoder(AppendResponse)(response))
    assert decoded == response
    assert decoded.outcomes == response.outcomes
