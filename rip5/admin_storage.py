"""What ``rip5 admin`` does with the storage groups: message query, consumer progress,
offset resets and dead-letter resends.

One :class:`ClusterAdmin` per command: routes and the cluster's groups come
from the nameserver; each storage call goes to a raft group's leader (the
nameserver's view first, then the group's other replicas, following
NOT_LEADER hints) through :func:`angelia_rpc.failover.call_leader`, as the
broker's storage port does.

- **Message by id.** A RocketMQ 5 message id is made by the client (it does
  not say where the message went), so, as RocketMQ's admin does with its
  index files, the query asks every raft group (or, with a topic, the
  groups of the topic's queues) and each searches its key index
  (``storage_node/key_index.py``).
- **Progress** (``group lag``): per queue, read on the group's leader
  (``storage.group_progress``): pop and offset consumers share one
  consumption state, so one reading serves both. Without a topic, every
  queue of each topic the group consumed, not only the queues it has state
  in (its consumers may not have popped from each queue yet).
- **Reset** (``group reset-offset``): per queue of the topic, the target
  offset (first, end, or the first stored at or after a time) is committed
  (``storage.commit_offset``): every message below it counts as consumed,
  every message at or above it is fresh again, and the group's leases on the
  queue are dropped: messages in flight come again (their receipt handles
  turn invalid, so an ack of one fails with INVALID_RECEIPT_HANDLE).
- **Dead-letter resend** (``dlq resend``): see :meth:`ClusterAdmin.resend_dead_letters`.

SHELL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from angelia_rpc import AngeliaError, Peers
from angelia_rpc.cluster_services import StorageService
from angelia_rpc.failover import Failover, FailoverPolicy, call_leader
from angelia_rpc.nameserver_client import NameserverClient
from broker.processor.selector import group_queue_index
from protocol import errors
from protocol import nameserver_api as ns
from protocol import storage_api as st
from protocol.vocabulary import MessageType
from rip5.rpc_environment import rpc_config_from_environment
from storage_node.partition.queues import dead_letter_topic

T = TypeVar("T")

CALL_TIMEOUT_MS = 5_000
DEADLINE_MS = 15_000
DROP_POLL_MS = 250
"""How often ``topic delete`` looks whether the storage groups dropped the topic's data."""
RESEND_CURSOR_GROUP = "rip5-admin-dlq-resend"
"""The consumer group whose committed offset in each dead-letter queue marks how far
``dlq resend`` got: a rerun starts there."""
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
"""The property naming the id a resent dead letter had (RocketMQ's name for it)."""
RESEND_BATCH = 64
"""Dead letters read, resent and committed per step."""
_POLICY = FailoverPolicy(0.05, 0.5, call_timeout_ms=CALL_TIMEOUT_MS)


@dataclass(frozen=True, slots=True)
class Found:
    """A message found in raft group ``group_id``."""

    group_id: int
    stored: st.StoredMessage


@dataclass(frozen=True, slots=True)
class QueryOutcome:
    """The messages found; whether every group that answered searched its whole range;
    the groups that did not answer (group id -> why), whose messages may be missing."""

    found: list[Found]
    complete: bool
    unanswered: dict[int, str] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Progress:
    """A queue's progress for a consumer group, and the raft group serving it."""

    group_id: int
    queue: st.QueueProgress


@dataclass(frozen=True, slots=True)
class Reset:
    """One queue's reset: the committed offset before (GetOffset's, past messages in
    flight; -1: never consumed) and after."""

    queue_id: int
    before: int
    after: int


@dataclass(frozen=True, slots=True)
class Resent:
    """What a dead-letter resend did: messages resent per original topic, and how
    many were already stored there (a rerun after an interrupted one, within the
    storage's dedup window)."""

    by_topic: dict[str, int]
    duplicates: int

    @property
    def count(self) -> int:
        """Messages resent in all."""
        return sum(self.by_topic.values())


