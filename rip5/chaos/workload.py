"""Producers and consumers of a chaos run, over the public protocol (RocketMQ gRPC v2).

They speak the official clients' wire format through the lean HTTP/2 client
(:class:`loadtest.grpc_lean.LeanChannel`) and write what they did and saw
into a :class:`Recorder`, from which the run's
:class:`~rip5.chaos.history.History` is made.

Producers send at a steady rate and retry a send that failed or went
unknown with the same message ids (``attempts`` in all), as a careful
application does; the send's outcome is its last attempt's. With
``retry_endpoints`` (the run's other brokers), retries go through those in
turn, as a client that fails over between brokers does. Per model:

- ``queue``: NORMAL messages in batches;
- ``fifo``: FIFO messages, each producer owning a few message groups and
  sending each group's messages one at a time, in sequence;
- ``txn``: a TRANSACTION half message, then EndTransaction COMMIT (two in
  three) or ROLLBACK (one in three, drawn from the seed);
- ``timer``: DELAY messages due 1-3 s after they are sent.

Consumers are simple consumers of one group: receive (long polling), record
each delivery, then ack it and record whether the ack succeeded.

SHELL: sockets, the clock.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from google.protobuf import timestamp_pb2

from loadtest.client import (
    CLIENT_ID_HEADER,
    CallFailed,
    Received,
    ack_request,
    build_message,
    endpoints_of,
    receive_request,
    received_of,
)
from loadtest.grpc_lean import LeanChannel
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from rip5.chaos.history import Delivery, Intent, Outcome, Send

SERVICE = "/apache.rocketmq.v2.MessagingService/"
CALL_TIMEOUT_S = 5.0
RETRY_BACKOFF_S = 0.2
LONG_POLL_MS = 1_000
INVISIBLE_MS = 10_000  # the least a receive may ask for
TIMER_DUE_MS = (1_000, 3_000)
ROLLBACK_SHARE = 3  # one in three transactions rolls back
FIFO_GROUPS_PER_PRODUCER = 3
BODY = b"chaos" * 20


@dataclass(frozen=True)
class Model:
    """What a chaos model sends and consumes."""

    name: str
    topic: str
    group: str
    message_type: int  # protocol.records.MessageType
    fifo_group: bool


MODELS: dict[str, Model] = {
    "queue": Model("queue", "chaos-queue", "chaos-queue-consumers", 1, False),
    "fifo": Model("fifo", "chaos-fifo", "chaos-fifo-consumers", 2, True),
    "timer": Model("timer", "chaos-timer", "chaos-timer-consumers", 3, False),
    "txn": Model("txn", "chaos-txn", "chaos-txn-consumers", 4, False),
}


def now_ms() -> int:
    """The wall clock in ms (the history's clock)."""
    return int(time.time() * 1000)


def outcome_of_code(code: int) -> Outcome:
    """A v2 status code as a send outcome: OK is acked; a client error (4xxxx, but a
    timeout) says nothing was stored; anything else may have been stored."""
    if code in (pb.OK, pb.MULTIPLE_RESULTS):
        return Outcome.ACKED
    if code // 10_000 == 4 and code != pb.REQUEST_TIMEOUT:
        return Outcome.FAILED
    return Outcome.UNKNOWN


@dataclass
class Recorder:
    """What every client of a run did and saw (appended from the event loop only)."""

    sends: list[Send] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, name: str) -> None:
        """Count one failed call by its status name."""
        self.errors[name] = self.errors.get(name, 0) + 1


