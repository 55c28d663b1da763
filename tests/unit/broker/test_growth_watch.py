"""Long polls of one topic share one look at its end offsets per interval."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from broker.errors import BrokerError
from broker.services.growth import GrowthWatch
from protocol import errors as codes
from tests.waiting import async_wait_until


class Queues:
    """End offsets by queue id; counts the looks; can fail them."""

    def __init__(self, **ends: int) -> None:
        self.ends = {int(q[1:]): end for q, end in ends.items()}
        self.looks: list[tuple[str, tuple[int, ...]]] = []
        self.failing = False

    async def end_offsets(self, topic: str, queue_ids: Sequence[int]) -> dict[int, int]:
        self.looks.append((topic, tuple(queue_ids)))
        if self.failing:
            raise BrokerError(codes.UNAVAILABLE, "no storage node")
        return {q: self.ends[q] for q in queue_ids}


async def test_many_waiters_share_each_look_and_all_wake_on_growth() -> None:
    queues = Queues(q0=5, q1=7)
    watch = GrowthWatch(queues.end_offsets, check_ms=1)
    waiters = [asyncio.create_task(watch.wait("t", {0: 5, 1: 7}, 30)) for _ in range(20)]
    await async_wait_until(lambda: watch.watching("t") == 20, what="every poll to wait")
    await async_wait_until(lambda: len(queues.looks) >= 3, what="a few looks")
    assert all(look == ("t", (0, 1)) for look in queues.looks)  # one look for all twenty
    assert not any(w.done() for w in waiters)
    queues.ends[1] = 8
    assert await asyncio.gather(*waiters) == [True] * 20
    await async_wait_until(lambda: "t" not in watch._watches, what="the watch to end")
    assert watch.watching("t") == 0


async def test_a_wait_without_growth_times_out() -> None:
    queues = Queues(q0=3)
    watch = GrowthWatch(queues.end_offsets, check_ms=1)
    assert await watch.wait("t", {0: 3}, 0.05) is False
    assert watch.watching("t") == 0


async def test_growth_before_the_wait_is_found_at_the_first_look() -> None:
    queues = Queues(q0=4)
    watch = GrowthWatch(queues.end_offsets, check_ms=60_000)  # one look only
    assert await watch.wait("t", {0: 3}, 30) is True
    assert len(queues.looks) == 1


async def test_an_unknown_end_takes_the_next_look_as_its_baseline() -> None:
    queues = Queues(q0=9)
    watch = GrowthWatch(queues.end_offsets, check_ms=1)
    waiter = asyncio.create_task(watch.wait("t", {0: -1}, 30))
    await async_wait_until(lambda: len(queues.looks) >= 2, what="the baseline look and one more")
    assert not waiter.done()  # 9 was the baseline, not growth
    queues.ends[0] = 10
    assert await waiter is True


async def test_failed_looks_wake_nobody_and_the_watch_goes_on() -> None:
    queues = Queues(q0=1)
    queues.failing = True
    watch = GrowthWatch(queues.end_offsets, check_ms=1)
    waiter = asyncio.create_task(watch.wait("t", {0: 1}, 30))
    await async_wait_until(lambda: len(queues.looks) >= 3, what="failing looks")
    assert not waiter.done()
    queues.ends[0] = 2
    queues.failing = False
    assert await waiter is True


async def test_topics_are_watched_apart() -> None:
    queues = Queues(q0=1, q1=1)
    watch = GrowthWatch(queues.end_offsets, check_ms=1)
    a = asyncio.create_task(watch.wait("a", {0: 1}, 30))
    b = asyncio.create_task(watch.wait("b", {1: 1}, 30))
    await async_wait_until(
        lambda: {topic for topic, _ in queues.looks} == {"a", "b"}, what="both topics looked at"
    )
    queues.ends[0] = 2  # only topic a's queue 0 is watched for a
    assert await a is True
    assert not b.done()
    b.cancel()
    await async_wait_until(lambda: watch.watching("b") == 0, what="the cancelled poll to leave")
