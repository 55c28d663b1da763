"""The storage service over a one-node raft driver (real WAL in tmp_path, no network).

Covers the host duties the multi-process test cannot time: long-poll wake-up
on append, delayed messages released by the leader's timer ticks, a rejected
command answered to its proposer while the group goes on, and recovery of
the partition state from the WAL after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from protocol import errors
from protocol.records import unpack_records
from protocol.storage_api import (
    AckRequest,
    AppendQueuesRequest,
    AppendRequest,
    CancelTimerRequest,
    CommitOffsetRequest,
    EndTransactionRequest,
    Message,
    QueueInfoRequest,
    ReadRequest,
    ReceivedMessage,
    ReceiveRequest,
    StoredMessage,
    from_record,
)
from protocol.storage_api import ReceiptHandle as WireHandle
from raft.host.angelia_transport import AngeliaTransport
from raft.host.driver import Driver, DriverOptions
from raft.wal.logstore import LogStore
from storage_node import housekeeping
from storage_node import metrics as metrics_module
from storage_node.errors import BadCommand, CommandCorrupted, StorageError
from storage_node.metrics import WALK_SHARE, StorageMetrics
from storage_node.partition import state as partition_state
from storage_node.replica import GroupReplica
from storage_node.service import (
    APPEND_BODY_BYTES_MAX,
    FIRST_GROUP_ID,
    RECEIVE_BYTES_MAX,
    StorageNode,
)
from tests.waiting import async_wait_until

GROUPS = 2
CONTEXT: Any = None  # the service methods do not use their call context


@contextlib.asynccontextmanager
async def one_node(data_dir: Path) -> AsyncIterator[StorageNode]:
    store = LogStore.open(data_dir, segment_bytes=16 << 20)
    driver = Driver(1, store, AngeliaTransport(1, {}), DriverOptions(tick_ms=10, seed=1))
    replicas = {g: GroupReplica(g) for g in range(FIRST_GROUP_ID, FIRST_GROUP_ID + GROUPS)}
    for group_id, replica in replicas.items():
        driver.add_group(group_id, [1], replica)
    node = StorageNode(driver, store, replicas, GROUPS, {1: "127.0.0.1:1"})
    await driver.start()
    timers = asyncio.create_task(housekeeping.run_timers(node))
    try:
        await async_wait_until(
            lambda: all(driver.host.node(g).is_leader() for g in replicas), 10, "leadership"
        )
        yield node
    finally:
        timers.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await timers
        await driver.stop()


def _messages(queue_id: int, count: int, **extra: Any) -> list[Message]:
    return [
        Message("t", queue_id, f"m{queue_id}-{i}", b"body %d" % i, **extra) for i in range(count)
    ]


async def test_a_long_poll_wakes_when_the_queue_grows(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        poll = asyncio.create_task(
            node.receive(ReceiveRequest("g", "t", 0, 8, 30_000, poll_ms=20_000), CONTEXT)
        )
        await async_wait_until(lambda: node.replicas[node._group_of("t", 0)]._waiters, 10)
        await node.append(AppendRequest("t", 0, _messages(0, 3)), CONTEXT)
        received = await asyncio.wait_for(poll, 10)
        assert [m.message.message.message_id for m in received.messages] == ["m0-0", "m0-1", "m0-2"]
        assert [m.delivery_attempt for m in received.messages] == [1, 1, 1]


async def test_a_delayed_message_is_released_by_the_leaders_tick(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        due_ms = int(time.time() * 1000) + 300
        appended = await node.append(
            AppendRequest("t", 1, _messages(1, 1, delivery_timestamp_ms=due_ms)), CONTEXT
        )
        assert appended.outcomes[0].placement == 1  # delayed: held, not yet in the queue
        info = await node.queue_info(QueueInfoRequest("t", 1), CONTEXT)
        assert info.end_offset == 0
        received = await node.receive(
            ReceiveRequest("g", "t", 1, 8, 30_000, poll_ms=20_000), CONTEXT
        )
        assert [m.message.message.message_id for m in received.messages] == ["m1-0"]
        assert received.messages[0].message.store_timestamp_ms > 0


async def test_a_rejected_command_answers_its_caller_and_the_group_goes_on(
    tmp_path: Path,
) -> None:
    async with one_node(tmp_path) as node:
        await node.append(AppendRequest("t", 0, _messages(0, 2)), CONTEXT)
        received = await node.receive(ReceiveRequest("g", "t", 0, 1, 30_000), CONTEXT)
        handle = received.messages[0].handle
        forged = type(handle)("t", 0, 1, handle.generation)  # offset 1 was never delivered
        acks = await node.ack(AckRequest("g", "t", 0, [forged, handle]), CONTEXT)
        assert [o.error_code for o in acks.outcomes] == [
            errors.INVALID_RECEIPT_HANDLE.number,
            0,
        ]
        with pytest.raises(BadCommand):
            await node.receive(ReceiveRequest("g", "t", 0, -1, 30_000), CONTEXT)
        with pytest.raises(StorageError) as out_of_range:
            await node.read(ReadRequest("t", 0, 5), CONTEXT)
        assert out_of_range.value.code == errors.OFFSET_OUT_OF_RANGE
        read = await node.read(ReadRequest("t", 0, 0), CONTEXT)
        assert [m.queue_offset for m in read.messages] == [0, 1]


async def test_the_state_is_rebuilt_from_the_wal_after_a_restart(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        for batch in range(3):
            messages = [
                Message("t", 0, f"b{batch}-{i}", b"x" * 100, properties={"k": "v"})
                for i in range(5)
            ]
            await node.append(AppendRequest("t", 0, messages), CONTEXT)
        received = await node.receive(ReceiveRequest("g", "t", 0, 4, 30_000), CONTEXT)
        await node.ack(AckRequest("g", "t", 0, [m.handle for m in received.messages]), CONTEXT)
    async with one_node(tmp_path) as node:
        read = await node.read(ReadRequest("t", 0, 0, count_max=100, bytes_max=1000), CONTEXT)
        # bytes_max: no more messages than fit in 1000 body bytes (10 x 100 B).
        assert [m.queue_offset for m in read.messages] == list(range(10))
        assert (read.first_offset, read.end_offset) == (0, 15)
        assert read.messages[0].message.properties == {"k": "v"}
        again = await node.receive(ReceiveRequest("g", "t", 0, 100, 30_000), CONTEXT)
        assert [m.message.queue_offset for m in again.messages] == list(range(4, 15))


async def test_a_committed_transaction_enters_its_queue_and_a_rolled_back_one_never(
    tmp_path: Path,
) -> None:
    async with one_node(tmp_path) as node:
        halves = [Message("t", 0, f"tx{i}", b"half", message_type=4) for i in range(2)]
        appended = await node.append(AppendRequest("t", 0, halves), CONTEXT)
        assert [o.placement for o in appended.outcomes] == [2, 2]  # half messages
        assert (await node.queue_info(QueueInfoRequest("t", 0), CONTEXT)).end_offset == 0
        committed = await node.end_transaction(EndTransactionRequest("t", 0, "tx0", True), CONTEXT)
        assert (committed.committed, committed.placement, committed.queue_offset) == (True, 0, 0)
        rolled = await node.end_transaction(EndTransactionRequest("t", 0, "tx1", False), CONTEXT)
        assert rolled.committed is False
        with pytest.raises(StorageError) as again:
            await node.end_transaction(EndTransactionRequest("t", 0, "tx1", True), CONTEXT)
        assert again.value.code == errors.NOT_FOUND
        read = await node.read(ReadRequest("t", 0, 0), CONTEXT)
        assert [m.message.message_id for m in read.messages] == ["tx0"]


async def test_a_cancelled_timer_never_fires(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        due_ms = int(time.time() * 1000) + 60_000
        delayed = _messages(0, 2, delivery_timestamp_ms=due_ms)
        await node.append(AppendRequest("t", 0, delayed), CONTEXT)
        cancelled = await node.cancel_timer(CancelTimerRequest("t", 0, "m0-0"), CONTEXT)
        assert cancelled.cancelled is True
        unknown = await node.cancel_timer(CancelTimerRequest("t", 0, "m0-0"), CONTEXT)
        assert unknown.cancelled is False
        replica = node.replicas[node._group_of("t", 0)]
        assert [held.message_id for held in replica.state.held_messages()] == ["m0-1"]


async def test_an_oversized_append_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        big = [Message("t", 0, f"big{i}", bytes(APPEND_BODY_BYTES_MAX // 2)) for i in range(3)]
        with pytest.raises(BadCommand, match="body bytes"):
            await node.append(AppendRequest("t", 0, big), CONTEXT)
        fits = await node.append(AppendRequest("t", 0, big[:2]), CONTEXT)
        assert [o.queue_offset for o in fits.outcomes] == [0, 1]
        # Among other appends in one call: only the bad ones fail, each with its error.
        many = await node.append_queues(
            AppendQueuesRequest(
                [
                    AppendRequest("t", 1, _messages(1, 2)),
                    AppendRequest("t", 0, big),
                    AppendRequest("", 0, _messages(0, 1)),
                    AppendRequest("u", 0, [Message("u", 0, "u-0", b"x")]),
                    AppendRequest("t", 0, _messages(0, 1)),
                ]
            ),
            CONTEXT,
        )
        stored = [
            o.response and [x.queue_offset for x in o.response.outcomes] for o in many.outcomes
        ]
        assert stored == [[0, 1], None, None, [0], [2]]
        failures = [o.failure for o in many.outcomes]
        assert [f and (f.code, f.retriable) for f in failures] == [
            None,
            (errors.BAD_REQUEST.number, False),
            (errors.BAD_REQUEST.number, False),
            None,
            None,
        ]
        assert "body bytes" in getattr(failures[1], "message", "")
        assert "topic" in getattr(failures[2], "message", "")
        read = await node.read(ReadRequest("t", 1, 0), CONTEXT)
        assert [m.message.message_id for m in read.messages] == ["m1-0", "m1-1"]


async def test_the_leader_applies_its_own_records_without_decoding_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[bytes] = []

    def counting_decode(data: bytes) -> Any:
        decoded.append(data)
        return state_decode(data)

    state_decode = partition_state.decode
    monkeypatch.setattr(partition_state, "decode", counting_decode)
    async with one_node(tmp_path) as node:
        appended = await node.append(AppendRequest("t", 0, _messages(0, 3)), CONTEXT)
        assert [o.queue_offset for o in appended.outcomes] == [0, 1, 2]
        assert decoded == []  # the proposer's entry: its records, not a decoding
        # A record that would not decode back as it is (a key that is not a string)
        # is decoded on the leader too, and refused there as on any replica.
        odd = [Message("t", 0, "odd", b"x", keys=[7])]  # type: ignore[list-item]
        with pytest.raises(CommandCorrupted, match="not arrays of strings"):
            await node.append(AppendRequest("t", 0, odd), CONTEXT)
        assert len(decoded) == 1
        assert not node.replicas[node._group_of("t", 0)]._proposed
        read = await node.read(ReadRequest("t", 0, 0), CONTEXT)
        assert [m.message.message_id for m in read.messages] == ["m0-0", "m0-1", "m0-2"]


async def test_a_receive_with_nothing_to_hand_out_adds_no_log_entry(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        replica = node.replicas[node._group_of("t", 0)]
        await node.append(AppendRequest("t", 0, _messages(0, 2)), CONTEXT)
        first = await node.receive(ReceiveRequest("g", "t", 0, 8, 30_000), CONTEXT)
        assert len(first.messages) == 2
        applied = replica.applied_index
        idle = await node.receive(ReceiveRequest("g", "t", 0, 8, 30_000), CONTEXT)
        assert (idle.messages, idle.end_offset) == ([], 2)
        assert replica.applied_index == applied  # answered from the leader's state
        # A long poll that finds nothing waits without proposing, then wakes on growth.
        poll = asyncio.create_task(
            node.receive(ReceiveRequest("g", "t", 0, 8, 30_000, poll_ms=20_000), CONTEXT)
        )
        await async_wait_until(lambda: replica._waiters, 10, "the poll to wait")
        assert replica.applied_index == applied
        await node.append(AppendRequest("t", 0, [Message("t", 0, "late", b"x")]), CONTEXT)
        woken = await asyncio.wait_for(poll, 10)
        assert [m.message.message.message_id for m in woken.messages] == ["late"]
        # A retried attempt always goes through the log (it may repeat a grant).
        applied = replica.applied_index
        retried = ReceiveRequest("g", "t", 0, 8, 30_000, attempt_id="a1")
        assert (await node.receive(retried, CONTEXT)).messages == []
        assert replica.applied_index == applied + 1


async def test_a_receive_answers_within_its_byte_budget_and_releases_the_rest(
    tmp_path: Path,
) -> None:
    big = 3 << 20  # three fit in no 8 MiB answer: two do
    async with one_node(tmp_path) as node:
        for i in range(5):
            await node.append(
                AppendRequest("t", 0, [Message("t", 0, f"big-{i}", bytes(big))]), CONTEXT
            )
        first = await node.receive(ReceiveRequest("g", "t", 0, 32, 60_000), CONTEXT)
        assert [m.message.queue_offset for m in first.messages] == [0, 1]
        # The rest were released at once, not left invisible for the minute asked.
        second = await node.receive(ReceiveRequest("g", "t", 0, 32, 60_000), CONTEXT)
        assert [m.message.queue_offset for m in second.messages] == [2, 3]
        assert [m.delivery_attempt for m in second.messages] == [1, 1]  # released: not counted
        third = await node.receive(ReceiveRequest("g", "t", 0, 32, 60_000), CONTEXT)
        assert [m.message.queue_offset for m in third.messages] == [4]
        assert [m.delivery_attempt for m in third.messages] == [1]  # released twice
        # One message alone always goes, however large.
        await node.append(
            AppendRequest("t", 1, [Message("t", 1, "huge", bytes(APPEND_BODY_BYTES_MAX))]),
            CONTEXT,
        )
        alone = await node.receive(ReceiveRequest("g", "t", 1, 32, 60_000), CONTEXT)
        assert [m.message.message.message_id for m in alone.messages] == ["huge"]


async def test_a_packed_receive_keeps_the_byte_budget_too(tmp_path: Path) -> None:
    big = 3 << 20
    async with one_node(tmp_path) as node:
        for i in range(3):
            await node.append(
                AppendRequest("t", 0, [Message("t", 0, f"big-{i}", bytes(big))]), CONTEXT
            )
        ask = ReceiveRequest("g", "t", 0, 32, 60_000, packed=True)
        first = await node.receive(ask, CONTEXT)
        assert [d.queue_offset for d in first.deliveries] == [0, 1]
        assert len(first.records) < RECEIVE_BYTES_MAX
        assert [r.message_id for r in unpack_records(first.records).records] == ["big-0", "big-1"]
        second = await node.receive(ask, CONTEXT)
        assert [(d.queue_offset, d.delivery_attempt) for d in second.deliveries] == [(2, 1)]


async def test_a_packed_receive_answers_what_an_unpacked_one_does(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        extra = {
            "tag": "tag-a",
            "keys": ["k1", "k2"],
            "properties": {"b": "2", "a": "1"},
            "born_timestamp_ms": 17,
        }
        for queue_id in (0, 1):
            await node.append(
                AppendRequest("t", queue_id, _messages(queue_id, 3, **extra)), CONTEXT
            )
        plain = await node.receive(ReceiveRequest("g", "t", 0, 32, 60_000), CONTEXT)
        packed = await node.receive(ReceiveRequest("g", "t", 1, 32, 60_000, packed=True), CONTEXT)
        assert packed.messages == []
        assert len(packed.deliveries) == 3
        assert (packed.end_offset, packed.dead_lettered) == (plain.end_offset, plain.dead_lettered)
        records = unpack_records(packed.records).records
        # Queue 1's answer, rebuilt as messages, is queue 0's with the queue and ids changed.
        rebuilt = [
            ReceivedMessage(
                WireHandle(d.topic, d.queue_id, d.queue_offset, d.generation),
                d.delivery_attempt,
                d.invisible_until_ms,
                StoredMessage(d.queue_offset, d.store_timestamp_ms, from_record(record)),
            )
            for d, record in zip(packed.deliveries, records, strict=True)
        ]
        for got, want in zip(rebuilt, plain.messages, strict=True):
            assert got.message.message == dataclasses.replace(
                want.message.message,
                queue_id=1,
                message_id=want.message.message.message_id.replace("m0", "m1"),
            )
            assert (got.delivery_attempt, got.message.queue_offset) == (
                want.delivery_attempt,
                want.message.queue_offset,
            )
            assert got.handle.queue_id == 1
            assert got.handle.generation > 0
            assert got.invisible_until_ms == pytest.approx(want.invisible_until_ms, abs=60_000)


async def test_a_packed_receive_cuts_records_out_of_the_log_and_presents_dead_letters(
    tmp_path: Path,
) -> None:
    async with one_node(tmp_path) as node:
        group_id = node._group_of("t", 0)
        await node.append(AppendRequest("t", 0, _messages(0, 4, tag="x")), CONTEXT)
        await node.append(AppendRequest("t", 0, [Message("t", 0, "m0-4", b"last")]), CONTEXT)
        # Attempt 1 with no invisible time: the next receive dead-letters all five.
        once = ReceiveRequest("g", "t", 0, 32, 0, max_delivery_attempts=1)
        assert len((await node.receive(once, CONTEXT)).messages) == 5
        moved = await node.receive(once, CONTEXT)
        assert (moved.messages, moved.dead_lettered) == ([], 5)
        dlq = "%DLQ%g"
        plain = await node.receive(ReceiveRequest("r", dlq, group_id, 3, 60_000), CONTEXT)
        packed = await node.receive(
            ReceiveRequest("r2", dlq, group_id, 3, 60_000, packed=True), CONTEXT
        )
        records = unpack_records(packed.records).records
        assert [from_record(r) for r in records] == [m.message.message for m in plain.messages]
        assert {r.topic for r in records} == {dlq}
        assert {r.dead_letter_topic for r in records} == {"t"}
        # The source queue's records, cut from two log entries, decode as stored.
        source = await node.receive(ReceiveRequest("h", "t", 0, 32, 60_000, packed=True), CONTEXT)
        got = unpack_records(source.records).records
        assert [r.message_id for r in got] == [f"m0-{i}" for i in range(5)]
        assert [r.tag for r in got] == ["x"] * 4 + [""]
        assert got[4].body == b"last"


async def test_a_receive_reports_the_leases_the_group_holds_on_the_queue(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        await node.append(AppendRequest("t", 0, _messages(0, 3)), CONTEXT)
        other = await node.receive(ReceiveRequest("other", "t", 1, 32, 60_000), CONTEXT)
        assert other.leased == 0  # nothing of queue 1 handed out
        first = await node.receive(ReceiveRequest("g", "t", 0, 2, 60_000), CONTEXT)
        assert first.leased == 2
        await node.ack(AckRequest("g", "t", 0, [first.messages[0].handle]), CONTEXT)
        rest = await node.receive(ReceiveRequest("g", "t", 0, 32, 60_000, packed=True), CONTEXT)
        assert (len(rest.deliveries), rest.leased) == (1, 2)
        idle = await node.receive(ReceiveRequest("g", "t", 0, 32, 60_000), CONTEXT)
        assert (idle.messages, idle.leased) == ([], 2)  # answered without a log entry


async def test_queue_info_long_polls_on_growth_when_asked(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        await node.append(AppendRequest("t", 0, _messages(0, 2)), CONTEXT)
        # Above the end already, or no wait asked: at once.
        now = await node.queue_info(QueueInfoRequest("t", 0, end_above=1, wait_ms=60_000), CONTEXT)
        assert now.end_offset == 2
        plain = await node.queue_info(QueueInfoRequest("t", 0, end_above=5), CONTEXT)
        assert plain.end_offset == 2
        # At the end: the answer waits for the next append.
        waiting = asyncio.create_task(
            node.queue_info(QueueInfoRequest("t", 0, end_above=2, wait_ms=60_000), CONTEXT)
        )
        replica = node.replicas[node._group_of("t", 0)]
        await async_wait_until(lambda: replica._waiters, 10, "the call to wait")
        assert not waiting.done()
        await node.append(AppendRequest("t", 0, [Message("t", 0, "late", b"x")]), CONTEXT)
        assert (await asyncio.wait_for(waiting, 10)).end_offset == 3
        # No growth: the offsets as they are when the wait ends.
        ended = await node.queue_info(QueueInfoRequest("t", 0, end_above=3, wait_ms=50), CONTEXT)
        assert (ended.first_offset, ended.end_offset) == (0, 3)


async def test_an_append_answers_in_the_queued_form_only_when_all_were_queued_anew(
    tmp_path: Path,
) -> None:
    async with one_node(tmp_path) as node:
        first = await node.append(AppendRequest("t", 0, _messages(0, 3)), CONTEXT)
        assert (first.listed, first.queued_ids, first.queued_from) == (
            [],
            ["m0-0", "m0-1", "m0-2"],
            0,
        )
        more = _messages(0, 5)[3:]
        second = await node.append(AppendRequest("t", 0, more), CONTEXT)
        assert (second.queued_ids, second.queued_from) == (["m0-3", "m0-4"], 3)
        # A resent id is a duplicate: the answer lists every outcome.
        mixed = [*_messages(0, 6)[5:], *_messages(0, 2)[1:2]]
        third = await node.append(AppendRequest("t", 0, mixed), CONTEXT)
        assert third.queued_ids == []
        assert [(o.message_id, o.placement, o.queue_offset, o.duplicate) for o in third.listed] == [
            ("m0-5", 0, 5, False),
            ("m0-1", 0, 1, True),
        ]
        assert third.outcomes == third.listed
        # A delayed message is not queued: listed too.
        due_ms = int(time.time() * 1000) + 60_000
        delayed = await node.append(
            AppendRequest("t", 0, [Message("t", 0, "later", b"x", delivery_timestamp_ms=due_ms)]),
            CONTEXT,
        )
        assert [(o.placement, o.queue_offset) for o in delayed.outcomes] == [(1, -1)]


async def test_the_metrics_show_a_failed_wal_and_a_damaged_one_set_aside(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    async with one_node(tmp_path) as node:
        metrics = StorageMetrics(registry, node, {"cluster": "c", "node_type": "storage"})

        def value(name: str) -> float | None:
            return registry.get_sample_value(name, {"cluster": "c", "node_type": "storage"})

        metrics.refresh()
        names = ("rip5_storage_wal_failed", "rip5_storage_data_lost", "rip5_storage_wal_set_aside")
        assert [value(n) for n in names] == [0, 0, 0]
        node.wal_failure = "[Errno 28] No space left on device"
        node.wal_set_aside = "WAL segment 0000000000000002.wal is corrupt at offset 12015"
        node.data_lost = True
        metrics.refresh()
        assert [value(n) for n in names] == [1, 1, 1]
        node.data_lost = False
        # A walk over the queues of d seconds is followed by none for d / WALK_SHARE:
        # the queue gauges wait (the node's own do not), then show the queues as they are.
        paced_registry = CollectorRegistry()
        clock = _SteppingClock(step_s=1.0)  # every walk seems to take 1 s
        paced = StorageMetrics(
            paced_registry, node, {"cluster": "c", "node_type": "storage"}, clock=clock
        )

        def paced_value(name: str) -> float | None:
            return paced_registry.get_sample_value(name, {"cluster": "c", "node_type": "storage"})

        paced.refresh()  # walks at 0 (took 1 s): the next walk from 1 / WALK_SHARE on
        assert paced_value("rip5_storage_messages") == 0
        await node.append(AppendRequest("t", 0, _messages(0, 3)), CONTEXT)
        node.data_lost = True
        clock.now_s = 1 / WALK_SHARE - 1
        paced.refresh()
        assert paced_value("rip5_storage_data_lost") == 1  # the node's gauges: every refresh
        assert paced_value("rip5_storage_messages") == 0  # the queues: not yet
        clock.now_s = 1 + 1 / WALK_SHARE
        paced.refresh()
        assert paced_value("rip5_storage_messages") == 3


async def test_the_metrics_count_appends_and_the_entries_they_were_joined_into(
    tmp_path: Path,
) -> None:
    registry = CollectorRegistry()
    labels = {"cluster": "c", "node_type": "storage"}
    async with one_node(tmp_path) as node:
        metrics = StorageMetrics(registry, node, labels)

        def counted() -> list[float | None]:
            metrics.refresh()
            names = ("appended_messages", "appends", "append_entries")
            return [registry.get_sample_value(f"rip5_storage_{n}_total", labels) for n in names]

        assert counted() == [0, 0, 0]
        # Queues 0 and GROUPS hash to one group: their appends, begun in one call before
        # the next round, are one log entry; queue 1's group takes another.
        same = [q for q in range(64) if node._group_of("t", q) == node._group_of("t", 0)]
        other = next(q for q in range(64) if node._group_of("t", q) != node._group_of("t", 0))
        await node.append_queues(
            AppendQueuesRequest(
                [
                    AppendRequest("t", same[0], _messages(same[0], 3)),
                    AppendRequest("t", same[1], _messages(same[1], 2)),
                    AppendRequest("t", other, _messages(other, 1)),
                ]
            ),
            CONTEXT,
        )
        assert counted() == [6, 3, 2]
        await node.append(AppendRequest("t", other, _messages(other, 4)[3:]), CONTEXT)
        assert counted() == [7, 4, 3]
        # A failed append is not counted (nothing was stored).
        with pytest.raises(BadCommand):
            await node.append(AppendRequest("", 0, _messages(0, 1)), CONTEXT)
        assert counted() == [7, 4, 3]


async def test_a_walk_over_the_queues_goes_on_a_group_at_a_time_when_it_is_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each refresh walks groups for at most WALK_SLICE_S of real time (0 here: one
    # group), so many queues never stall the loop: the gauges change when it ends.
    monkeypatch.setattr(metrics_module, "WALK_SLICE_S", 0.0)
    registry = CollectorRegistry()
    async with one_node(tmp_path) as node:
        for queue_id in range(GROUPS * 4):
            await node.append(AppendRequest("t", queue_id, _messages(queue_id, 1)), CONTEXT)
        led = len(node.replicas)
        metrics = StorageMetrics(registry, node, {"cluster": "c", "node_type": "storage"})

        def queues() -> float | None:
            return registry.get_sample_value(
                "rip5_storage_queues", {"cluster": "c", "node_type": "storage"}
            )

        for _ in range(led - 1):
            metrics.refresh()
            assert queues() == 0  # not yet reported: the walk is under way
        metrics.refresh()
        assert queues() == GROUPS * 4
        # The consumer gauges of the walk: one message of queue 0 in flight, the other
        # queues' message waiting (lag), from the states' tallies.
        await node.receive(ReceiveRequest("g", "t", 0, 8, 30_000), CONTEXT)
        for queue_id in range(1, GROUPS * 4):
            await node.commit_offset(CommitOffsetRequest("g", "t", queue_id, 0), CONTEXT)
        labels = {"cluster": "c", "node_type": "storage", "consumer_group": "g", "topic": "t"}
        labels |= {"is_retry": "false", "is_system": "false"}
        metrics._walk_due = 0.0  # the next walk now, not after its pause
        for _ in range(led):
            metrics.refresh()
        assert registry.get_sample_value("rocketmq_consumer_lag_messages", labels) == GROUPS * 4
        assert registry.get_sample_value("rocketmq_consumer_inflight_messages", labels) == 1


class _SteppingClock:
    """Seconds that move ``step_s`` forward at every reading."""

    def __init__(self, step_s: float) -> None:
        self.now_s = 0.0
        self.step_s = step_s

    def __call__(self) -> float:
        now_s = self.now_s
        self.now_s += self.step_s
        return now_s
