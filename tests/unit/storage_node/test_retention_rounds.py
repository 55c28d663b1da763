"""A leader's retention rounds (storage_node.retention.GroupRetention): each proposes
exactly what the walk over every queue (``retention.plan``) proposes at that moment,
while looking only at the queues that may have something to trim."""

from __future__ import annotations

import random

from storage_node.partition.commands import DropTopic, Tick, TrimQueue
from storage_node.retention import GroupRetention, TopicLimits, plan

from .partition.harness import Harness, record

TOPICS = ("a", "b", "c", "d", "%DLQ%g")
QUEUES = 3


def _limits(rng: random.Random) -> TopicLimits:
    return TopicLimits(rng.choice((1, 2_000, 5_000, 20_000)), rng.choice((0, 0, 300, 900)))


def _round(
    h: Harness,
    planner: GroupRetention,
    topics: dict[str, TopicLimits],
    keep: dict[tuple[str, int], int] | None,
    restore_while_listing: bool = False,
) -> list[TrimQueue | DropTopic]:
    """One round, checked against the full walk at the same moment."""
    held_before = {topic for topic, _ in h.state.queue_ids()}
    planner.before_listing(h.state)
    if restore_while_listing:  # a snapshot installed while the list is read: next round
        h.restart_from_snapshot()
        assert planner.plan(h.state, topics, h.now_ms, lambda _log_index: 0) == []
        return []

    def entry_bytes(log_index: int) -> int:
        return len(h.log[log_index])

    full_keep = None if keep is None else {q: keep.get(q, 0) for q in h.state.queue_ids()}
    expected = plan(h.state, topics, held_before, h.now_ms, entry_bytes, full_keep)
    got = planner.plan(
        h.state,
        topics,
        h.now_ms,
        entry_bytes,
        None if keep is None else (lambda queue: keep.get(queue, 0)),
    )
    assert sorted(map(repr, got)) == sorted(map(repr, expected))
    return got


def _run(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    h = Harness()
    planner = GroupRetention()
    topics = {topic: _limits(rng) for topic in TOPICS[:3]}
    keep: dict[tuple[str, int], int] | None = {} if rng.random() < 0.5 else None
    serial = 0
    for _ in range(steps):
        step = rng.random()
        if step < 0.35:  # appends, some delayed, some to several queues
            records = []
            for _ in range(rng.randint(1, 4)):
                serial += 1
                delayed = rng.random() < 0.15
                records.append(
                    record(
                        f"m{serial}",
                        topic=rng.choice(TOPICS),
                        queue_id=rng.randrange(QUEUES),
                        body=b"x" * rng.choice((10, 100, 400)),
                        delivery_timestamp_ms=h.now_ms + 3_000 if delayed else 0,
                    )
                )
            h.append(*records)
        elif step < 0.55:
            h.advance(rng.choice((1, 500, 1_000, 1_999, 4_000)))
            h.apply(Tick(h.now_ms))
        elif step < 0.58:  # a trim from elsewhere (an operator)
            topic, queue_id = rng.choice(TOPICS), rng.randrange(QUEUES)
            first = h.state.first_offset(topic, queue_id)
            h.apply(TrimQueue(h.now_ms, topic, queue_id, first + rng.randint(1, 3)))
        elif step < 0.60:
            h.apply(DropTopic(h.now_ms, rng.choice(TOPICS)))
        elif step < 0.615:
            h.restart_from_snapshot()
        elif step < 0.65:  # the listing: a new copy, a limit changed, a topic deleted/created
            topics = dict(topics)
            topic = rng.choice(TOPICS)  # the system topic too: listed, it is trimmed
            if rng.random() < 0.3:
                topics.pop(topic, None)
            elif rng.random() < 0.5:
                topics[topic] = _limits(rng)
        elif step < 0.72 and keep is not None:  # the tier's upload points move
            topic, queue_id = rng.choice(TOPICS), rng.randrange(QUEUES)
            keep[(topic, queue_id)] = h.state.end_offset(topic, queue_id) - rng.randint(0, 2)
        else:
            commands = _round(h, planner, topics, keep, rng.random() < 0.05)
            applied = rng.choice((len(commands), len(commands), rng.randint(0, len(commands))))
            for command in commands[:applied]:
                h.apply(command)
            if applied < len(commands):
                planner.forget()
            if any(isinstance(command, DropTopic) for command in commands[:applied]):
                h.state.check_invariants()  # the topics' queue counts among them
    h.state.check_invariants()


def test_rounds_propose_what_the_full_walk_proposes() -> None:
    for seed in range(40):
        try:
            _run(seed, 160)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from exc


def test_idle_queues_are_looked_at_when_their_oldest_message_expires() -> None:
    h = Harness()
    for topic in range(50):  # 400 queues of one message each
        h.append(*(record(f"{topic}-{q}", topic=f"t{topic}", queue_id=q) for q in range(8)))
    topics = {f"t{topic}": TopicLimits(60_000) for topic in range(50)}
    planner = GroupRetention()
    assert _round(h, planner, topics, None) == []
    assert planner.queues_looked == 400  # the first round looks at every queue
    h.advance(30_000)
    h.append(record("late", topic="t0", queue_id=0))
    assert _round(h, planner, topics, None) == []
    assert planner.queues_looked == 0  # the append to a queue that held one changes nothing
    h.advance(30_001)
    commands = _round(h, planner, topics, None)
    assert len(commands) == 400
    assert planner.queues_looked == 400
    for command in commands:
        h.apply(command)
    assert _round(h, planner, topics, None) == []
    assert planner.queues_looked == 400  # each trimmed queue filed again: one is not empty
    assert _round(h, planner, topics, None) == []
    assert planner.queues_looked == 0
    h.advance(30_000)
    assert len(_round(h, planner, topics, None)) == 1
    assert planner.queues_looked == 1


def test_the_changes_are_not_kept_past_a_quarter_of_the_queues() -> None:
    h = Harness()
    h.append(*(record(f"m{q}", queue_id=q) for q in range(400)))
    assert h.state.take_retention_changes() is None  # nobody asked before
    h.append(*(record(f"n{q}", queue_id=q) for q in range(100)))
    assert h.state.take_retention_changes() == dict.fromkeys(
        (("orders", q) for q in range(100)), False
    )
    h.append(*(record(f"o{q}", queue_id=q) for q in range(100 + 65)))
    assert h.state.take_retention_changes() is None  # too many: look at every queue
