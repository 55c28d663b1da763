"""A replica's long-poll events: a queue read once does not keep one for good (the
ones nobody waits on are dropped, set, once the table doubled), and a receive that
waits is still woken by its queue's growth."""

from __future__ import annotations

import asyncio

from raft.types import Entry
from storage_node.partition.commands import Append, encode
from storage_node.replica import WAITERS_SWEEP_MIN, GroupReplica

from .partition.harness import record

NOW_MS = 1_000_000


async def test_events_nobody_waits_on_are_dropped_and_a_waiting_receive_still_wakes() -> None:
    replica = GroupReplica(1)
    first = replica.grown(("orders", 1))  # asked for and never waited on (messages found)
    waiting = asyncio.create_task(replica.grown(("orders", 0)).wait())
    await asyncio.sleep(0)  # the task waits now
    for queue_id in range(2, 10 * WAITERS_SWEEP_MIN):
        replica.grown(("other", queue_id))
    assert len(replica._waiters) <= WAITERS_SWEEP_MIN + 1  # not one per queue asked
    assert first.is_set()  # dropped set: a receive that had not waited yet looks again
    assert not waiting.done()
    replica.apply(Entry(1, 1, data=encode(Append(NOW_MS, (record("m0"),)))))
    assert await asyncio.wait_for(waiting, 5) is True
