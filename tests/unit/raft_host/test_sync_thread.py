"""raft.host.sync_thread: calls run in order on one thread; outcomes reach the loop."""

from __future__ import annotations

import asyncio
import functools
import threading

import pytest

from raft.host.sync_thread import SyncThread


async def test_calls_run_in_order_on_one_thread_and_return_their_results() -> None:
    worker = SyncThread("test-sync")
    ran: list[tuple[int, str]] = []

    def call(n: int) -> int:
        ran.append((n, threading.current_thread().name))
        return n * 10

    try:
        futures = [worker.run(functools.partial(call, n)) for n in range(20)]
        assert await asyncio.gather(*futures) == [n * 10 for n in range(20)]
    finally:
        worker.shutdown()
    assert [n for n, _ in ran] == list(range(20))
    assert {name for _, name in ran} == {"test-sync"}


async def test_an_exception_reaches_the_awaiting_task_and_the_thread_goes_on() -> None:
    worker = SyncThread("test-sync")

    def fail() -> None:
        raise OSError("disk gone")

    try:
        with pytest.raises(OSError, match="disk gone"):
            await worker.run(fail)
        assert await worker.run(lambda: "still here") == "still here"
    finally:
        worker.shutdown()


async def test_a_cancelled_wait_leaves_the_call_running_and_shutdown_waits_for_it() -> None:
    worker = SyncThread("test-sync")
    release = threading.Event()
    finished = threading.Event()

    def slow() -> None:
        release.wait(30)
        finished.set()

    future = worker.run(slow)
    future.cancel()
    release.set()
    worker.shutdown()  # waits for the queued call
    assert finished.is_set()
    assert future.cancelled()


def test_shutdown_of_a_thread_that_never_started_is_a_no_op() -> None:
    SyncThread("never").shutdown()
