"""broker.processor.replica_reads: round-robin replicas per group, for configured topics;
a follower behind the offset asked does not answer."""

from __future__ import annotations

from collections import Counter

from broker.processor.replica_reads import ReadSpread, usable_answer


def test_reads_of_a_configured_topic_go_round_robin_over_every_replica() -> None:
    spread = ReadSpread(frozenset({"hot"}))
    assert spread.spreads("hot")
    assert not spread.spreads("cold")
    replicas = ["h:3", "h:1", "h:2"]
    picks = Counter(spread.pick(7, replicas) for _ in range(30))
    assert picks == {"h:1": 10, "h:2": 10, "h:3": 10}
    # Groups take turns independently.
    assert spread.pick(8, replicas) == "h:1"
    assert spread.pick(8, replicas) == "h:2"
    assert spread.pick(9, []) is None


def test_a_follower_answers_only_from_offsets_it_has_applied() -> None:
    assert usable_answer(requested_offset=10, end_offset=10)
    assert usable_answer(requested_offset=10, end_offset=42)
    assert not usable_answer(requested_offset=10, end_offset=9)
