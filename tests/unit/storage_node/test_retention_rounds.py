"""A leader's retention rounds (``retention.GroupRetention`` and, with a tier,
``tier_plan.TierExpiry``): each proposes exactly what the walks over every queue
(``retention.plan``, ``tier_plan.plan_expiry``) propose at that moment, while
looking only at the queues that may have something to trim."""

from __future__ import annotations

import random
from collections.abc import Callable

from protocol.message_objects import ObjectEntry
from storage_node.partition.commands import (
    Command,
    DropTopic,
    RecordUpload,
    Tick,
    TrimQueue,
)
from storage_node.retention import GroupRetention, KeepFrom, TopicLimits, plan
from storage_node.tier_plan import TierExpiry, plan_expiry, upload_start

from .partition.harness import Harness, record

TOPICS = ("a", "b", "c", "d", "%DLQ%g")
QUEUES = 3
QueueId = tuple[str, int]


def _limits(rng: random.Random) -> TopicLimits:
    return TopicLimits(
        rng.choice((1, 2_000, 5_000, 20_000)),
        rng.choice((0, 0, 300, 900)),
        rng.choice((0, 1, 1_000)),
        rng.choice((0, 0, 200)),
    )


class Leader:
    """A group's leader planning rounds; with a tier (``tier``) its local trims follow
    the local limits and stop at the upload point, else at ``keep`` if given."""

    def __init__(self, h: Harness, tier: bool, keep: dict[QueueId, int] | None) -> None:
        self.h = h
        self.tier = tier
        self.keep = keep
        self.planner = GroupRetention()
        self.expiry = TierExpiry()

    def keep_from(self) -> Callable[[QueueId], int] | None:
        state, keep = self.h.state, self.keep
        if self.tier:
            return lambda queue: upload_start(state, queue)
        if keep is None:
            return None
        return lambda queue: keep.get(queue, 0)

    def round(self, topics: dict[str, TopicLimits], restore_while_listing: bool) -> list[Command]:
        """One round, checked against the full walks at the same moment."""
        h = self.h
        held_before = {topic for topic, _ in h.state.queue_ids()}
        self.planner.before_listing(h.state)
        self.expiry.before_listing(h.state)
        if restore_while_listing:  # a snapshot installed while the list is read: next round
            h.restart_from_snapshot()
            assert self.planner.plan(h.state, topics, h.now_ms, lambda _log_index: 0) == []
            assert self.expiry.plan(h.state, topics, h.now_ms) == []
            return []

        def entry_bytes(log_index: int) -> int:
            return len(h.log[log_index])

        local = {name: limits.local() for name, limits in topics.items()} if self.tier else topics
        keep_from: KeepFrom | None = self.keep_from()
        full_keep = None if keep_from is None else {q: keep_from(q) for q in h.state.queue_ids()}
        expected: list[Command] = [
            *plan(h.state, local, held_before, h.now_ms, entry_bytes, full_keep)
        ]
        got: list[Command] = [*self.planner.plan(h.state, local, h.now_ms, entry_bytes, keep_from)]
        if self.tier:
            expected += plan_expiry(h.state, topics, h.now_ms)
            got += self.expiry.plan(h.state, topics, h.now_ms)
        assert sorted(map(repr, got)) == sorted(map(repr, expected))
        return got

    def forget(self) -> None:
        self.planner.forget()
        self.expiry.forget()


def _upload(h: Harness, rng: random.Random, topic: str, queue_id: int) -> None:
    """Record an object of the queue's next offsets, as a leader's upload would."""
    queue = (topic, queue_id)
    start, end = upload_start(h.state, queue), h.state.end_offset(topic, queue_id)
    if start >= end or start < h.state.first_offset(topic, queue_id):
        return
    stop = rng.randint(start + 1, end)
    first, last = h.state.entry(topic, queue_id, start), h.state.entry(topic, queue_id, stop - 1)
    size = rng.choice((50, 150, 400))
    name = f"{topic}-{queue_id}-{start}"
    entry = ObjectEntry(
        name, start, stop, first.store_timestamp_ms, last.store_timestamp_ms, size, 0
    )
    h.apply(RecordUpload(h.now_ms, topic, queue_id, entry))


def _run(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    h = Harness()
    mode = rng.choice(("plain", "keep", "tier"))
    keep: dict[QueueId, int] | None = {} if mode == "keep" else None
    leader = Leader(h, mode == "tier", keep)
    topics = {topic: _limits(rng) for topic in TOPICS[:3]}
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
        elif step < 0.72:  # the upload points move (the tier's, or as given)
            topic, queue_id = rng.choice(TOPICS), rng.randrange(QUEUES)
            if mode == "tier":
                _upload(h, rng, topic, queue_id)
            elif keep is not None:
                keep[(topic, queue_id)] = h.state.end_offset(topic, queue_id) - rng.randint(0, 2)
        else:
            commands = leader.round(topics, rng.random() < 0.05)
            applied = rng.choice((len(commands), len(commands), rng.randint(0, len(commands))))
            for command in commands[:applied]:
                h.apply(command)
            if applied < len(commands):
                leader.forget()
            if any(isinstance(command, DropTopic) for command in commands[:applied]):
                h.state.check_invariants()  # the topics' queue counts among them
    h.state.check_invariants()


def test_rounds_propose_what_the_full_walk_proposes() -> None:
    for seed in range(40):
        try:
            _run(seed, 160)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from exc


def _idle_round(
    h: Harness, planner: GroupRetention, topics: dict[str, TopicLimits]
) -> list[TrimQueue | DropTopic]:
    held_before = {topic for topic, _ in h.state.queue_ids()}
    planner.before_listing(h.state)
    got = planner.plan(h.state, topics, h.now_ms, lambda _log_index: 0)
    assert got == plan(h.state, topics, held_before, h.now_ms, lambda _log_index: 0)
    return got


def test_idle_queues_are_looked_at_when_their_oldest_message_expires() -> None:
    h = Harness()
    for topic in range(50):  # 400 queues of one message each
        h.append(*(record(f"{topic}-{q}", topic=f"t{topic}", queue_id=q) for q in range(8)))
    topics = {f"t{topic}": TopicLimits(60_000) for topic in range(50)}
    planner = GroupRetention()
    assert _idle_round(h, planner, topics) == []
    assert planner.queues_looked == 400  # the first round looks at every queue
    h.advance(30_000)
    h.append(record("late", topic="t0", queue_id=0))
    assert _idle_round(h, planner, topics) == []
    assert planner.queues_looked == 0  # the append to a queue that held one changes nothing
    h.advance(30_001)
    commands = _idle_round(h, planner, topics)
    assert len(commands) == 400
    assert planner.queues_looked == 400
    for command in commands:
        h.apply(command)
    assert _idle_round(h, planner, topics) == []
    assert planner.queues_looked == 400  # each trimmed queue filed again: one is not empty
    assert _idle_round(h, planner, topics) == []
    assert planner.queues_looked == 0
    h.advance(30_000)
    assert len(_idle_round(h, planner, topics)) == 1
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
