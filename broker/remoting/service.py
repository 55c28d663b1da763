"""The remoting adapter: read a request's header and body, call a processor, answer.

One method per request code; each validates and converts (``convert.py``),
calls the same processors and ports as the gRPC adapter, and builds the
response. Errors become response codes only through ``status.py``. A code
without a method is answered REQUEST_CODE_NOT_SUPPORTED.

Name-server requests are served here too (a 4.x client may name any broker
as its name server): a route lists every live broker's remoting address as
one broker serving all of the topic's queues (the same queue id through any
broker is the same queue of the cluster).

Consuming by offset: PULL_MESSAGE (long polled up to the consumer's suspend
time) and the consumer offsets, over the same pull processor as gRPC's
PullMessage; a failed consume comes back through the group's retry topic
(CONSUMER_SEND_MSG_BACK). Orderly consumers' queue locks (LOCK_BATCH_MQ) are
leases through the coordination port. A route lists every queue through every
broker, but each queue is served to consumers through one broker
(:func:`queue_owner`): a pull of another broker's queue is held and answered
PULL_NOT_FOUND at the group's committed offset, and its commits are not stored.
The consumer list of a group names only the clients connected to this broker.

Operators' lookups: QUERY_MESSAGE (by key, or by id) through the storage's key
index, and VIEW_MESSAGE_BY_ID (an offset message id and the topic).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from broker.acl import AclGuard, as_broker_error, host_of
from broker.domain import PulledMessage, QueueRef
from broker.errors import BrokerError, Reason, not_implemented
from broker.processor import transaction_id as transaction_ids
from broker.processor import validation
from broker.processor.filter import FilterKind, parse_filter
from broker.processor.polling import plan_poll_ms
from broker.processor.producer import ProducerProcessor
from broker.processor.pull import PullProcessor
from broker.processor.route import RouteProcessor
from broker.processor.transaction import TransactionProcessor
from broker.remoting import acl_demands, convert
from broker.remoting.clients import RemotingClients
from broker.remoting.producers import RemotingProducers, Write
from broker.remoting.status import code_of, remark_of, unsupported_remark
from broker.services.base import Clock, Coordination, MessageStore
from protocol import errors as codes
from protocol import routing
from protocol.acl import Forbidden, Unauthenticated
from protocol.remoting import bodies, headers
from protocol.remoting.codes import RequestCode, ResponseCode
from protocol.remoting.frames import RemotingCommand
from protocol.vocabulary import MessageType, Placement

log = logging.getLogger("broker.remoting")

SQL92 = "SQL92"
"""A pull's expressionType for a SQL92 subscription (TAG otherwise)."""
HALVES_MAX = 65_536
"""Half messages whose transaction this broker can end by message id alone."""
QUEUE_LOCK_TTL_MS = 60_000
"""How long a queue lock lasts unless renewed (RocketMQ's rebalance lock lifetime:
an orderly push consumer renews its locks every 20 s)."""
OWNER_RECHECK_MS = 1_000
"""How often a pull held by a broker that does not serve its queue looks again."""
QUERY_MESSAGES_MAX = 64
"""The most messages one QUERY_MESSAGE answers (a query by id asks for this many)."""
PULLING_GROUPS_MAX = 65_536
"""Consumer groups whose pulled topics this broker remembers (for send-backs)."""


class BrokerDirectory(Protocol):
    """Where the live brokers of the cluster serve remoting clients."""

    async def remoting_addresses(self) -> list[str]:
        """host:port of every live broker's remoting endpoint (this one's included)."""
        ...

    async def serving_addresses(self) -> list[str]:
        """The brokers the queues are shared out among for consumers (see
        :func:`queue_owner`); empty: every broker serves every queue."""
        ...


class FixedBrokers:
    """A directory of a fixed list of addresses (a lone broker, tests); ``serving``:
    the brokers queues are shared out among (none by default: no sharing out)."""

    def __init__(self, addresses: list[str], serving: Sequence[str] = ()) -> None:
        self.addresses = addresses
        self.serving = list(serving)

    async def remoting_addresses(self) -> list[str]:
        """The addresses given."""
        return list(self.addresses)

    async def serving_addresses(self) -> list[str]:
        """The serving addresses given."""
        return list(self.serving)


