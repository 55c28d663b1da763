"""The consumer figures kept by what changed equal a walk over every group queue.

Seeded random command sequences over two partitions summed into one
``ConsumerTotals`` (as a node sums the groups it leads): appends (plain and
delayed), receives (FIFO or not, dead letters at the last attempt), acks,
releases, changes of invisibility, dead letters, offset commits and resets,
trims, topic drops, snapshot and restore, losing and regaining the lead, and the
clock moving (leases ending, timers released). After every step the kept figures
equal the walk's (``consumer_walk.consumer_figures``, the oracle). A failure
names its seed.
"""

from __future__ import annotations

import contextlib
import random

import pytest

from protocol.records import MessageRecord
from protocol.routing import RETRY_TOPIC_PREFIX
from protocol.storage_api import ReceiptHandle
from protocol.vocabulary import MessageType
from storage_node.errors import StorageError
from storage_node.partition import commands as c
from storage_node.partition.config import PartitionConfig
from storage_node.partition.consumer_tally import ConsumerTotals
from storage_node.partition.results import ReceiveResult
from storage_node.partition.snapshot import restore, take_snapshot
from storage_node.partition.state import PartitionState

from ..consumer_walk import consumer_figures

SEEDS = 16
STEPS = 200
GROUPS = ("g1", "g2")
TOPICS = ("t0", "t1", f"{RETRY_TOPIC_PREFIX}g1")


class Partition:
    """One raft group's state as its leader applies it, and whether it is led here."""

    def __init__(self, group_id: int) -> None:
        self.state = PartitionState(PartitionConfig(group_id=group_id))
        self.led = True
        self.handles: list[tuple[str, ReceiptHandle]] = []

    def apply(self, command: c.Command) -> object:
        with contextlib.suppress(StorageError):  # rejected: changes nothing more
            return self.state.apply_entry(c.encode(command), self.state.applied_index + 1)
        return None


def a_command(rng: random.Random, part: Partition, now: int) -> c.Command:
    """A random command proposed at ``now``."""
    topic = rng.choice(TOPICS)
    queue_id = rng.randrange(3)
    group = rng.choice(GROUPS)
    kind = rng.choices(
        ["append", "receive", "ack", "release", "change", "dead", "commit", "trim", "drop", "tick"],
        [8, 8, 6, 2, 2, 1, 2, 1, 0.3, 1],
    )[0]
    handle = rng.choice(part.handles) if part.handles else None
    if kind == "append" or (handle is None and kind in ("ack", "release", "change", "dead")):
        records = tuple(
            MessageRecord(
                topic,
                rng.randrange(3) if rng.random() < 0.3 else queue_id,
                f"m{rng.randrange(1 << 30)}",
                b"x",
                message_type=MessageType.DELAY if delayed else MessageType.NORMAL,
                delivery_timestamp_ms=now + rng.randrange(1, 3_000) if delayed else 0,
            )
            for delayed in (rng.random() < 0.15 for _ in range(rng.randrange(1, 4)))
        )
        return c.Append(now, records)
    if kind == "receive":
        return c.Receive(
            now,
            group,
            topic,
            queue_id,
            rng.randrange(1, 4),
            rng.choice([0, 200, 1_000, 5_000]),
            rng.randrange(1, 4),
            fifo=rng.random() < 0.2,
            initial_position=rng.choice(list(c.InitialPosition)),
        )
    if kind in ("ack", "release", "change", "dead"):
        assert handle is not None
        group, receipt = handle
        if kind == "ack":
            return c.Ack(now, group, (receipt,))
        if kind == "release":
            return c.Release(now, group, (receipt,))
        if kind == "change":
            return c.ChangeInvisibleDuration(now, group, receipt, rng.choice([0, 300, 4_000]))
        return c.DeadLetter(now, group, receipt)
    if kind == "commit":
        offset = rng.randrange(8)
        if rng.random() < 0.5:  # an operator's reset: leases dropped
            return c.CommitOffset(now, group, topic, queue_id, offset)
        return c.CommitConsumerOffset(now, group, topic, queue_id, offset)
    if kind == "trim":
        return c.TrimQueue(now, topic, queue_id, rng.randrange(6))
    if kind == "drop":
        return c.DropTopic(now, topic)
    return c.Tick(now)


def read_tallies(parts: list[Partition], totals: ConsumerTotals) -> None:
    """What the metrics walk does: each raft group's state read if led here."""
    for group_id, part in enumerate(parts):
        totals.read(group_id, part.state if part.led else None)


def run(seed: int) -> None:
    rng = random.Random(seed)
    parts = [Partition(1), Partition(2)]
    totals = ConsumerTotals()
    now = 1_000
    for step in range(STEPS):
        part = rng.choice(parts)
        roll = rng.random()
        if roll < 0.04:  # a snapshot installed: the state replaced by its restore
            part.state = restore(take_snapshot(part.state))
        elif roll < 0.07:
            part.led = not part.led
        else:
            now += rng.choice([0, 0, 1, 50, 400, 2_000])
            command = a_command(rng, part, now)
            result = part.apply(command)
            if isinstance(command, c.Receive) and isinstance(result, ReceiveResult):
                part.handles += [(command.group, d.handle) for d in result.deliveries]
                del part.handles[:-12]
        if rng.random() < 0.5:  # the walk does not look at every step
            continue
        read_tallies(parts, totals)
        led = [p.state for p in parts if p.led]
        expected = consumer_figures(led, now)
        assert totals.figures(now) == expected, f"seed {seed}, step {step}"
    read_tallies(parts, totals)
    assert totals.figures(now) == consumer_figures([p.state for p in parts if p.led], now)
    for part in parts:
        part.state.check_invariants()  # the tally's topic index among them
    for part in parts:
        part.led = False
    read_tallies(parts, totals)
    assert totals.figures(now) == {}, f"seed {seed}: figures left after every state retired"


@pytest.mark.parametrize("seed", range(SEEDS))
def test_kept_consumer_figures_equal_the_walk_over_every_group_queue(seed: int) -> None:
    run(seed)
