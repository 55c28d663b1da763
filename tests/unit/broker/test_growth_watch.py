"""Long polls of a queue share one storage long poll on its growth at a time."""

from __future__ import annotations

import asyncio

from broker.errors import BrokerError
from broker.services.growth import GrowthWatch
from protocol import errors as codes
from tests.waiting import async_wait_until


class Queues:
    """End offsets by (topic, queue id), with the storage side of the long poll: a call
    answers once its queue's end is above what it asks for, or after ``wait_s``.
    Counts the calls; can fail them, or answer at once without waiting."""

    def __init__(self, wait_s: float = 30, **ends: int) -> None:
        self.ends = {int(q[1:]): end for q, end in ends.items()}
        self.wait_s = wait_s
        self.calls: list[tuple[str, int, int]] = []
        self.in_flight = 0
        self.failing = False
        self._grown = asyncio.Event()

    def grow(self, queue_id: int, end: int) -> None:
        self.ends[queue_id] = end
        self._grown.set()
        self._grown = asyncio.Event()

    async def end_above(self, topic: str, queue_id: int, above: int) -> int:
        self.calls.append((topic, queue_id, above))
        if self.failing:
            raise BrokerError(codes.UNAVAILABLE, "no storage node")
        self.in_flight += 1
        try:
            deadline = asyncio.get_running_loop().time() + self.wait_s
            while above >= 0 and self.ends[queue_id] <= above:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(self._grown.wait(), remaining)
                except TimeoutError:
                    break
            return self.ends[queue_id]
        finally:
            self.in_flight -= 1


async def test_many_waiters_share_one_call_per_queue_and_all_wake_on_growth() -> None:
    queues = Queues(q0=5, q1=7)
    watch = GrowthWatch(queues.end_above, retry_ms=1)
    waiters = [asyncio.create_task(watch.wait("t", {0: 5, 1: 7}, 30)) for _ in range(20)]
    await async_wait_until(lambda: watch.watching("t") == 20, what="every poll to wait")
    await async_wait_until(lambda: queues.in_flight == 2, what="one call per queue")
    assert sorted(queues.calls) == [("t", 0, 5), ("t", 1, 7)]  # not one per waiter
    assert not any(w.done() for w in waiters)
    queues.grow(1, 8)
    assert await asyncio.gather(*waiters) == [True] * 20
    await async_wait_until(lambda: not watch._watches, what="the watches to end")
    assert watch.watching("t") == 0


async def test_while_nothing_grows_a_queue_costs_one_call_per_storage_wait() -> None:
    queues = Queues(wait_s=0.02, q0=3)
    watch = GrowthWatch(queues.end_above, retry_ms=1)
    assert await watch.wait("t", {0: 3}, 0.2) is False
    assert 3 <= len(queues.calls) <= 11  # about 0.2 s / 0.02 s, not one per millisecond
    assert watch.watching("t") == 0


async def test_growth_before_the_wait_is_found_by_the_first_call() -> None:
    queues = Queues(q0=4)
    watch = GrowthWatch(queues.end_above, retry_ms=60_000)
    assert await watch.wait("t", {0: 3}, 30) is True
    assert queues.calls == [("t", 0, 3)]


async def test_an_unknown_end_takes_the_next_answer_as_its_baseline() -> None:
    queues = Queues(q0=9)
    watch = GrowthWatch(queues.end_above, retry_ms=1)
    waiter = asyncio.create_task(watch.wait("t", {0: -1}, 30))
    await async_wait_until(lambda: queues.in_flight == 1, what="the wait above the baseline")
    assert queues.calls == [("t", 0, -1), ("t", 0, 9)]  # 9 was the baseline, not growth
    assert not waiter.done()
    queues.grow(0, 10)
    assert await waiter is True


async def test_a_waiter_needing_less_growth_than_the_call_in_flight_asks_again() -> None:
    queues = Queues(q0=12)
    watch = GrowthWatch(queues.end_above, retry_ms=1)
    late = asyncio.create_task(watch.wait("t", {0: 12}, 30))
    await async_wait_until(lambda: queues.in_flight == 1, what="a call waiting above 12")
    # A receive that saw less (a replica behind, say) is answered now, not at 13.
    assert await watch.wait("t", {0: 10}, 30) is True
    assert ("t", 0, 10) in queues.calls
    assert not late.done()
    queues.grow(0, 13)
    assert await late is True


async def test_failed_calls_wake_nobody_and_the_watch_goes_on() -> None:
    queues = Queues(q0=1)
    queues.failing = True
    watch = GrowthWatch(queues.end_above, retry_ms=1)
    waiter = asyncio.create_task(watch.wait("t", {0: 1}, 30))
    await async_wait_until(lambda: len(queues.calls) >= 3, what="failing calls")
    assert not waiter.done()
    queues.failing = False
    queues.grow(0, 2)
    assert await waiter is True


async def test_a_store_that_answers_without_waiting_is_asked_at_most_every_retry() -> None:
    queues = Queues(wait_s=0, q0=1)
    watch = GrowthWatch(queues.end_above, retry_ms=50)
    assert await watch.wait("t", {0: 1}, 0.2) is False
    assert len(queues.calls) <= 6  # 0.2 s / 50 ms, not a busy loop


async def test_topics_are_watched_apart() -> None:
    queues = Queues(q0=1, q1=1)
    watch = GrowthWatch(queues.end_above, retry_ms=1)
    a = asyncio.create_task(watch.wait("a", {0: 1}, 30))
    b = asyncio.create_task(watch.wait("b", {1: 1}, 30))
    await async_wait_until(
        lambda: {topic for topic, _, _ in queues.calls} == {"a", "b"}, what="both topics asked"
    )
    queues.grow(0, 2)  # only topic a's queue 0 is watched for a
    assert await a is True
    assert not b.done()
    b.cancel()
    await async_wait_until(lambda: watch.watching("b") == 0, what="the cancelled poll to leave")


async def test_the_last_waiter_leaving_drops_the_watch_at_once() -> None:
    queues = Queues(q0=1)
    watch = GrowthWatch(queues.end_above, retry_ms=1)
    first = asyncio.create_task(watch.wait("t", {0: 1}, 30))
    await async_wait_until(lambda: queues.in_flight == 1, what="the first call")
    old = watch._watches["t", 0]
    first.cancel()
    await asyncio.wait([first])
    # Forgotten as the waiter left, not when its task ends: a waiter coming in
    # between starts a watch of its own instead of joining a cancelled one.
    assert ("t", 0) not in watch._watches
    second = asyncio.create_task(watch.wait("t", {0: 1}, 30))
    await async_wait_until(lambda: len(queues.calls) == 2, what="the second waiter's call")
    assert watch._watches["t", 0] is not old
    queues.grow(0, 2)
    assert await second is True
