"""Telemetry streams: the settings handshake and the server's channel to clients.

Each client holds one Telemetry stream per broker for its whole life. The
client writes ``settings``; the broker answers every one with status OK and
the settings it must apply (body limit, backoff, polling; see
``convert.py``). The stream stays open until the client ends it, and the
registry keeps its outbound queue so the broker can later push commands
(orphaned-transaction checks, verify-message) to a client by its id.

Producer groups: a gRPC v2 producer belongs to the group of every topic it
publishes (the proxy uses the topic name as the producer group); the topics
come from its settings. Orphan check-backs go to one producer of the group,
in rotation, and the broker's heartbeat reports the groups it serves.

Ordering: one reader task per stream turns client commands into replies on
the stream's queue; the handler's generator is the only writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from broker.domain import ClientKind, HalfMessage
from broker.errors import BrokerError, Reason
from broker.grpc import convert
from broker.grpc.status import ok, status_of
from broker.processor.consumer import ConsumerProcessor
from protocol.broker_api import ClientConnection
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb

log = logging.getLogger("broker.grpc.telemetry")


_LANGUAGES = {number: name for name, number in pb.Language.items()}
_CONSUME_MODES = {
    pb.PUSH_CONSUMER: "push",
    pb.SIMPLE_CONSUMER: "simple",
    pb.PULL_CONSUMER: "pull",
}


def client_connection(client_id: str, settings: pb.Settings) -> ClientConnection:
    """A client as its Telemetry settings describe it (language and version from its user
    agent; a consumer's group from its subscription)."""
    agent = settings.user_agent
    language = _LANGUAGES.get(agent.language, str(agent.language)) if agent.language else ""
    if settings.client_type in _CONSUME_MODES:
        return ClientConnection(
            client_id,
            group=settings.subscription.group.name,
            language=language,
            version=agent.version,
            consume_mode=_CONSUME_MODES[settings.client_type],
        )
    return ClientConnection(client_id, language=language, version=agent.version)


class TelemetrySessions:
    """Open Telemetry streams by client id (one per client on this broker)."""

    def __init__(self) -> None:
        self._outbound: dict[str, asyncio.Queue[spb.TelemetryCommand | None]] = {}
        self._published: dict[str, tuple[str, ...]] = {}  # client id -> topics it publishes
        self._clients: dict[str, ClientConnection] = {}  # client id -> what its settings said
        self._turn = 0

    def open(self, client_id: str) -> asyncio.Queue[spb.TelemetryCommand | None]:
        """A new outbound queue for ``client_id``; a previous stream of it is ended."""
        previous = self._outbound.pop(client_id, None)
        if previous is not None:
            previous.put_nowait(None)
        queue: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue()
        self._outbound[client_id] = queue
        return queue

    def close(self, client_id: str, queue: asyncio.Queue[spb.TelemetryCommand | None]) -> None:
        """Forget the stream if it is still the client's current one."""
        if self._outbound.get(client_id) is queue:
            del self._outbound[client_id]
            self._published.pop(client_id, None)
            self._clients.pop(client_id, None)

    def note_settings(self, client_id: str, settings: pb.Settings) -> None:
        """Remember the topics a producer client publishes to (its producer groups)."""
        if client_id not in self._outbound:
            return
        if settings.WhichOneof("pub_sub") == "publishing":
            self._published[client_id] = tuple(t.name for t in settings.publishing.topics)
        self._clients[client_id] = client_connection(client_id, settings)

    def connections(self) -> list[ClientConnection]:
        """The clients with an open stream here, as their settings described them."""
        return list(self._clients.values())

    @property
    def producer_groups(self) -> list[str]:
        """The producer groups with an open stream here (a v2 producer's group is its topic)."""
        return sorted({topic for topics in self._published.values() for topic in topics})

    def maybe_send_check(self, producer_group: str, half: HalfMessage, transaction_id: str) -> bool:
        """Send a RecoverOrphanedTransactionCommand to one producer of the group
        (in rotation); whether one was connected."""
        clients = sorted(c for c, topics in self._published.items() if producer_group in topics)
        if not clients:
            return False
        self._turn += 1
        command = spb.TelemetryCommand(
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=convert.half_message_pb(half), transaction_id=transaction_id
            )
        )
        return self.maybe_push(clients[self._turn % len(clients)], command)

    def maybe_push(self, client_id: str, command: spb.TelemetryCommand) -> bool:
        """Send ``command`` to the client if it has a stream here; whether it did."""
        queue = self._outbound.get(client_id)
        if queue is None:
            return False
        queue.put_nowait(command)
        return True

    @property
    def client_ids(self) -> list[str]:
        """Clients with an open stream."""
        return list(self._outbound)


async def settings_reply(
    consumer: ConsumerProcessor, settings: pb.Settings
) -> spb.TelemetryCommand:
    """The reply to one client ``settings`` command."""
    try:
        kind = ClientKind(settings.client_type)
    except ValueError:
        kind = ClientKind.UNSPECIFIED
    try:
        if kind is ClientKind.PRODUCER or settings.WhichOneof("pub_sub") == "publishing":
            reply = convert.producer_settings_pb(settings)
        elif kind.consumer or settings.WhichOneof("pub_sub") == "subscription":
            for entry in settings.subscription.subscriptions:  # refused at subscribe time
                convert.filter_from_pb(entry.expression)
            group = await consumer.group(
                settings.subscription.group.name,
                [entry.topic.name for entry in settings.subscription.subscriptions],
            )
            reply = convert.consumer_settings_pb(settings, group)
        else:
            raise BrokerError.of(
                Reason.UNRECOGNIZED_CLIENT_TYPE,
                "settings name neither publishing nor subscription",
            )
    except Exception as error:  # noqa: BLE001 - answered in-band
        return spb.TelemetryCommand(status=status_of(error))
    return spb.TelemetryCommand(status=ok(), settings=reply)


async def serve_stream(
    sessions: TelemetrySessions,
    consumer: ConsumerProcessor,
    client_id: str,
    commands: AsyncIterator[spb.TelemetryCommand],
) -> AsyncIterator[spb.TelemetryCommand]:
    """Run one Telemetry stream until the client ends it."""
    outbound = sessions.open(client_id)

    async def read() -> None:
        try:
            async for command in commands:
                which = command.WhichOneof("command")
                if which == "settings":
                    sessions.note_settings(client_id, command.settings)
                    outbound.put_nowait(await settings_reply(consumer, command.settings))
                else:
                    log.debug("telemetry command ignored", extra={"command": which})
        except Exception as error:  # noqa: BLE001 - the stream just ends
            log.debug("telemetry stream read failed", extra={"error": repr(error)})
        finally:
            outbound.put_nowait(None)

    reader = asyncio.create_task(read())
    try:
        while (reply := await outbound.get()) is not None:
            yield reply
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        sessions.close(client_id, outbound)
