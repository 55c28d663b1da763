"""protocol.routing: the queue -> group function every process must agree on."""

from __future__ import annotations

import zlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.routing import QUEUE_ID_MAX, group_index


def test_values_are_pinned() -> None:
    # FROZEN: these values are the cluster's layout; a change here moves queues.
    assert group_index("orders", 0, 64) == 45
    assert group_index("orders", 1, 64) == 59
    assert group_index("TopicTest", 7, 1024) == 631
    assert group_index("%RETRY%GID_x", 0, 3) == 1
    assert group_index("主题", 2, 100) == 71


def test_index_is_crc32_of_the_documented_key() -> None:
    key = b"orders" + b"\x00" + (300).to_bytes(4, "big")
    assert group_index("orders", 300, 1000) == zlib.crc32(key) % 1000


@settings(deadline=None)
@given(st.text(max_size=127), st.integers(0, QUEUE_ID_MAX), st.integers(1, 100_000))
def test_index_is_in_range(topic: str, queue_id: int, group_count: int) -> None:
    assert 0 <= group_index(topic, queue_id, group_count) < group_count


def test_queues_of_a_topic_spread_over_groups() -> None:
    counts = Counter(group_index("orders", q, 16) for q in range(1600))
    assert len(counts) == 16
    assert max(counts.values()) < 2 * min(counts.values())


@pytest.mark.parametrize(("queue_id", "group_count"), [(-1, 4), (QUEUE_ID_MAX + 1, 4), (0, 0)])
def test_bad_arguments_are_refused(queue_id: int, group_count: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        group_index("t", queue_id, group_count)
