"""Timed and transactional messages through the processors over the in-memory ports.

Time comes from a manual clock, so "not before due" and the check-back
schedule (delay, interval, max checks) are exact.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from broker.domain import GroupInfo, HalfMessage, Message, QueueInfo, QueueRef, TopicInfo
from broker.errors import BrokerError, Reason
from broker.processor import transaction_id as transaction_ids
from broker.processor.checkback import LEASE_NAME, CheckPolicy, plan_round
from broker.processor.consumer import ConsumerProcessor
from broker.processor.producer import ProducerProcessor
from broker.processor.transaction import CheckRound, TransactionProcessor
from broker.services.base import NAMESERVER_QUIET_AT_START_MS
from broker.services.clock import ManualClock
from broker.services.memory import MemoryCoordination, MemoryMetadata, MemoryPeers, MemoryStore
from protocol import errors as codes
from protocol.filters import MessageFilter
from protocol.vocabulary import MessageType, Placement

SECRET = b"secret"
POLICY = CheckPolicy(delay_ms=6_000, interval_ms=30_000, check_max=3)


class Producers:
    """The producers connected to one broker: records the checks they were sent."""

    def __init__(self, groups: set[str] | None = None) -> None:
        self.groups = groups or set()
        self.checks: list[tuple[str, str]] = []  # (message id, transaction id)

    def maybe_send_check(self, producer_group: str, half: HalfMessage, transaction_id: str) -> bool:
        if producer_group not in self.groups:
            return False
        self.checks.append((half.message.message_id, transaction_id))
        return True


class World:
    def __init__(self, *, delivery_ahead_ms_max: int = 24 * 3600_000) -> None:
        self.clock = ManualClock()
        self.metadata = MemoryMetadata(
            [
                TopicInfo("plain", (QueueInfo(0),), frozenset({MessageType.NORMAL})),
                TopicInfo("timed", (QueueInfo(0), QueueInfo(1)), frozenset({MessageType.DELAY})),
                TopicInfo(
                    "txn", (QueueInfo(0), QueueInfo(1)), frozenset({MessageType.TRANSACTION})
                ),
            ],
            [GroupInfo("g")],
        )
        self.store = MemoryStore(self.clock, self.metadata)
        self.producer = ProducerProcessor(
            self.metadata, self.store, self.clock, delivery_ahead_ms_max=delivery_ahead_ms_max
        )
        self.consumer = ConsumerProcessor(self.metadata, self.store, self.clock, SECRET)
        self.local = Producers()
        self.transactions = TransactionProcessor(
            self.store, self.clock, self.local, owner="b1", policy=POLICY
        )

    async def received(self, topic: str) -> list[str]:
        deliveries = await self.consumer.receive(
            "g", topic, MessageFilter(), batch_size=32, invisible_ms=60_000, poll_ms=0
        )
        return [d.popped.message.message_id for d in deliveries]


@pytest.fixture
def world() -> World:
    return World()


def _timed(world: World, n: int, ahead_ms: int, topic: str = "timed") -> Message:
    return Message(
        topic,
        f"t{n}".encode(),
        f"timed-{n}",
        MessageType.DELAY,
        delivery_timestamp_ms=world.clock.now_ms() + ahead_ms,
    )


def _half(n: int, topic: str = "txn") -> Message:
    return Message(topic, f"h{n}".encode(), f"half-{n}", MessageType.TRANSACTION)


# ---------------------------------------------------------------- timed messages


async def test_timed_message_is_delivered_when_due_never_before(world: World) -> None:
    (result,) = await world.producer.send([_timed(world, 1, 3_000)])
    assert (result.placement, result.offset) == (Placement.DELAYED, -1)
    assert await world.received("timed") == []
    world.clock.advance(2_999)
    assert await world.received("timed") == []
    world.clock.advance(1)
    assert await world.received("timed") == ["timed-1"]


async def test_timed_messages_come_in_due_order(world: World) -> None:
    await world.producer.send([_timed(world, 1, 5_000), _timed(world, 2, 1_000)])
    await world.producer.send([_timed(world, 3, 3_000)])
    order: list[str] = []
    for _ in range(5):
        world.clock.advance(1_000)
        order += await world.received("timed")
    assert order == ["timed-2", "timed-3", "timed-1"]
    assert world.store.held_count == 0


async def test_delivery_time_in_the_past_is_delivered_at_once(world: World) -> None:
    (result,) = await world.producer.send([_timed(world, 1, -10_000)])
    assert result.placement is Placement.QUEUED
    assert await world.received("timed") == ["timed-1"]


async def test_delivery_time_beyond_the_maximum_is_refused(world: World) -> None:
    with pytest.raises(BrokerError) as caught:
        await world.producer.send([_timed(world, 1, 24 * 3600_000 + 1)])
    assert caught.value.reason is Reason.ILLEGAL_DELIVERY_TIME
    assert "maximum delay of 86400000 ms" in caught.value.message
    assert world.store.append_calls == 0
    (result,) = await world.producer.send([_timed(world, 2, 24 * 3600_000)])
    assert result.placement is Placement.DELAYED


async def test_the_maximum_delay_is_configurable() -> None:
    world = World(delivery_ahead_ms_max=60_000)
    with pytest.raises(BrokerError) as caught:
        await world.producer.send([_timed(world, 1, 60_001)])
    assert caught.value.reason is Reason.ILLEGAL_DELIVERY_TIME
    await world.producer.send([_timed(world, 2, 60_000)])


async def test_topic_message_types_are_enforced(world: World) -> None:
    cases = [
        _timed(world, 1, 1_000, topic="plain"),  # DELAY to a NORMAL topic
        _half(1, topic="plain"),  # TRANSACTION to a NORMAL topic
        Message("txn", b"x", "normal-1"),  # NORMAL to a TRANSACTION topic
        _timed(world, 2, 1_000, topic="txn"),  # DELAY to a TRANSACTION topic
    ]
    for message in cases:
        with pytest.raises(BrokerError) as caught:
            await world.producer.send([message])
        assert caught.value.reason is Reason.MESSAGE_TYPE_CONFLICT, message
        assert message.message_type.name in caught.value.message
    assert world.store.append_calls == 0


# ---------------------------------------------------------------- transactions


async def test_committed_half_message_becomes_visible(world: World) -> None:
    (result,) = await world.producer.send([_half(1)])
    assert (result.placement, result.offset) == (Placement.HALF, -1)
    assert await world.received("txn") == []
    txid = transaction_ids.encode(result.queue, "half-1")
    committed = await world.transactions.end("txn", "half-1", txid, True)
    assert committed is not None
    assert committed.placement is Placement.QUEUED
    assert await world.received("txn") == ["half-1"]
    assert world.store.half_count == 0


async def test_rolled_back_half_message_is_never_visible(world: World) -> None:
    (result,) = await world.producer.send([_half(1)])
    txid = transaction_ids.encode(result.queue, "half-1")
    assert await world.transactions.end("txn", "half-1", txid, False) is None
    world.clock.advance(3600_000)
    assert await world.received("txn") == []
    # Ended is ended: a late commit finds nothing to commit.
    with pytest.raises(BrokerError) as caught:
        await world.transactions.end("txn", "half-1", txid, True)
    assert caught.value.reason is Reason.TRANSACTION_NOT_FOUND
    assert await world.received("txn") == []


async def test_unknown_resolution_leaves_the_half_message(world: World) -> None:
    (result,) = await world.producer.send([_half(1)])
    txid = transaction_ids.encode(result.queue, "half-1")
    assert await world.transactions.end("txn", "half-1", txid, None) is None
    assert world.store.half_count == 1
    await world.transactions.end("txn", "half-1", txid, True, from_check=True)
    assert await world.received("txn") == ["half-1"]


async def test_bad_transaction_ids_are_refused_and_change_nothing(world: World) -> None:
    (result,) = await world.producer.send([_half(1)])
    good = transaction_ids.encode(result.queue, "half-1")
    for bad, message_id in [
        ("", "half-1"),
        ("garbage", "half-1"),
        ("T1:x:half-1", "half-1"),
        (good, "another-message"),
    ]:
        with pytest.raises(BrokerError) as caught:
            await world.transactions.end("txn", message_id, bad, True)
        assert caught.value.reason is Reason.INVALID_TRANSACTION_ID, bad
    other_queue = transaction_ids.encode(QueueRef("txn", 1 - result.queue.queue_id), "half-1")
    with pytest.raises(BrokerError) as caught:
        await world.transactions.end("txn", "half-1", other_queue, True)
    assert caught.value.reason is Reason.TRANSACTION_NOT_FOUND
    assert world.store.half_count == 1
    await world.transactions.end("txn", "half-1", good, True)
    assert await world.received("txn") == ["half-1"]


def test_transaction_ids_round_trip() -> None:
    queue = QueueRef("txn", 7)
    txid = transaction_ids.encode(queue, "01ABC:odd")
    assert transaction_ids.decode(txid, "txn", "01ABC:odd") == (queue, "01ABC:odd")
    assert transaction_ids.decode(txid, "txn", "") == (queue, "01ABC:odd")


# ---------------------------------------------------------------- check-back


async def test_orphan_is_checked_after_the_delay_then_every_interval(world: World) -> None:
    world.local.groups.add("txn")
    (result,) = await world.producer.send([_half(1)])
    txid = transaction_ids.encode(result.queue, "half-1")
    world.clock.advance(5_999)
    assert (await world.transactions.check_once()).checked == 0
    world.clock.advance(2)
    assert (await world.transactions.check_once()).checked == 1
    assert world.local.checks == [("half-1", txid)]
    world.clock.advance(29_000)
    assert (await world.transactions.check_once()).checked == 0
    world.clock.advance(1_001)
    assert (await world.transactions.check_once()).checked == 1
    # The producer answers: the orphan is settled and never checked again.
    await world.transactions.end("txn", "half-1", txid, True, from_check=True)
    world.clock.advance(60_000)
    assert await world.transactions.check_once() == CheckRound()
    assert await world.received("txn") == ["half-1"]
    assert len(world.local.checks) == 2


async def test_orphan_is_rolled_back_after_the_last_check(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.local.groups.add("txn")
    await world.producer.send([_half(1)])
    world.clock.advance(6_000)
    rounds = []
    for _ in range(POLICY.check_max + 1):
        world.clock.advance(1)
        rounds.append(await world.transactions.check_once())
        world.clock.advance(30_000)
    assert [r.checked for r in rounds] == [1, 1, 1, 0]
    assert rounds[-1].rolled_back == 1
    assert len(world.local.checks) == POLICY.check_max
    assert world.store.half_count == 0
    assert "rolled back: no answer after 3 check-backs" in caplog.text
    assert await world.received("txn") == []


async def test_orphan_without_any_producer_is_still_counted(world: World) -> None:
    await world.producer.send([_half(1)])
    world.clock.advance(6_001)
    for _ in range(POLICY.check_max):
        assert (await world.transactions.check_once()).unreachable == 1
        world.clock.advance(30_001)
    assert (await world.transactions.check_once()).rolled_back == 1
    assert world.store.half_count == 0


async def test_check_reaches_a_producer_on_another_broker(world: World) -> None:
    coordination = MemoryCoordination(world.clock)
    peers = MemoryPeers()
    here = TransactionProcessor(
        world.store,
        world.clock,
        Producers(),
        owner="b1",
        policy=POLICY,
        coordination=coordination,
        peers=peers,
    )
    remote_producers = Producers({"txn"})
    there = TransactionProcessor(
        world.store,
        world.clock,
        remote_producers,
        owner="b2",
        policy=POLICY,
        coordination=coordination,
        peers=peers,
    )
    peers.add("b1", here)
    peers.add("b2", there)
    coordination.register_producers("b2", ["txn"])
    (result,) = await world.producer.send([_half(1)])
    world.clock.advance(6_001)
    assert await here.maybe_take_lease()
    assert not await there.maybe_take_lease()
    assert (await here.check_once()).checked == 1
    assert remote_producers.checks == [("half-1", transaction_ids.encode(result.queue, "half-1"))]
    # A dead broker is skipped (the nameserver marks it down).
    coordination.set_alive("b2", False)
    world.clock.advance(30_001)
    assert (await here.check_once()).unreachable == 1


async def test_check_lease_is_exclusive_and_taken_over_when_the_owner_dies(world: World) -> None:
    coordination = MemoryCoordination(world.clock)
    policy = dataclasses.replace(POLICY, lease_ttl_ms=10_000)
    brokers = [
        TransactionProcessor(
            world.store,
            world.clock,
            Producers(),
            owner=name,
            policy=policy,
            coordination=coordination,
        )
        for name in ("b1", "b2")
    ]
    assert [await b.maybe_take_lease() for b in brokers] == [True, False]
    world.clock.advance(9_000)
    assert [await b.maybe_take_lease() for b in brokers] == [True, False]  # b1 renewed
    # b1 dies (stops renewing): b2 takes over once the lease expires, not before.
    world.clock.advance(9_999)
    assert not await brokers[1].maybe_take_lease()
    world.clock.advance(1)
    assert await brokers[1].maybe_take_lease()
    assert coordination.lease_owner(LEASE_NAME) == "b2"


async def test_the_lease_holder_checks_on_while_the_nameserver_is_away(world: World) -> None:
    class AwayNameserver(MemoryCoordination):
        """Leases as the memory coordination does, or UNAVAILABLE while ``away``."""

        away = False

        async def try_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
            if self.away:
                raise BrokerError(codes.UNAVAILABLE, "lease: the nameserver cannot be reached")
            return await super().try_lease(name, owner, ttl_ms)

    coordination = AwayNameserver(world.clock)
    brokers = [
        TransactionProcessor(
            world.store,
            world.clock,
            Producers(),
            owner=name,
            policy=POLICY,
            coordination=coordination,
        )
        for name in ("b1", "b2")
    ]
    assert [await b.maybe_take_lease() for b in brokers] == [True, False]
    coordination.away = True
    # Nobody can take the lease meanwhile: the holder goes on, the other stays out.
    assert [await b.maybe_take_lease() for b in brokers] == [True, False]
    coordination.away = False
    assert [await b.maybe_take_lease() for b in brokers] == [True, False]


async def test_lease_failures_are_quiet_at_start_then_warned_once_per_outage(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    class Away(MemoryCoordination):
        away = True

        async def try_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
            if self.away:
                raise BrokerError(codes.UNAVAILABLE, "lease: the nameserver cannot be reached")
            return await super().try_lease(name, owner, ttl_ms)

    coordination = Away(world.clock)
    broker = TransactionProcessor(
        world.store, world.clock, Producers(), owner="b1", policy=POLICY, coordination=coordination
    )

    async def levels() -> list[int]:
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="broker.transaction"):
            await broker.maybe_take_lease()
        return [r.levelno for r in caplog.records if "lease unavailable" in r.message]

    assert await levels() == [logging.INFO]  # starting: the nameserver may not be up yet
    world.clock.advance(NAMESERVER_QUIET_AT_START_MS)
    assert await levels() == [logging.WARNING]
    assert await levels() == [logging.DEBUG]  # the same outage
    coordination.away = False
    await broker.maybe_take_lease()
    coordination.away = True
    assert await levels() == [logging.WARNING]  # a new one


async def test_a_lease_refused_for_another_cause_is_not_kept(world: World) -> None:
    class Refusing(MemoryCoordination):
        refuse = False

        async def try_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
            if self.refuse:
                raise BrokerError(codes.NOT_FOUND, "no such cluster")
            return await super().try_lease(name, owner, ttl_ms)

    coordination = Refusing(world.clock)
    broker = TransactionProcessor(
        world.store, world.clock, Producers(), owner="b1", policy=POLICY, coordination=coordination
    )
    assert await broker.maybe_take_lease()
    coordination.refuse = True
    assert not await broker.maybe_take_lease()


async def test_a_stopping_broker_does_not_wait_for_a_gone_nameserver_to_release(
    world: World,
) -> None:
    class GoneNameserver(MemoryCoordination):
        """Grants the lease, then stops answering (stopped before the broker)."""

        def __init__(self, clock: ManualClock) -> None:
            super().__init__(clock)
            self.granted = asyncio.Event()
            self.release_asked = asyncio.Event()

        async def try_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
            taken = await super().try_lease(name, owner, ttl_ms)
            self.granted.set()
            return taken

        async def release_lease(self, name: str, owner: str) -> None:
            self.release_asked.set()
            await asyncio.Event().wait()  # never answers

    coordination = GoneNameserver(world.clock)
    broker = TransactionProcessor(
        world.store, world.clock, Producers(), owner="b1", policy=POLICY, coordination=coordination
    )
    task = asyncio.create_task(broker.run())
    await asyncio.wait_for(coordination.granted.wait(), 10)
    assert broker.holds_lease
    task.cancel()
    # Bounded by LEASE_RELEASE_TIMEOUT_S (1 s); the 10 s is only a deadline.
    done, _ = await asyncio.wait([task], timeout=10)
    assert task in done
    assert task.cancelled()
    assert coordination.release_asked.is_set()


def test_plan_round_gives_up_on_orphans_out_of_checks() -> None:
    def half(n: int, count: int) -> HalfMessage:
        return HalfMessage(_half(n), QueueRef("txn", 0), 0, count)

    plan = plan_round([half(1, 0), half(2, 3), half(3, 2), half(4, 9)], check_max=3)
    assert [h.message.message_id for h in plan.check] == ["half-1", "half-3"]
    assert [h.message.message_id for h in plan.give_up] == ["half-2", "half-4"]


@pytest.mark.parametrize(
    "fields",
    [
        {"check_max": 0},
        {"delay_ms": -1},
        {"scan_period_ms": 0},
        {"lease_ttl_ms": 1_000, "scan_period_ms": 1_000},
        {"batch_max": 0},
    ],
)
def test_check_policy_rejects_nonsense(fields: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must"):
        CheckPolicy(**fields)