class Client:
    """One connection to a broker and the v2 calls a chaos client makes."""

    def __init__(self, endpoint: str) -> None:
        """Connect lazily to ``endpoint``."""
        self.endpoint = endpoint
        self.channel = LeanChannel(endpoint)
        self.metadata = ((CLIENT_ID_HEADER, f"chaos-{uuid.uuid4()}"),)
        self.born_host = socket.gethostname()

    async def close(self) -> None:
        """Close the connection."""
        await self.channel.close()

    async def _unary(self, method: str, request: bytes) -> bytes:
        return await self.channel.unary(
            SERVICE + method, request, timeout_s=CALL_TIMEOUT_S, metadata=self.metadata
        )

    async def send(self, messages: Sequence[pb.Message]) -> list[tuple[Outcome, str, str]]:
        """Send ``messages`` in one call: per message (outcome, transaction id, error)."""
        request = spb.SendMessageRequest(messages=list(messages)).SerializeToString()
        try:
            response = spb.SendMessageResponse.FromString(await self._unary("SendMessage", request))
        except CallFailed as failure:
            return [(Outcome.UNKNOWN, "", failure.name)] * len(messages)
        if len(response.entries) != len(messages):
            outcome = outcome_of_code(response.status.code)
            if outcome is Outcome.ACKED:
                outcome = Outcome.UNKNOWN
            return [(outcome, "", f"status {response.status.code}")] * len(messages)
        return [
            (outcome_of_code(e.status.code), e.transaction_id, f"status {e.status.code}")
            for e in response.entries
        ]

    async def end_transaction(
        self, topic: str, message_id: str, transaction_id: str, commit: bool
    ) -> Outcome:
        """Commit or roll back one half message."""
        request = spb.EndTransactionRequest(
            topic=pb.Resource(name=topic),
            message_id=message_id,
            transaction_id=transaction_id,
            resolution=pb.COMMIT if commit else pb.ROLLBACK,
            source=pb.SOURCE_CLIENT,
        ).SerializeToString()
        try:
            answer = await self._unary("EndTransaction", request)
        except CallFailed:
            return Outcome.UNKNOWN
        return outcome_of_code(spb.EndTransactionResponse.FromString(answer).status.code)

    async def receive(self, model: Model, batch: int) -> list[tuple[str, str]]:
        """(message id, receipt handle) of up to ``batch`` messages; [] after a quiet poll."""
        request = receive_request(
            model.group,
            model.topic,
            endpoints_of(self.endpoint),
            batch_size=batch,
            invisible_ms=INVISIBLE_MS,
            long_polling_ms=LONG_POLL_MS,
        ).SerializeToString()
        answers = await self.channel.call(
            SERVICE + "ReceiveMessage",
            request,
            timeout_s=LONG_POLL_MS / 1000 + CALL_TIMEOUT_S,
            metadata=self.metadata,
        )
        got: list[tuple[str, str]] = []
        for answer in answers:
            received = received_of(spb.ReceiveMessageResponse.FromString(answer))
            if received is not None:
                got.append((received.message_id, received.receipt_handle))
        return got

    async def ack(self, model: Model, handles: Sequence[tuple[str, str]]) -> set[str]:
        """Ack the deliveries; the message ids whose ack succeeded."""
        request = ack_request(
            model.group, model.topic, [Received(m, h, 0) for m, h in handles]
        ).SerializeToString()
        try:
            response = spb.AckMessageResponse.FromString(await self._unary("AckMessage", request))
        except CallFailed:
            return set()
        return {e.message_id for e in response.entries if e.status.code == pb.OK}


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