def queue_owner(queue_id: int, serving: Sequence[str]) -> str | None:
    """The broker through which consumers get queue ``queue_id`` of any topic: the
    ``queue_id mod n``-th of the ``n`` serving brokers in address order (None when none
    are named: every broker serves it).

    A route lists every queue under every broker and a 4.x consumer's rebalance shares
    out (broker, queue) pairs, so without an owner one queue would be consumed through
    every broker. Brokers that briefly disagree on the live set may both serve a queue
    (a message delivered twice) or neither (a pause): never a message skipped."""
    if not serving:
        return None
    ordered = sorted(set(serving))
    return ordered[queue_id % len(ordered)]


class MessageIds:
    """Ids for messages a client sent without one: 16 bytes in upper-case hex (the
    form of a 4.x client's ids), a random prefix drawn once per process and a counter."""

    def __init__(self) -> None:
        self._prefix = os.urandom(8)
        self._counter = itertools.count()

    def __call__(self) -> str:
        return (self._prefix + next(self._counter).to_bytes(8, "big")).hex().upper()


@dataclass(frozen=True, slots=True)
class Connection:
    """What a request knows of the connection it came on."""

    connection_id: int
    peer: str  # the client's host:port


Handler = Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]


class RemotingService:
    """The remoting adapter over the processors (see the module docstring).

    ``address`` is this broker's remoting endpoint (host:port): the store host
    of the offset message ids it hands out.
    """

    def __init__(
        self,
        *,
        route: RouteProcessor,
        producer: ProducerProcessor,
        store: MessageStore,
        clock: Clock,
        brokers: BrokerDirectory,
        cluster: str,
        address: str,
        transactions: TransactionProcessor | None = None,
        producers: RemotingProducers | None = None,
        pulls: PullProcessor | None = None,
        coordination: Coordination | None = None,
        acl: AclGuard | None = None,
    ) -> None:
        self._route = route
        self.acl = acl  # ACL 2.0: every request authenticated and checked (None: off)
        self._producer = producer
        self._store = store
        self._clock = clock
        self.brokers = brokers
        self._cluster = cluster
        self.address = address
        self._transactions = transactions
        self.clients = RemotingClients()
        self.producers = producers or RemotingProducers()
        self._pulls = pulls
        self._coordination = coordination
        self._new_id = MessageIds()
        # Open connections: how to send a command of the broker's own on each.
        self._writers: dict[int, Write] = {}
        self._opaques = itertools.count(1)
        # Half messages sent through this broker, oldest first (see end_transaction).
        self._halves: dict[str, QueueRef] = {}
        # The ordinary topics each group pulled through this broker, most recent group
        # last: a send-back of the C++ client names no topic (see send_back).
        self._pulled_topics: dict[str, set[str]] = {}
        self._handlers: dict[int, Handler] = {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            RequestCode.SEND_MESSAGE: self.send,
            RequestCode.SEND_MESSAGE_V2: self.send,
            RequestCode.SEND_BATCH_MESSAGE: self.send,
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            RequestCode.END_TRANSACTION: self.end_transaction,
            RequestCode.PULL_MESSAGE: self.pull,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
            RequestCode.QUERY_MESSAGE: self.query_messages,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
            RequestCode.LOCK_BATCH_MQ: self.lock_queues,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_queues,
        }

    async def handle(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """The response to ``request`` (also computed for a oneway request: the caller
        decides not to send it)."""
        handler = self._handlers.get(request.code)
        if handler is None:
            return request.reply(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, unsupported_remark(request.code)
            )
        try:
            if self.acl is not None:
                self._check_acl(self.acl, request, connection)
            return await handler(request, connection)
        except Exception as error:  # noqa: BLE001 - answered with a response code
            return request.reply(code_of(error), remark_of(error))

    @staticmethod
    def _check_acl(guard: AclGuard, request: RemotingCommand, connection: Connection) -> None:
        """Raise the error refusing ``request`` under ACL 2.0 (see ``broker/acl.py``)."""
        try:
            user, tables = guard.authenticate_classic(request.ext_fields, request.body)
            guard.authorize(user, tables, acl_demands.demand_of(request), host_of(connection.peer))
        except (Unauthenticated, Forbidden) as error:
            raise as_broker_error(error) from None

    # -- name server ------------------------------------------------------------------

    async def route(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """GET_ROUTEINFO_BY_TOPIC: the topic's queues, served by every live broker."""
        name = headers.topic_header(request.ext_fields)
        try:
            topic = await self._route.route(name)
        except BrokerError as error:
            if error.reason in (Reason.ILLEGAL_TOPIC, Reason.CONSUMER_GROUP_NOT_FOUND):
                # e.g. TBW102, or the retry topic of no group: no such route here
                return request.reply(ResponseCode.TOPIC_NOT_EXIST, error.message)
            raise
        readable = any(queue.permission.readable for queue in topic.queues)
        writable = any(queue.permission.writable for queue in topic.queues)
        perm = (bodies.PERM_READ if readable else 0) | (bodies.PERM_WRITE if writable else 0)
        brokers = convert.route_brokers(await self.brokers.remoting_addresses())
        body = bodies.route_body(self._cluster, brokers, topic.queue_count, topic.queue_count, perm)
        return request.reply(ResponseCode.SUCCESS, body=body)

    async def cluster_info(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        """GET_BROKER_CLUSTER_INFO: the live brokers, all in this broker's cluster."""
        brokers = convert.route_brokers(await self.brokers.remoting_addresses())
        return request.reply(
            ResponseCode.SUCCESS, body=bodies.cluster_info_body(self._cluster, brokers)
        )

    # -- producing --------------------------------------------------------------------

    async def send(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """SEND_MESSAGE (long keys), SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE (short keys)."""
        header = headers.send_header(
            request.ext_fields,
            short_keys=request.code
            in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE),
        )
        topic = await self._route.route(header.topic)
        messages, named = convert.messages_from_send(
            header,
            request.body,
            batch=request.code == RequestCode.SEND_BATCH_MESSAGE or header.batch,
            born_host=connection.peer,
            now_ms=self._clock.now_ms(),
            new_id=self._new_id,
            fifo_topic=MessageType.FIFO in topic.message_types,
        )
        results = await self._producer.send(messages)
        for message, result in zip(messages, results, strict=True):
            if result.placement is Placement.HALF:
                self._remember_half(message.message_id, result.queue)
                self.producers.sent_half(
                    connection.connection_id, header.topic, header.producer_group
                )
        return request.reply(
            ResponseCode.SUCCESS,
            ext_fields=convert.send_response_fields(messages, named, results, self.address),
        )

    def _remember_half(self, message_id: str, queue: QueueRef) -> None:
        self._halves[message_id] = queue
        while len(self._halves) > HALVES_MAX:
            self._halves.pop(next(iter(self._halves)))

    async def end_transaction(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        """END_TRANSACTION: commit (8), roll back (12) or leave (0) a half message.

        The transaction id the send answered names the half message anywhere in
        the cluster; the C++ client sends none back, only the message id, which
        this broker remembers for the half messages sent through it (a broker
        that restarted in between leaves those to the check-back).
        """
        if self._transactions is None:
            raise not_implemented("END_TRANSACTION")
        header = headers.end_transaction_header(request.ext_fields)
        if header.transaction_id:
            topic, transaction_id = convert.parse_transaction_id(header.transaction_id)
        elif header.message_id in self._halves:
            queue = self._halves[header.message_id]
            topic, transaction_id = queue.topic, transaction_ids.encode(queue, header.message_id)
        else:
            raise BrokerError.of(
                Reason.INVALID_TRANSACTION_ID,
                f"transaction of message {header.message_id!r} is unknown here and the "
                "request has no transactionId",
            )
        self._halves.pop(header.message_id, None)
        commit = {headers.TRANSACTION_COMMIT: True, headers.TRANSACTION_ROLLBACK: False}.get(
            header.commit_or_rollback
        )
        await self._transactions.end(
            header.topic or topic,
            "",  # the message id is inside the transaction id
            transaction_id,
            commit,
            from_check=header.from_transaction_check,
        )
        return request.reply(ResponseCode.SUCCESS)

    # -- clients ----------------------------------------------------------------------

    def connected(self, connection_id: int, write: Write) -> None:
        """A connection opened; ``write`` sends a command of the broker's own on it."""
        self._writers[connection_id] = write
        self.producers.connected(connection_id, write)

    def closed(self, connection_id: int) -> None:
        """A connection closed: its clients are gone; their groups' other consumers are
        told to rebalance."""
        self._writers.pop(connection_id, None)
        self.producers.closed(connection_id)
        for group in sorted(self.clients.connection_closed(connection_id)):
            self._consumers_changed(group)

    def _consumers_changed(self, group: str, but: str = "") -> None:
        """Tell ``group``'s consumers here (but client ``but``) that its consumers
        changed (NOTIFY_CONSUMER_IDS_CHANGED, as a RocketMQ broker does): they rebalance
        at once, so a joining consumer's queues are given up within moments, not at
        the next periodic rebalance (20 s), and no queue is consumed twice meanwhile."""
        for connection_id in self.clients.consumer_connections(group, but=but):
            write = self._writers.get(connection_id)
            if write is not None:
                write(convert.consumer_ids_changed(group, next(self._opaques)))

    async def heartbeat(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """HEART_BEAT: remember the client and its groups on this connection; the other
        consumers of a group it joins are told to rebalance."""
        beat = bodies.parse_heartbeat(request.body)
        for producer_group in beat.producer_groups:
            validation.check_group(producer_group)
        for consumer in beat.consumers:
            validation.check_group(consumer.group)
        known = self.clients.consumer_groups_of(beat.client_id)
        self.clients.heartbeat(connection.connection_id, beat, self._clock.now_ms())
        for group in sorted({consumer.group for consumer in beat.consumers} - known):
            self._consumers_changed(group, but=beat.client_id)
        return request.reply(ResponseCode.SUCCESS)

    async def unregister_client(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        """UNREGISTER_CLIENT: the client leaves its producer and/or consumer group (the
        group's other consumers are told to rebalance)."""
        header = headers.unregister_client_header(request.ext_fields)
        left = header.consumer_group in self.clients.consumer_groups_of(header.client_id)
        self.clients.unregister(header.client_id, header.producer_group, header.consumer_group)
        if left and header.consumer_group:
            self._consumers_changed(header.consumer_group)
        return request.reply(ResponseCode.SUCCESS)

    async def consumer_list(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        """GET_CONSUMER_LIST_BY_GROUP: the group's clients connected to this broker."""
        group = headers.consumer_group_header(request.ext_fields)
        validation.check_group(group)
        return request.reply(
            ResponseCode.SUCCESS, body=bodies.consumer_list_body(self.clients.consumers_of(group))
        )

    # -- offsets ----------------------------------------------------------------------

    async def max_offset(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """GET_MAX_OFFSET: the offset the queue's next message gets."""
        offsets = await self._store.queue_offsets(self._queue(request))
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(offsets.end_offset)})

    async def min_offset(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """GET_MIN_OFFSET: the queue's oldest offset still held."""
        offsets = await self._store.queue_offsets(self._queue(request))
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(offsets.first_offset)})

    async def search_offset(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        """SEARCH_OFFSET_BY_TIMESTAMP: the first offset stored at or after the time."""
        header = headers.search_offset_header(request.ext_fields)
        queue = _queue_of(header.topic, header.queue_id)
        offsets = await self._store.queue_offsets(queue, max(0, header.timestamp_ms))
        return request.reply(
            ResponseCode.SUCCESS, ext_fields={"offset": str(offsets.timestamp_offset)}
        )

    # -- consuming by offset ---------------------------------------------------------------

    def _pull_processor(self) -> PullProcessor:
        if self._pulls is None:
            raise not_implemented("pulling through remoting")
        return self._pulls

    async def pull(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """PULL_MESSAGE: FOUND (SUCCESS, the messages as MessageExt records),
        PULL_NOT_FOUND, or PULL_OFFSET_MOVED with the offset to go on from; a suspended
        pull waits for a message up to the consumer's suspend time."""
        pulls = self._pull_processor()
        header = headers.pull_header(request.ext_fields)
        queue = _queue_of(header.topic, header.queue_id)
        poll_ms = plan_poll_ms(header.suspend_timeout_ms, None) if header.suspends else 0
        if not await self._serves(queue.queue_id):
            if not await self._await_serving(
                queue.queue_id, min(poll_ms, header.suspend_timeout_ms)
            ):
                return await self._pull_elsewhere(request, header, queue)
            poll_ms = 0  # the wait used the consumer's suspend time
        self._remember_pull(header.consumer_group, header.topic)
        if header.commits:
            await pulls.update_offset(
                header.consumer_group, header.topic, header.queue_id, header.commit_offset
            )
        result = await pulls.pull(
            header.consumer_group,
            header.topic,
            header.queue_id,
            header.queue_offset,
            parse_filter(
                FilterKind.SQL if header.expression_type == SQL92 else FilterKind.TAG,
                header.subscription,
            ),
            batch_size=max(1, header.max_messages),
            poll_ms=poll_ms,
        )
        offsets = await self._store.queue_offsets(queue)
        fields = {
            "nextBeginOffset": str(result.next_offset),
            "minOffset": str(offsets.first_offset),
            "maxOffset": str(offsets.end_offset),
            "suggestWhichBrokerId": "0",
        }
        if result.out_of_range is not None:
            return request.reply(
                ResponseCode.PULL_OFFSET_MOVED, result.out_of_range.message, fields
            )
        if not result.messages:
            return request.reply(ResponseCode.PULL_NOT_FOUND, "no new message", fields)
        body = convert.pulled_body(result.messages, self.address)
        return request.reply(ResponseCode.SUCCESS, ext_fields=fields, body=body)

    async def _serves(self, queue_id: int) -> bool:
        """Whether consumers get queue ``queue_id`` through this broker (``queue_owner``)."""
        owner = queue_owner(queue_id, await self.brokers.serving_addresses())
        return owner is None or owner == self.address

    async def _await_serving(self, queue_id: int, poll_ms: int) -> bool:
        """Hold a pull of a queue another broker serves for up to ``poll_ms``, looking
        again every :data:`OWNER_RECHECK_MS` (the owner may die meanwhile); whether this
        broker serves the queue by then."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + poll_ms / 1000
        while (remaining_s := deadline - loop.time()) > 0:
            await asyncio.sleep(min(remaining_s, OWNER_RECHECK_MS / 1000))
            if await self._serves(queue_id):
                return True
        return False

    async def _pull_elsewhere(
        self, request: RemotingCommand, header: headers.PullMessageHeader, queue: QueueRef
    ) -> RemotingCommand:
        """PULL_NOT_FOUND for a queue another broker serves; the consumer's next offset
        follows the group's committed one, so if this broker serves the queue later (its
        owner died) the consumer resumes there, not where it first asked."""
        pulls = self._pull_processor()
        try:
            committed = await pulls.get_offset(header.consumer_group, header.topic, header.queue_id)
        except BrokerError as error:
            if error.reason is not Reason.OFFSET_NOT_FOUND:
                raise
            committed = header.queue_offset
        offsets = await self._store.queue_offsets(queue)
        next_offset = min(max(header.queue_offset, committed), offsets.end_offset)
        owner = queue_owner(queue.queue_id, await self.brokers.serving_addresses())
        return request.reply(
            ResponseCode.PULL_NOT_FOUND,
            f"queue {queue.queue_id} is served to consumers through broker {owner}",
            {
                "nextBeginOffset": str(next_offset),
                "minOffset": str(offsets.first_offset),
                "maxOffset": str(offsets.end_offset),
                "suggestWhichBrokerId": "0",
            },
        )

    def _remember_pull(self, group: str, topic: str) -> None:
        if routing.is_retry_topic(topic):
            return
        topics = self._pulled_topics.pop(group, set())
        topics.add(topic)
        self._pulled_topics[group] = topics
        while len(self._pulled_topics) > PULLING_GROUPS_MAX:
            self._pulled_topics.pop(next(iter(self._pulled_topics)))

    async def query_consumer_offset(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        """QUERY_CONSUMER_OFFSET: the group's committed position (QUERY_NOT_FOUND when
        it has none: the client then starts where its consume-from setting says)."""
        header = headers.consumer_offset_header(request.ext_fields)
        offset = await self._pull_processor().get_offset(
            header.consumer_group, header.topic, header.queue_id
        )
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def update_consumer_offset(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        """UPDATE_CONSUMER_OFFSET: commit the group's position (clamped to the queue)."""
        header = headers.consumer_offset_header(request.ext_fields)
        validation.check_topic(header.topic)
        if await self._serves(header.queue_id):
            await self._pull_processor().update_offset(
                header.consumer_group, header.topic, header.queue_id, header.commit_offset
            )
        # else: a consumer holding the queue under another broker name, which this
        # broker does not serve it through, persists the offset it was given; the
        # serving broker's commits are the group's position.
        return request.reply(ResponseCode.SUCCESS)

    async def send_back(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK: a consumer failed a message; store it again in the
        group's retry topic, due after the delay level, or in its dead-letter topic once
        retried often enough (``convert.given_back``). The group's 4.x consumers pull
        the retry topic (they subscribe to it by themselves); the message keeps its id.
        """
        header = headers.send_back_header(request.ext_fields)
        validation.check_group(header.group)
        queue, offset = convert.given_back_position(
            header, self._pulled_topics.get(header.group, set())
        )
        validation.check_topic(queue.topic)
        pulled = await self._read_one(queue, offset, " to give back")
        message = convert.given_back(pulled.message, queue.topic, header, self._clock.now_ms())
        target = await self._route.route(message.topic)  # a group's topics exist on lookup
        await self._store.append(QueueRef(message.topic, target.queues[0].queue_id), [message])
        return request.reply(ResponseCode.SUCCESS)

    # -- operators' lookups ----------------------------------------------------------------

    async def query_messages(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        """QUERY_MESSAGE: the topic's messages by key (or by id, ``_UNIQUE_KEY_QUERY``)
        stored in the time range, through the storage's key index; QUERY_NOT_FOUND when
        none. A client asks every broker of the route and merges the answers, so each
        broker answers the queues it serves (``queue_owner``): each message once."""
        header = headers.query_message_header(request.ext_fields)
        validation.check_topic(header.topic)
        if not header.key:
            raise BrokerError(codes.BAD_REQUEST, "a message query needs a key")
        limit = QUERY_MESSAGES_MAX if header.by_id else header.max_messages
        limit = min(max(1, limit), QUERY_MESSAGES_MAX)
        serving = await self.brokers.serving_addresses()
        found = await self._store.query_messages(
            header.topic,
            key="" if header.by_id else header.key,
            message_id=header.key if header.by_id else "",
            begin_ms=max(0, header.begin_ms),
            end_ms=max(0, header.end_ms),
            limit=limit,
        )
        found = [
            pulled
            for pulled in found
            if queue_owner(pulled.queue.queue_id, serving) in (None, self.address)
        ]
        if not found:
            return request.reply(
                ResponseCode.QUERY_NOT_FOUND,
                f"no message of {header.topic} with {'id' if header.by_id else 'key'} "
                f"{header.key!r} stored in [{header.begin_ms}, {header.end_ms}] through "
                f"this broker",
            )
        fields = {
            "indexLastUpdateTimestamp": str(max(p.store_timestamp_ms for p in found)),
            "indexLastUpdatePhyoffset": "0",
        }
        return request.reply(
            ResponseCode.SUCCESS, ext_fields=fields, body=convert.pulled_body(found, self.address)
        )

    async def view_message(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        """VIEW_MESSAGE_BY_ID: the message an offset message id names, as one MessageExt
        record. Its physical offset names the queue id and offset but no topic, so the
        request must carry ``topic`` (newer clients send it); older clients that get
        an error fall back to a query by the message's id."""
        header = headers.view_message_header(request.ext_fields)
        if header.topic is None:
            raise BrokerError(
                codes.BAD_REQUEST,
                f"offset {header.physical_offset} names a queue and an offset but no "
                "topic: send the topic, or query by the message id",
            )
        queue, offset = convert.viewed_position(header.topic, header.physical_offset)
        validation.check_topic(queue.topic)
        pulled = await self._read_one(queue, offset)
        return request.reply(ResponseCode.SUCCESS, body=convert.pulled_body([pulled], self.address))

    async def _read_one(self, queue: QueueRef, offset: int, purpose: str = "") -> PulledMessage:
        """The message at ``offset`` of ``queue``; NOT_FOUND (naming it, and ``purpose``)
        when the queue holds none there."""
        missing = BrokerError(
            codes.NOT_FOUND,
            f"no message at offset {offset} of {queue.topic} queue {queue.queue_id}{purpose}",
        )
        try:
            found = await self._store.read(
                queue, offset, batch_size=1, message_filter=parse_filter(FilterKind.TAG, "*")
            )
        except BrokerError as error:
            if error.code is codes.OFFSET_OUT_OF_RANGE:
                raise missing from error
            raise
        if not found.messages or found.messages[0].offset != offset:
            raise missing
        return found.messages[0]

    # -- orderly consumers: queue locks --------------------------------------------------

    def _locks(self) -> Coordination:
        if self._coordination is None:
            raise not_implemented("queue locks through remoting")
        return self._coordination

    async def lock_queues(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        """LOCK_BATCH_MQ: lock each queue for the client, cluster wide (a lease per
        group and queue, whatever broker it is named under: the same queue through
        any broker is one queue); answers the queues it holds now."""
        coordination = self._locks()
        locks = bodies.parse_queue_locks(request.body)
        validation.check_group(locks.group)
        held = []
        for queue in locks.queues:
            validation.check_topic(queue.topic)
            if await coordination.try_lease(
                _lock_name(locks.group, queue), locks.client_id, QUEUE_LOCK_TTL_MS
            ):
                held.append(queue)
        return request.reply(ResponseCode.SUCCESS, body=bodies.locked_queues_body(held))

    async def unlock_queues(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        """UNLOCK_BATCH_MQ: give up the client's locks of the queues (others' stay)."""
        coordination = self._locks()
        locks = bodies.parse_queue_locks(request.body)
        validation.check_group(locks.group)
        for queue in locks.queues:
            validation.check_topic(queue.topic)
            await coordination.release_lease(_lock_name(locks.group, queue), locks.client_id)
        return request.reply(ResponseCode.SUCCESS)

    @staticmethod
    def _queue(request: RemotingCommand) -> QueueRef:
        header = headers.queue_header(request.ext_fields)
        return _queue_of(header.topic, header.queue_id)


def _queue_of(topic: str, queue_id: int) -> QueueRef:
    """The queue a request names, checked."""
    validation.check_topic(topic)
    if queue_id < 0:
        raise BrokerError(codes.BAD_REQUEST, f"queue id {queue_id} is negative")
    return QueueRef(topic, queue_id)


def _lock_name(group: str, queue: bodies.LockedQueue) -> str:
    """The lease of an orderly consumer group's lock of a queue."""
    return f"remoting-queue-lock/{group}/{queue.topic}/{queue.queue_id}"
