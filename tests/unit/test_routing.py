"""protocol.routing: the queue -> group function every process must agree on."""

from __future__ import annotations

import zlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import routing
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


def test_ordinary_queues_hash_into_the_clusters_group_ids() -> None:
    assert routing.queue_ids("orders", 3, 10, 4) == range(3)
    for queue_id in range(3):
        assert routing.group_id("orders", queue_id, 10, 4) == 10 + group_index(
            "orders", queue_id, 4
        )


def test_dead_letter_queue_ids_are_the_group_ids() -> None:
    # A storage group dead-letters into its own queue of %DLQ%<group>.
    assert routing.is_dead_letter_topic("%DLQ%GID_a")
    assert not routing.is_dead_letter_topic("%RETRY%GID_a")
    assert routing.queue_ids("%DLQ%GID_a", 1, 10, 4) == range(10, 14)
    assert [routing.group_id("%DLQ%GID_a", q, 10, 4) for q in range(10, 14)] == [10, 11, 12, 13]
    with pytest.raises(ValueError, match=r"group ids 10\.\.13, not 14"):
        routing.group_id("%DLQ%GID_a", 14, 10, 4)