@dataclass
class Workload:
    """The producers and consumers of one run."""

    model: Model
    endpoint: str
    recorder: Recorder
    seed: int
    producers: int = 2
    consumers: int = 2
    rate_per_s: float = 40.0
    batch: int = 4
    attempts: int = 5
    drop_one: bool = False
    """Planted bug, for proving the checker: one consumer acks one message and forgets it."""
    probes: set[str] = field(default_factory=set)
    """Ids of the probe messages sent before the run (never the planted drop's victim)."""
    retry_endpoints: tuple[str, ...] = ()
    """Other brokers: attempt k of a send goes through broker k mod n (0: ``endpoint``)."""
    _random: random.Random = field(init=False)
    _dropped: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    # -- producing -------------------------------------------------------------

    def probe_message(self) -> pb.Message:
        """A message of the model that shows the cluster serves (kept out of the history)."""
        return self._message(
            "probe" if self.model.fifo_group else None,
            now_ms() if self.model.name == "timer" else None,
        )

    def _message(self, group: str | None, due_ms: int | None) -> pb.Message:
        message = build_message(self.model.topic, BODY, socket.gethostname(), message_group=group)
        system = message.system_properties
        system.message_type = self.model.message_type  # type: ignore[assignment]
        if due_ms is not None:
            system.delivery_timestamp.CopyFrom(_timestamp(due_ms))
        return message

    async def _send_with_retries(
        self, clients: Sequence[Client], messages: list[pb.Message]
    ) -> tuple[int, list[tuple[Outcome, str, str]], int]:
        """(invoked ms, per message (outcome, transaction id, error), attempts); attempt k
        goes through ``clients[k mod n]``."""
        invoked = now_ms()
        results: list[tuple[Outcome, str, str]] = []
        attempt = 0
        pending = list(range(len(messages)))
        final: dict[int, tuple[Outcome, str, str]] = {}
        while pending and attempt < self.attempts:
            client = clients[attempt % len(clients)]
            attempt += 1
            results = await client.send([messages[i] for i in pending])
            still: list[int] = []
            for i, result in zip(pending, results, strict=True):
                final[i] = result
                if result[0] is not Outcome.ACKED:
                    self.recorder.error(result[2])
                    still.append(i)
            pending = still
            if pending and attempt < self.attempts:
                await asyncio.sleep(RETRY_BACKOFF_S)
        return invoked, [final[i] for i in range(len(messages))], attempt

    async def produce(self, index: int, stop: asyncio.Event) -> None:
        """One producer, until ``stop`` is set."""
        clients = [Client(e) for e in (self.endpoint, *self.retry_endpoints)]
        interval_s = self.batch * self.producers / self.rate_per_s
        groups = [f"p{index}-g{k}" for k in range(FIFO_GROUPS_PER_PRODUCER)]
        sequences = dict.fromkeys(groups, 0)
        turn = 0
        try:
            while not stop.is_set():
                started = time.monotonic()
                if self.model.fifo_group:
                    group = groups[turn % len(groups)]
                    turn += 1
                    await self._produce_fifo(clients, group, sequences[group])
                    sequences[group] += 1
                elif self.model.name == "txn":
                    await self._produce_txn(clients)
                else:
                    await self._produce_batch(clients)
                await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))
        finally:
            for client in clients:
                await client.close()

    async def _produce_batch(self, clients: Sequence[Client]) -> None:
        timer = self.model.name == "timer"
        dues = [
            now_ms() + self._random.randint(*TIMER_DUE_MS) if timer else None
            for _ in range(self.batch)
        ]
        messages = [self._message(None, due) for due in dues]
        invoked, results, attempts = await self._send_with_retries(clients, messages)
        done = now_ms()
        intent = Intent.TIMER if timer else Intent.NORMAL
        for message, due, (outcome, _, error) in zip(messages, dues, results, strict=True):
            self.recorder.sends.append(
                Send(
                    message.system_properties.message_id, intent, invoked, done, outcome,
                    attempts, due_ms=due, error="" if outcome is Outcome.ACKED else error,
                )
            )  # fmt: skip

    async def _produce_fifo(self, clients: Sequence[Client], group: str, sequence: int) -> None:
        message = self._message(group, None)
        invoked, results, attempts = await self._send_with_retries(clients, [message])
        outcome, _, error = results[0]
        self.recorder.sends.append(
            Send(
                message.system_properties.message_id, Intent.FIFO, invoked, now_ms(), outcome,
                attempts, group, sequence, error="" if outcome is Outcome.ACKED else error,
            )
        )  # fmt: skip

    async def _produce_txn(self, clients: Sequence[Client]) -> None:
        commit = self._random.randrange(ROLLBACK_SHARE) != 0
        message = self._message(None, None)
        message_id = message.system_properties.message_id
        invoked, results, attempts = await self._send_with_retries(clients, [message])
        client = clients[0]  # any broker ends a transaction
        outcome, transaction_id, error = results[0]
        ended: Outcome | None = None
        if outcome is Outcome.ACKED:
            for attempt in range(self.attempts):
                ended = await client.end_transaction(
                    self.model.topic, message_id, transaction_id, commit
                )
                if ended is Outcome.ACKED:
                    break
                self.recorder.error("EndTransaction")
                if attempt + 1 < self.attempts:
                    await asyncio.sleep(RETRY_BACKOFF_S)
        self.recorder.sends.append(
            Send(
                message_id, Intent.COMMIT if commit else Intent.ROLLBACK, invoked, now_ms(),
                outcome, attempts, ended=ended, error="" if outcome is Outcome.ACKED else error,
            )
        )  # fmt: skip

    # -- consuming -------------------------------------------------------------

    async def consume(self, index: int, stop: asyncio.Event) -> None:
        """One consumer, until ``stop`` is set."""
        client = Client(self.endpoint)
        name = f"consumer-{index}"
        try:
            while not stop.is_set():
                try:
                    got = await client.receive(self.model, 16)
                except CallFailed as failure:
                    self.recorder.error(f"receive {failure.name}")
                    await asyncio.sleep(RETRY_BACKOFF_S)
                    continue
                if not got:
                    continue
                at = now_ms()
                acked = await client.ack(self.model, got)
                for message_id, _ in got:
                    planted = self.drop_one and not self._dropped and message_id not in self.probes
                    if planted and message_id in acked:
                        self._dropped = True  # the planted bug: acked, never processed
                        continue
                    self.recorder.deliveries.append(
                        Delivery(message_id, at, name, message_id in acked)
                    )
        finally:
            await client.close()