class ClusterAdmin:
    """The calls of one admin command (see the module docstring)."""

    def __init__(self, nameserver: NameserverClient, peers: Peers, cluster: str) -> None:
        self._nameserver = nameserver
        self._peers = peers
        self._cluster = cluster
        self._status: ns.ClusterStatusResponse | None = None
        self._routes: dict[str, ns.RouteResponse] = {}

    @classmethod
    async def using(
        cls, addresses: Sequence[str], cluster: str, action: Callable[[ClusterAdmin], Awaitable[T]]
    ) -> T:
        """``action`` with a new admin on ``addresses``; its connections closed after."""
        nameserver = NameserverClient(list(addresses), rpc_config_from_environment())
        peers = Peers(rpc_config_from_environment(call_timeout_ms=CALL_TIMEOUT_MS))
        try:
            return await action(cls(nameserver, peers, cluster))
        finally:
            await nameserver.close()
            await peers.close()

    # -- metadata --------------------------------------------------------------------

    async def status(self) -> ns.ClusterStatusResponse:
        """The cluster's status (read once per command)."""
        if self._status is None:
            request = ns.NameRequest(self._cluster)
            self._status = await self._nameserver.call(
                lambda s: s.cluster_status(request, timeout_ms=CALL_TIMEOUT_MS)
            )
        return self._status

    async def route(self, topic: str) -> ns.RouteResponse:
        """A topic's route (read once per command)."""
        route = self._routes.get(topic)
        if route is None:
            request = ns.NameRequest(topic)
            route = await self._nameserver.call(
                lambda s: s.route(request, timeout_ms=CALL_TIMEOUT_MS)
            )
            self._routes[topic] = route
        return route

    async def require_group(self, consumer_group: str) -> None:
        """Raise the nameserver's NOT_FOUND unless ``consumer_group`` exists."""
        request = ns.NameRequest(consumer_group)
        await self._nameserver.call(
            lambda s: s.get_consumer_group(request, timeout_ms=CALL_TIMEOUT_MS)
        )

    async def group_ids(self) -> list[int]:
        """Every raft group of the cluster."""
        cluster = (await self.status()).cluster
        return list(range(cluster.first_group_id, cluster.first_group_id + cluster.group_count))

    async def call_group(
        self, group_id: int, method: Callable[[StorageService, int], Awaitable[T]]
    ) -> T:
        """``method(stub, timeout_ms)`` on raft group ``group_id``'s leader."""
        status = await self.status()
        addresses = {n.node_id: n.address for n in status.storage_nodes}
        group = next((g for g in status.groups if g.group_id == group_id), None)
        nodes = [] if group is None else [group.leader, *group.replicas]
        candidates = list(dict.fromkeys(addresses[n] for n in nodes if n in addresses))
        if not candidates:
            candidates = list(addresses.values())
        loop = asyncio.get_running_loop()
        failover = Failover(candidates, _POLICY, loop.time() + DEADLINE_MS / 1000)

        def attempt(address: str, timeout_ms: int) -> Awaitable[T]:
            return method(
                self._peers.stub(StorageService, address, wait_for_ready=False), timeout_ms
            )

        return await call_leader(failover, attempt, clock=loop.time, sleep=asyncio.sleep)

    async def _topic_groups(self, topic: str) -> dict[int, list[int]]:
        """The raft groups serving ``topic``'s queues, each with its queue ids."""
        groups: dict[int, list[int]] = {}
        for info in (await self.route(topic)).queues:
            groups.setdefault(info.group_id, []).append(info.queue_id)
        return groups

    # -- topic deletion --------------------------------------------------------------

    async def delete_topic(
        self, topic: str, wait_ms: int, signed: ns.SignedBy | None = None
    ) -> tuple[int, bool]:
        """Delete ``topic`` at the nameserver (``signed``: by an ACL user); then, unless
        ``wait_ms`` is 0, wait (at
        most that long) until every queue it had is empty on its group's leader
        (the leaders drop a deleted topic's data in their retention rounds:
        ``storage_node.retention``). The revision of the deletion, and whether the
        data was seen gone."""
        queues = (await self.route(topic)).queues
        request = ns.NameRequest(topic, signed or ns.SignedBy())
        deleted = await self._nameserver.call(
            lambda s: s.delete_topic(request, timeout_ms=CALL_TIMEOUT_MS)
        )
        if wait_ms <= 0:
            return deleted.revision, False
        if not (await self.status()).storage_nodes:
            return deleted.revision, True  # no storage node: no data anywhere
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        left = [(info.group_id, info.queue_id) for info in queues]
        while left:
            still = []
            for group_id, queue_id in left:
                try:
                    answer = await self.call_group(group_id, queue_info_call(topic, queue_id))
                except AngeliaError:
                    still.append((group_id, queue_id))  # no leader now: asked again
                    continue
                if answer.end_offset > 0:
                    still.append((group_id, queue_id))
            left = still
            if left and loop.time() >= deadline:
                return deleted.revision, False
            if left:
                await asyncio.sleep(DROP_POLL_MS / 1000)
        return deleted.revision, True

    # -- message query ---------------------------------------------------------------

    async def query_messages(
        self,
        *,
        topic: str = "",
        message_id: str = "",
        key: str = "",
        begin_ms: int = 0,
        end_ms: int = st.TIME_MAX_MS,
        limit: int = 32,
    ) -> QueryOutcome:
        """Messages by id or key in ``[begin_ms, end_ms]``: every group of the topic (or
        of the cluster, for an id without a topic) searched at once; oldest first. A
        group that fails is named in the outcome, the others' messages still shown;
        if every group fails, the first failure is raised."""
        group_ids = sorted(await self._topic_groups(topic)) if topic else await self.group_ids()
        request = st.QueryMessagesRequest(0, topic, message_id, key, begin_ms, end_ms, limit)

        async def one(group_id: int) -> st.QueryMessagesResponse | AngeliaError:
            asked = dataclasses.replace(request, group_id=group_id)
            try:
                return await self.call_group(
                    group_id, lambda stub, ms: stub.query_messages(asked, timeout_ms=ms)
                )
            except AngeliaError as error:
                return error

        answers = dict(zip(group_ids, await asyncio.gather(*map(one, group_ids)), strict=True))
        failed = {g: a for g, a in answers.items() if isinstance(a, AngeliaError)}
        if failed and len(failed) == len(answers):
            raise next(iter(failed.values()))
        responses = {g: a for g, a in answers.items() if not isinstance(a, AngeliaError)}
        found = [Found(g, stored) for g, r in responses.items() for stored in r.messages]
        found.sort(key=lambda f: (f.stored.store_timestamp_ms, f.group_id))
        return QueryOutcome(
            found[:limit],
            all(r.complete for r in responses.values()),
            {g: f"{e.code.name}: {e.message}" for g, e in failed.items()},
        )

    # -- consumer progress -----------------------------------------------------------

    async def group_lag(self, consumer_group: str, topic: str = "") -> list[Progress]:
        """``consumer_group``'s progress in every queue of ``topic``; without one, in
        every queue of each topic the group consumed (has consumption state in a queue
        of), as RocketMQ's consumerProgress lists them: a queue of such a topic that
        the group never popped from counts every message in it. Sorted by topic and
        queue id."""
        await self.require_group(consumer_group)
        if topic:
            rows = await self._topic_progress(consumer_group, topic)
        else:
            consumed = await self._progress(consumer_group, "", await self.group_ids())
            topics = sorted({row.queue.topic for row in consumed})
            per_topic = await asyncio.gather(
                *(self._consumed_topic_progress(consumer_group, t, consumed) for t in topics)
            )
            rows = [row for rows in per_topic for row in rows]
        rows.sort(key=lambda row: (row.queue.topic, row.queue.queue_id))
        return rows

    async def _progress(
        self, consumer_group: str, topic: str, group_ids: Sequence[int]
    ) -> list[Progress]:
        """``storage.group_progress`` of ``group_ids``, at once: each raft group's queues
        the group has state in (with ``topic``: each of the topic's queues it holds)."""
        request = st.GroupProgressRequest(0, consumer_group, topic)

        async def one(group_id: int) -> list[Progress]:
            asked = dataclasses.replace(request, group_id=group_id)
            response = await self.call_group(
                group_id, lambda stub, ms: stub.group_progress(asked, timeout_ms=ms)
            )
            return [Progress(group_id, queue) for queue in response.queues]

        return [row for rows in await asyncio.gather(*(one(g) for g in group_ids)) for row in rows]

    async def _topic_progress(self, consumer_group: str, topic: str) -> list[Progress]:
        """The group's progress in every queue of ``topic`` (by its route), an empty
        one (never sent to) too."""
        rows = await self._progress(consumer_group, topic, sorted(await self._topic_groups(topic)))
        seen = {row.queue.queue_id for row in rows if row.queue.topic == topic}
        for info in (await self.route(topic)).queues:
            if info.queue_id not in seen:
                empty = st.QueueProgress(topic, info.queue_id, 0, 0, -1, 0, 0, -1)
                rows.append(Progress(info.group_id, empty))
        return rows

    async def _consumed_topic_progress(
        self, consumer_group: str, topic: str, consumed: Sequence[Progress]
    ) -> list[Progress]:
        """:meth:`_topic_progress` of a topic the group consumed; a topic the
        nameserver no longer knows (deleted) keeps the ``consumed`` queues only."""
        try:
            return await self._topic_progress(consumer_group, topic)
        except AngeliaError as error:
            if error.code is not errors.TOPIC_NOT_FOUND:
                raise
            return [row for row in consumed if row.queue.topic == topic]

    async def reset_offset(
        self, consumer_group: str, topic: str, *, to: str = "", timestamp_ms: int = -1
    ) -> list[Reset]:
        """Reset ``consumer_group`` in every queue of ``topic`` to ``to`` ("earliest":
        each queue's first offset, "latest": its end) or to the first message stored
        at or after ``timestamp_ms`` (see the module docstring)."""
        if (to in ("earliest", "latest")) == (timestamp_ms >= 0):
            raise ValueError("reset to one of earliest, latest or a time")
        await self.require_group(consumer_group)
        return [
            await self._reset_queue(info, consumer_group, topic, to, timestamp_ms)
            for info in (await self.route(topic)).queues
        ]

    async def _reset_queue(
        self,
        info: ns.QueueRouteInfo,
        consumer_group: str,
        topic: str,
        to: str,
        timestamp_ms: int,
    ) -> Reset:
        """:meth:`reset_offset` in one queue."""
        queue_id = info.queue_id
        ask = st.QueueInfoRequest(topic, queue_id, timestamp_ms)
        offsets = await self.call_group(
            info.group_id, lambda stub, ms: stub.queue_info(ask, timeout_ms=ms)
        )
        target = {"earliest": offsets.first_offset, "latest": offsets.end_offset}.get(
            to, offsets.timestamp_offset
        )
        get = st.GetOffsetRequest(consumer_group, topic, queue_id)
        before = await self.call_group(
            info.group_id, lambda stub, ms: stub.get_offset(get, timeout_ms=ms)
        )
        commit = st.CommitOffsetRequest(consumer_group, topic, queue_id, target)
        after = await self.call_group(
            info.group_id, lambda stub, ms: stub.commit_offset(commit, timeout_ms=ms)
        )
        return Reset(
            queue_id,
            -1 if before.offset is None else before.offset,
            -1 if after.offset is None else after.offset,
        )

    # -- dead letters ----------------------------------------------------------------

    async def resend_dead_letters(self, consumer_group: str) -> Resent:
        """Append the messages of ``%DLQ%<consumer_group>`` to their original topics.

        Each dead letter goes back as a new message with its original body, keys,
        tag, message group and properties, plus ``ORIGIN_MESSAGE_ID`` (RocketMQ's
        property for the id a retried message had). Its id is new (the original id
        would be dropped by the storage's dedup window while the original is
        remembered there) but fixed by the dead letter's place: the same dead
        letter resent twice gets the same id, and lands in the same queue (a FIFO
        message in the queue its message group hashes to, any other in the one its
        id hashes to). The group's dead-letter queues
        (one per raft group) stay as they are: how far the resend got is kept as
        the committed offset of ``RESEND_CURSOR_GROUP`` in each of them, advanced
        after every appended batch. So a rerun resends only dead letters that
        arrived since; a batch appended by a run that was interrupted before its
        commit is appended again by the rerun, and the storage's dedup window
        (same topic and id, 2 minutes) drops it then; later, it would be
        delivered twice (at least once).
        """
        dlq = dead_letter_topic(consumer_group)
        by_topic: dict[str, int] = {}
        duplicates = 0
        for group_id in await self.group_ids():
            duplicates += await self._resend_queue(group_id, (dlq, group_id), by_topic)
        return Resent(by_topic, duplicates)

    async def _resend_queue(
        self, group_id: int, queue: tuple[str, int], by_topic: dict[str, int]
    ) -> int:
        """Resend the dead letters of ``queue`` (served by raft group ``group_id``) past
        the resend cursor, counting them into ``by_topic``; the duplicates found."""
        topic, queue_id = queue
        info = await self.call_group(
            group_id,
            lambda stub, ms: stub.queue_info(st.QueueInfoRequest(topic, queue_id), timeout_ms=ms),
        )
        cursor_request = st.GetOffsetRequest(RESEND_CURSOR_GROUP, topic, queue_id)
        cursor = await self.call_group(
            group_id, lambda stub, ms: stub.get_offset(cursor_request, timeout_ms=ms)
        )
        offset = max(
            info.first_offset, info.first_offset if cursor.offset is None else cursor.offset
        )
        duplicates = 0
        while offset < info.end_offset:
            resent = await self._resend_batch(group_id, topic, queue_id, offset, by_topic)
            if resent is None:
                break
            offset, found = resent
            duplicates += found
        return duplicates

    async def _resend_batch(
        self, group_id: int, topic: str, queue_id: int, offset: int, by_topic: dict[str, int]
    ) -> tuple[int, int] | None:
        """Resend up to ``RESEND_BATCH`` dead letters of a queue from ``offset`` and
        commit the cursor past them: (the offset after them, duplicates found); None
        if none was there."""
        read = st.ReadRequest(topic, queue_id, offset, RESEND_BATCH)
        batch = await self.call_group(group_id, lambda stub, ms: stub.read(read, timeout_ms=ms))
        if not batch.messages:
            return None
        duplicates = 0
        # One append per target queue (each in dead-letter order).
        by_queue: dict[tuple[str, int], list[st.Message]] = {}
        for stored in batch.messages:
            original = await self._original(stored)
            by_queue.setdefault((original.topic, original.queue_id), []).append(original)
            by_topic[original.topic] = by_topic.get(original.topic, 0) + 1
        for messages in by_queue.values():
            duplicates += await self._append(messages)
        offset = batch.messages[-1].queue_offset + 1
        commit = st.CommitOffsetRequest(RESEND_CURSOR_GROUP, topic, queue_id, offset)
        await self.call_group(group_id, lambda stub, ms: stub.commit_offset(commit, timeout_ms=ms))
        return offset, duplicates

    async def _original(self, stored: st.StoredMessage) -> st.Message:
        """The message a dead letter was, bound for a queue of its original topic, with
        its id made from the dead letter's place (see :meth:`resend_dead_letters`)."""
        dead = stored.message
        topic = dead.dead_letter_topic
        if not topic:
            raise ValueError(f"dead letter {dead.message_id} names no original topic")
        queues = [info.queue_id for info in (await self.route(topic)).queues]
        fifo = dead.message_type == MessageType.FIFO and dead.message_group
        origin_id = dead.dead_letter_message_id or dead.message_id
        place = f"{origin_id}|{dead.topic}|{dead.queue_id}|{stored.queue_offset}"
        message_id = "01" + hashlib.sha256(place.encode()).hexdigest()[:32].upper()
        picked = queues[group_queue_index(dead.message_group if fifo else message_id, len(queues))]
        return dataclasses.replace(
            dead,
            topic=topic,
            queue_id=picked,
            message_id=message_id,
            properties={**dead.properties, ORIGIN_MESSAGE_ID: origin_id},
            message_type=int(MessageType.FIFO if fifo else MessageType.NORMAL),
            delivery_timestamp_ms=0,
            dead_letter_topic="",
            dead_letter_message_id="",
        )

    async def _append(self, messages: list[st.Message]) -> int:
        """Append messages of one queue as one batch; how many were stored already
        (duplicates)."""
        topic, queue_id = messages[0].topic, messages[0].queue_id
        route = await self.route(topic)
        group_id = next(q.group_id for q in route.queues if q.queue_id == queue_id)
        request = st.AppendRequest(topic, queue_id, messages)
        response = await self.call_group(
            group_id, lambda stub, ms: stub.append(request, timeout_ms=ms)
        )
        return sum(1 for outcome in response.outcomes if outcome.duplicate)


def queue_info_call(
    topic: str, queue_id: int
) -> Callable[[StorageService, int], Awaitable[st.QueueInfoResponse]]:
    """A ``call_group`` method asking a queue's offsets."""
    request = st.QueueInfoRequest(topic, queue_id)

    def ask(stub: StorageService, timeout_ms: int) -> Awaitable[st.QueueInfoResponse]:
        return stub.queue_info(request, timeout_ms=timeout_ms)

    return ask
