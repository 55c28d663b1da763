"""Seeded random runs of the in-memory pop state machine, checked against a model.

Each run appends, pops (two groups, one FIFO), acks, renews and moves the
manual clock at random; a failing run prints its seed (hypothesis shows the
``seed`` argument) and replays exactly.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.domain import GroupInfo, Message, PoppedMessage, QueueRef
from broker.errors import BrokerError
from broker.services.clock import ManualClock
from broker.services.memory import MemoryStore
from protocol.filters import MessageFilter
from protocol.vocabulary import MessageType

Q = QueueRef("t", 0)
GROUPS = (GroupInfo("plain"), GroupInfo("ordered", fifo=True))


async def _run(seed: int) -> None:
    rng = random.Random(seed)
    clock = ManualClock()
    store = MemoryStore(clock)
    messages: list[Message] = []
    # Model, per group: offset -> the live delivery (generation, until), and finished offsets.
    live: dict[str, dict[int, PoppedMessage]] = {g.name: {} for g in GROUPS}
    finished: dict[str, set[int]] = {g.name: set() for g in GROUPS}
    attempts: dict[str, dict[int, int]] = {g.name: {} for g in GROUPS}

    for _ in range(300):
        action = rng.choice(["append", "pop", "pop", "ack", "renew", "tick"])
        group = rng.choice(GROUPS)
        name = group.name
        now = clock.now_ms()
        if action == "append":
            batch = [
                Message(
                    "t",
                    b"x",
                    f"m{len(messages) + i}",
                    MessageType.FIFO,
                    message_group=rng.choice("ab"),
                )
                for i in range(rng.randint(1, 3))
            ]
            results = await store.append(Q, batch)
            assert [r.offset for r in results] == list(
                range(len(messages), len(messages) + len(batch))
            )
            messages.extend(batch)
        elif action == "pop":
            result = await store.pop(
                group,
                Q,
                batch_size=rng.randint(1, 4),
                invisible_ms=10_000,
                message_filter=MessageFilter(),
            )
            handed: list[PoppedMessage] = []
            for popped in result.messages:
                offset = popped.offset
                assert offset not in finished[name], "a finished message came back"
                previous = live[name].get(offset)
                assert previous is None or previous.invisible_until_ms <= now, "still invisible"
                attempts[name][offset] = attempts[name].get(offset, 0) + 1
                assert popped.delivery_attempt == attempts[name][offset]
                if group.fifo:
                    key = messages[offset].message_group
                    for earlier in range(offset):
                        if messages[earlier].message_group != key:
                            continue
                        assert earlier in finished[name] or any(
                            h.offset == earlier for h in handed
                        ), f"FIFO order broken: {offset} before {earlier}"
                live[name][offset] = popped
                handed.append(popped)
        elif action in ("ack", "renew") and live[name]:
            offset = rng.choice(sorted(live[name]))
            popped = live[name][offset]
            stale = rng.random() < 0.2
            generation = popped.generation - 1 if stale else popped.generation
            try:
                if action == "ack":
                    await store.ack(name, Q, offset, generation)
                else:
                    new_generation, until = await store.change_invisible(
                        name, Q, offset, generation, rng.choice([0, 1_000, 10_000])
                    )
            except BrokerError:
                assert stale, "a current handle was refused"
                continue
            assert not stale, "a stale handle was accepted"
            if action == "ack":
                del live[name][offset]
                finished[name].add(offset)
            else:
                live[name][offset] = PoppedMessage(
                    popped.message, Q, offset, 0, popped.delivery_attempt, new_generation, until
                )
        elif action == "tick":
            clock.advance(rng.choice([1_000, 5_000, 10_000]))

    # Drain: ack everything; then every message is finished for both groups.
    for group in GROUPS:
        for _ in range(len(messages) * 2 + 2):
            clock.advance(10_000)
            result = await store.pop(
                group, Q, batch_size=32, invisible_ms=10_000, message_filter=MessageFilter()
            )
            for popped in result.messages:
                await store.ack(group.name, Q, popped.offset, popped.generation)
        assert await store.get_consumer_offset(group.name, Q) == len(messages)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
async def test_random_runs_keep_the_pop_contract(seed: int) -> None:
    await _run(seed)
