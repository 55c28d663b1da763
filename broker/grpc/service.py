"""The RocketMQ v2 MessagingService: validate, convert, call a processor, answer.

Every answer carries an in-band ``Status`` with gRPC status OK (clients read
``Status.code``, not the gRPC code). Errors become statuses only through
``status.py``. Every RPC answers, including the ones not built yet (a clear
NOT_IMPLEMENTED or UNSUPPORTED status): none of them hangs.

Every call must carry ``x-mq-client-id`` (CLIENT_ID_REQUIRED otherwise), as
the proxy demands.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from broker.errors import BrokerError, Reason, not_implemented, unsupported
from broker.grpc import convert, wire
from broker.grpc.status import ok, status_of
from broker.grpc.telemetry import TelemetrySessions, serve_stream
from broker.processor import recall_handle as recall_handles
from broker.processor import transaction_id as transaction_ids
from broker.processor.consumer import ConsumerProcessor
from broker.processor.polling import plan_poll_ms
from broker.processor.producer import ProducerProcessor
from broker.processor.pull import PullProcessor
from broker.processor.route import RouteProcessor
from broker.processor.transaction import TransactionProcessor
from broker.services.base import Clock
from protocol import errors as codes
from protocol.rocketmq.pull import BATCH_SIZE_MAX, REPLICATOR_BATCH_SIZE_MAX, REPLICATOR_HEADER
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from protocol.vocabulary import Placement

log = logging.getLogger("broker.grpc")

CLIENT_ID_HEADER = "x-mq-client-id"
_STATUS_OK_FIELD = wire.message_field(1, wire.STATUS_OK)
"""A success answer's ``status`` field (1), as bytes."""


def client_id_of(context: Any) -> str:
    """The caller's client id; raises CLIENT_ID_REQUIRED."""
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_HEADER and value:
            return str(value)
    raise BrokerError.of(Reason.CLIENT_ID_REQUIRED, f"header {CLIENT_ID_HEADER} is required")


def replicator_of(context: Any) -> bool:
    """Whether the call says it is a replicator's (:data:`REPLICATOR_HEADER`)."""
    return any(key == REPLICATOR_HEADER for key, _ in context.invocation_metadata() or ())


def remaining_ms(context: Any) -> int | None:
    """Milliseconds left before the caller's deadline, None without one."""
    seconds = context.time_remaining()
    return None if seconds is None else int(seconds * 1000)


