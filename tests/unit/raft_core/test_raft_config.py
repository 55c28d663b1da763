"""Config validation names the option that cannot work."""

from __future__ import annotations

import pytest

from raft.core.config import Config
from raft.errors import InvalidConfig


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"id": 0}, "id must be positive"),
        ({"id": 1, "heartbeat_tick": 0}, "heartbeat_tick"),
        ({"id": 1, "election_tick": 1}, "election_tick"),
        ({"id": 1, "max_inflight_msgs": 0}, "max_inflight_msgs"),
        ({"id": 1, "max_size_per_msg_bytes": 0}, "max_size_per_msg_bytes"),
        ({"id": 1, "max_committed_size_per_ready_bytes": 0}, "max_committed_size"),
        ({"id": 1, "applied": -1}, "must not be negative"),
    ],
)
def test_bad_options_are_named(options: dict[str, int], named: str) -> None:
    with pytest.raises(InvalidConfig, match=named) as info:
        Config(**options).validate()  # type: ignore[arg-type]
    assert not info.value.retriable


def test_defaults_are_valid() -> None:
    Config(id=7).validate()