def poll_ms_of(request: spb.ReceiveMessageRequest | spb.PullMessageRequest, context: Any) -> int:
    """How long a receive or pull may wait for messages (``polling.plan_poll_ms`` of
    its ``long_polling_timeout`` and the caller's deadline)."""
    requested_ms = (
        convert.duration_ms(request.long_polling_timeout)
        if request.HasField("long_polling_timeout")
        else None
    )
    return plan_poll_ms(requested_ms, remaining_ms(context))


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    """The gRPC v2 adapter over the processors."""

    def __init__(
        self,
        *,
        route: RouteProcessor,
        producer: ProducerProcessor,
        consumer: ConsumerProcessor,
        clock: Clock,
        endpoint: pb.Endpoints,
        sessions: TelemetrySessions | None = None,
        transactions: TransactionProcessor | None = None,
        pulls: PullProcessor | None = None,
    ) -> None:
        self._route = route
        self._producer = producer
        self._consumer = consumer
        self.transactions = transactions
        self.pulls = pulls
        self._clock = clock
        self._endpoint = endpoint
        self.sessions = sessions or TelemetrySessions()
        # Where routes send clients: None, the endpoint the client used (behind a load
        # balancer); else the live brokers' gRPC addresses, queues spread over them.
        self.route_brokers: Callable[[], Awaitable[list[str]]] | None = None

    @property
    def route_processor(self) -> RouteProcessor:
        """The route processor (shared with the other protocol adapters)."""
        return self._route

    @property
    def consumer_processor(self) -> ConsumerProcessor:
        """The consumer processor (the broker role gives it its metrics)."""
        return self._consumer

    @property
    def producer_processor(self) -> ProducerProcessor:
        """The producer processor (shared with the other protocol adapters)."""
        return self._producer

    # -- routing ------------------------------------------------------------

    async def QueryRoute(
        self, request: spb.QueryRouteRequest, context: Any
    ) -> spb.QueryRouteResponse:
        """The queues of a topic, each served at the endpoint the client used, or
        spread over the live brokers (``route_brokers``)."""
        try:
            client_id_of(context)
            topic = await self._route.route(request.topic.name)
            namespace = request.topic.resource_namespace
            if self.route_brokers is not None:
                queues = convert.spread_route_pb(topic, namespace, await self.route_brokers())
            else:
                endpoints = convert.endpoints_or(request.endpoints, self._endpoint)
                queues = convert.route_pb(topic, namespace, endpoints)
        except Exception as error:  # noqa: BLE001 - answered in-band
            return spb.QueryRouteResponse(status=status_of(error))
        return spb.QueryRouteResponse(status=ok(), message_queues=queues)

    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: Any
    ) -> spb.QueryAssignmentResponse:
        """What a push consumer receives from: the whole topic, as queue -1."""
        try:
            client_id_of(context)
            topic, queue = await self._route.assignment(request.topic.name, request.group.name)
            endpoints = convert.endpoints_or(request.endpoints, self._endpoint)
            assignment = pb.Assignment(
                message_queue=convert.message_queue_pb(
                    topic, queue, request.topic.resource_namespace, endpoints
                )
            )
        except Exception as error:  # noqa: BLE001
            return spb.QueryAssignmentResponse(status=status_of(error))
        return spb.QueryAssignmentResponse(status=ok(), assignments=[assignment])

    # -- clients ------------------------------------------------------------

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        """Liveness; always OK for a client that names itself."""
        try:
            client_id_of(context)
        except Exception as error:  # noqa: BLE001
            return spb.HeartbeatResponse(status=status_of(error))
        return spb.HeartbeatResponse(status=ok())

    async def Telemetry(
        self, request_iterator: AsyncIterator[spb.TelemetryCommand], context: Any
    ) -> AsyncIterator[spb.TelemetryCommand]:
        """The settings handshake; the stream stays open for server commands."""
        try:
            client_id = client_id_of(context)
        except BrokerError as error:
            yield spb.TelemetryCommand(status=status_of(error))
            return
        async for reply in serve_stream(self.sessions, self._consumer, client_id, request_iterator):
            yield reply

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: Any
    ) -> spb.NotifyClientTerminationResponse:
        """The client stops. Its Telemetry stream is left for the client to cancel: the
        Python client reads a server-ended stream as an error (it calls ``HasField`` on EOF)."""
        try:
            client_id_of(context)
        except Exception as error:  # noqa: BLE001
            return spb.NotifyClientTerminationResponse(status=status_of(error))
        return spb.NotifyClientTerminationResponse(status=ok())

    # -- producing ------------------------------------------------------------

    async def SendMessage(
        self, request: spb.SendMessageRequest, context: Any
    ) -> spb.SendMessageResponse:
        """Store the messages; exactly one entry per message, echoing its id (and, for a
        half message, the transaction id that ends it; offset -1 unless queued)."""
        try:
            client_id_of(context)
            messages = [convert.message_from_pb(message) for message in request.messages]
            results = await self._producer.send(messages)
        except Exception as error:  # noqa: BLE001
            status = status_of(error)
            entries = [
                spb.SendResultEntry(status=status, message_id=m.system_properties.message_id)
                for m in request.messages
            ]
            return spb.SendMessageResponse(status=status, entries=entries)
        # Written as bytes and parsed once: one protobuf arena per answer (see wire.py).
        answered = wire.send_results(
            wire.STATUS_OK,
            (
                (
                    message.message_id,
                    result.offset,
                    (
                        transaction_ids.encode(result.queue, message.message_id)
                        if result.placement is Placement.HALF
                        else ""
                    ),
                    (
                        recall_handles.encode(
                            result.queue, message.message_id, message.delivery_timestamp_ms
                        )
                        if result.placement is Placement.DELAYED
                        and message.delivery_timestamp_ms is not None
                        else ""
                    ),
                )
                for message, result in zip(messages, results, strict=True)
            ),
        )
        return spb.SendMessageResponse.FromString(_STATUS_OK_FIELD + answered)

    async def EndTransaction(
        self, request: spb.EndTransactionRequest, context: Any
    ) -> spb.EndTransactionResponse:
        """Commit or roll back a half message (UNSPECIFIED leaves it for a check-back)."""
        try:
            client_id_of(context)
            if self.transactions is None:
                raise not_implemented("EndTransaction")
            resolution = request.resolution
            await self.transactions.end(
                request.topic.name,
                request.message_id,
                request.transaction_id,
                True if resolution == pb.COMMIT else False if resolution == pb.ROLLBACK else None,
                from_check=request.source == pb.SOURCE_SERVER_CHECK,
            )
        except Exception as error:  # noqa: BLE001
            return spb.EndTransactionResponse(status=status_of(error))
        return spb.EndTransactionResponse(status=ok())

    # -- consuming ------------------------------------------------------------

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        """Status, then messages, then the delivery timestamp; always before the deadline."""
        try:
            client_id_of(context)
            poll_ms = poll_ms_of(request, context)
            invisible_ms = (
                convert.duration_ms(request.invisible_duration)
                if request.HasField("invisible_duration") and not request.auto_renew
                else None
            )
            deliveries = await self._consumer.receive(
                request.group.name,
                request.message_queue.topic.name,
                convert.filter_from_pb(request.filter_expression),
                batch_size=request.batch_size,
                invisible_ms=invisible_ms,
                poll_ms=poll_ms,
            )
        except Exception as error:  # noqa: BLE001
            yield spb.ReceiveMessageResponse(status=status_of(error))
            return
        if not deliveries:
            yield spb.ReceiveMessageResponse(
                status=pb.Status(code=pb.MESSAGE_NOT_FOUND, message="no new message")
            )
        else:
            yield spb.ReceiveMessageResponse(status=ok())
            namespace = request.message_queue.topic.resource_namespace
            store_host = convert.endpoint_text(self._endpoint)
            for delivery in deliveries:
                response = spb.ReceiveMessageResponse()
                convert.fill_delivered(response.message, delivery, namespace, store_host)
                yield response
        yield spb.ReceiveMessageResponse(
            delivery_timestamp=convert.to_timestamp(self._clock.now_ms())
        )

    async def AckMessage(
        self, request: spb.AckMessageRequest, context: Any
    ) -> spb.AckMessageResponse:
        """Finish deliveries; one entry per handle; MULTIPLE_RESULTS when they differ."""
        try:
            client_id_of(context)
            handles = [entry.receipt_handle for entry in request.entries]
            outcomes = await self._consumer.ack(request.group.name, request.topic.name, handles)
        except Exception as error:  # noqa: BLE001
            return spb.AckMessageResponse(status=status_of(error))
        # Written as bytes and parsed once, as SendMessage's answer.
        parts: list[bytes] = []
        codes: set[int] = set()
        first = wire.STATUS_OK
        for entry, handle, outcome in zip(request.entries, handles, outcomes, strict=True):
            if outcome is None:
                codes.add(pb.OK)
                status = wire.STATUS_OK
            else:
                failed = status_of(outcome)
                codes.add(failed.code)
                status = failed.SerializeToString()
            if not parts:
                first = status
            parts.append(wire.message_field(2, wire.ack_result(status, entry.message_id, handle)))
        if len(codes) > 1:
            first = wire.status(pb.MULTIPLE_RESULTS, "entries have different results")
        return spb.AckMessageResponse.FromString(wire.message_field(1, first) + b"".join(parts))

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: Any
    ) -> spb.ChangeInvisibleDurationResponse:
        """A new handle on success; the old one echoed on errors (clients adopt it blindly)."""
        try:
            client_id_of(context)
            handle = await self._consumer.change_invisible(
                request.group.name,
                request.topic.name,
                request.receipt_handle,
                convert.duration_ms(request.invisible_duration),
            )
        except Exception as error:  # noqa: BLE001
            return spb.ChangeInvisibleDurationResponse(
                status=status_of(error), receipt_handle=request.receipt_handle
            )
        return spb.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=handle)

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """Give up on a delivery now: it moves to the group's dead-letter topic."""
        try:
            client_id_of(context)
            await self._consumer.forward_to_dead_letter(
                request.group.name, request.topic.name, request.receipt_handle
            )
        except Exception as error:  # noqa: BLE001
            return spb.ForwardMessageToDeadLetterQueueResponse(status=status_of(error))
        return spb.ForwardMessageToDeadLetterQueueResponse(status=ok())

    # -- offset-based consumption (pull consumers) ------------------------------------

    def _pull_processor(self) -> PullProcessor:
        if self.pulls is None:
            raise not_implemented("offset-based consumption")
        return self.pulls

    async def PullMessage(
        self, request: spb.PullMessageRequest, context: Any
    ) -> AsyncIterator[spb.PullMessageResponse]:
        """Status, then the messages, then ``next_offset`` (always, errors included);
        long-polls up to the planned poll when nothing matches yet."""
        queue = request.message_queue
        try:
            client_id_of(context)
            poll_ms = poll_ms_of(request, context)
            # A replicator's pull: a larger batch and no body digest (its copies carry
            # none); every other caller keeps RocketMQ's cap and digest.
            replicator = replicator_of(context)
            result = await self._pull_processor().pull(
                request.group.name,
                queue.topic.name,
                queue.id,
                request.offset,
                convert.filter_from_pb(request.filter_expression),
                batch_size=request.batch_size,
                poll_ms=poll_ms,
                batch_size_max=REPLICATOR_BATCH_SIZE_MAX if replicator else BATCH_SIZE_MAX,
            )
        except Exception as error:  # noqa: BLE001
            yield spb.PullMessageResponse(status=status_of(error))
            yield spb.PullMessageResponse(next_offset=request.offset)
            return
        if result.out_of_range is not None:
            yield spb.PullMessageResponse(status=status_of(result.out_of_range))
        elif not result.messages:
            skipped = result.next_offset > request.offset
            message = "no message matches the filter" if skipped else "no new message"
            yield spb.PullMessageResponse(
                status=pb.Status(code=pb.MESSAGE_NOT_FOUND, message=message)
            )
        else:
            yield spb.PullMessageResponse(status=ok())
            namespace = queue.topic.resource_namespace
            store_host = convert.endpoint_text(self._endpoint)
            for pulled in result.messages:
                response = spb.PullMessageResponse()
                convert.fill_pulled(
                    response.message, pulled, namespace, store_host, digest=not replicator
                )
                yield response
        yield spb.PullMessageResponse(next_offset=result.next_offset)

    async def UpdateOffset(
        self, request: spb.UpdateOffsetRequest, context: Any
    ) -> spb.UpdateOffsetResponse:
        """Commit the group's position in the queue (shared with pop consumption)."""
        queue = request.message_queue
        try:
            client_id_of(context)
            await self._pull_processor().update_offset(
                request.group.name, queue.topic.name, queue.id, request.offset
            )
        except Exception as error:  # noqa: BLE001
            return spb.UpdateOffsetResponse(status=status_of(error))
        return spb.UpdateOffsetResponse(status=ok())

    async def GetOffset(self, request: spb.GetOffsetRequest, context: Any) -> spb.GetOffsetResponse:
        """The group's committed position in the queue (OFFSET_NOT_FOUND: none yet)."""
        queue = request.message_queue
        try:
            client_id_of(context)
            offset = await self._pull_processor().get_offset(
                request.group.name, queue.topic.name, queue.id
            )
        except Exception as error:  # noqa: BLE001
            return spb.GetOffsetResponse(status=status_of(error))
        return spb.GetOffsetResponse(status=ok(), offset=offset)

    async def QueryOffset(
        self, request: spb.QueryOffsetRequest, context: Any
    ) -> spb.QueryOffsetResponse:
        """The queue's first offset (BEGINNING), end offset (END), or first offset
        stored at or after a time (TIMESTAMP, which needs ``timestamp``)."""
        queue = request.message_queue
        try:
            client_id_of(context)
            pulls = self._pull_processor()
            policy = request.query_offset_policy
            if policy == pb.BEGINNING:
                offset = await pulls.beginning_offset(queue.topic.name, queue.id)
            elif policy == pb.END:
                offset = await pulls.end_offset(queue.topic.name, queue.id)
            elif policy == pb.TIMESTAMP:
                if not request.HasField("timestamp"):
                    raise BrokerError(
                        codes.BAD_REQUEST, "query offset policy TIMESTAMP needs a timestamp"
                    )
                offset = await pulls.offset_at(
                    queue.topic.name, queue.id, convert.timestamp_ms(request.timestamp)
                )
            else:
                raise BrokerError(codes.BAD_REQUEST, f"unknown query offset policy {policy}")
        except Exception as error:  # noqa: BLE001
            return spb.QueryOffsetResponse(status=status_of(error))
        return spb.QueryOffsetResponse(status=ok(), offset=offset)

    # -- not built yet: answer clearly, never hang ------------------------------

    async def RecallMessage(
        self, request: spb.RecallMessageRequest, context: Any
    ) -> spb.RecallMessageResponse:
        """Cancel a timed message not yet due, by the recall handle its send returned."""
        try:
            client_id_of(context)
            message_id = await self._producer.recall(request.topic.name, request.recall_handle)
        except Exception as error:  # noqa: BLE001
            return spb.RecallMessageResponse(status=status_of(error))
        return spb.RecallMessageResponse(status=ok(), message_id=message_id)

    async def SyncLiteSubscription(
        self, request: spb.SyncLiteSubscriptionRequest, context: Any
    ) -> spb.SyncLiteSubscriptionResponse:
        """Lite topics are not supported."""
        return spb.SyncLiteSubscriptionResponse(status=status_of(unsupported("lite topics")))
