"""Locust users that speak RocketMQ gRPC v2 to a rip5 broker (or any RocketMQ 5 proxy).

Run (``--host`` is the broker's host:port, no scheme)::

    locust -f loadtest/locustfile.py --headless -u 20 -r 10 -t 30s \\
        --host 127.0.0.1:8081 --csv out/run --html out/run.html NormalProducer Consumer

Users (pick them by class name on the command line; ``rip5 loadtest`` picks
them by scenario, see ``loadtest/scenarios.py``):

- ``NormalProducer``: one NORMAL message per SendMessage;
- ``FifoProducer``: one FIFO message per SendMessage, its message group taken
  round robin from ``--rip5-message-groups`` groups per user;
- ``BatchProducer``: ``--rip5-batch`` NORMAL messages per SendMessage;
- ``Consumer``: ReceiveMessage (long polling) then one AckMessage for what
  arrived: a simple consumer.

Options (also as environment variables, e.g. ``RIP5_BODY_BYTES``):
``--rip5-topic``, ``--rip5-fifo-topic``, ``--rip5-group``,
``--rip5-body-bytes``, ``--rip5-batch``, ``--rip5-message-groups``,
``--rip5-rate`` (requests/s per producer user; 0: as fast as possible),
``--rip5-receive-batch``, ``--rip5-invisible-ms``, ``--rip5-long-poll-ms``.

Every call is one Locust request event of type ``grpc``; a failure's name
is short (the gRPC or RocketMQ status code name, see loadtest/client.py).
Topics and groups must exist, or the broker must create them on first use
(``rip5 dev`` does).

gevent: Locust has monkey-patched by the time this file is imported, and
grpc is switched to gevent here, before any channel exists, so a blocking
stub call yields to the other users instead of stalling the process. Never
use grpc.aio or asyncio in this file: it deadlocks under gevent.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc.experimental.gevent as grpc_gevent
from locust import User, constant_throughput, events, task
from locust.env import Environment

from loadtest.client import CallFailed, Received, RocketClient

grpc_gevent.init_gevent()

T = TypeVar("T")
REQUEST_TYPE = "grpc"


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    """The rip5 options of every user."""
    group = parser.add_argument_group("rip5")
    group.add_argument("--rip5-topic", default="loadtest", env_var="RIP5_TOPIC")
    group.add_argument("--rip5-fifo-topic", default="loadtest-fifo", env_var="RIP5_FIFO_TOPIC")
    group.add_argument("--rip5-group", default="loadtest-group", env_var="RIP5_GROUP")
    group.add_argument("--rip5-body-bytes", type=int, default=1024, env_var="RIP5_BODY_BYTES")
    group.add_argument(
        "--rip5-batch", type=int, default=16, env_var="RIP5_BATCH", help="BatchProducer"
    )
    group.add_argument(
        "--rip5-message-groups",
        type=int,
        default=8,
        env_var="RIP5_MESSAGE_GROUPS",
        help="FifoProducer: message groups per user",
    )
    group.add_argument(
        "--rip5-rate",
        type=float,
        default=0.0,
        env_var="RIP5_RATE",
        help="SendMessage requests/s per producer user (0: no limit)",
    )
    group.add_argument("--rip5-receive-batch", type=int, default=32, env_var="RIP5_RECEIVE_BATCH")
    group.add_argument("--rip5-invisible-ms", type=int, default=30_000, env_var="RIP5_INVISIBLE_MS")
    group.add_argument("--rip5-long-poll-ms", type=int, default=2_000, env_var="RIP5_LONG_POLL_MS")


def _option(environment: Environment, name: str, default: Any) -> Any:
    options = environment.parsed_options
    return getattr(options, name, default) if options is not None else default


class RocketUser(User):
    """A user with its own channel; :meth:`call` reports one request event."""

    abstract = True

    def __init__(self, environment: Environment) -> None:
        """Read the options; the channel opens in :meth:`on_start`."""
        super().__init__(environment)
        self.client: RocketClient | None = None

    def on_start(self) -> None:
        """Open the channel to the broker."""
        if not self.host:
            raise ValueError("--host must name the broker endpoint as host:port")
        self.client = RocketClient(self.host.removeprefix("grpc://"))

    def on_stop(self) -> None:
        """Close the channel."""
        if self.client is not None:
            self.client.close()
            self.client = None

    def call(
        self,
        name: str,
        action: Callable[[RocketClient], T],
        measure: Callable[[T], int] | None = None,
    ) -> T | None:
        """Run ``action``, fire its request event; None when it failed (already reported).

        ``measure(result)`` gives the event's length in bytes (default: an int result)."""
        assert self.client is not None
        started = time.perf_counter()
        exception: Exception | None = None
        result: T | None = None
        try:
            result = action(self.client)
        except CallFailed as failure:
            exception = failure
        elapsed_ms = (time.perf_counter() - started) * 1000
        length = 0
        if result is not None and measure is not None:
            length = measure(result)
        elif isinstance(result, int):
            length = result
        self.environment.events.request.fire(
            request_type=REQUEST_TYPE,
            name=name,
            response_time=elapsed_ms,
            response_length=length,
            exception=exception,
            context={},
        )
        return result


class _Producer(RocketUser):
    abstract = True
    send_name = "SendMessage"

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.topic: str = _option(environment, "rip5_topic", "loadtest")
        self.body = os.urandom(max(1, _option(environment, "rip5_body_bytes", 1024)))
        self.rate: float = _option(environment, "rip5_rate", 0.0)
        self._paced = constant_throughput(self.rate) if self.rate > 0 else None

    def wait_time(self) -> float:
        """No wait, or the pause that keeps ``--rip5-rate`` requests/s."""
        return self._paced(self) if self._paced is not None else 0.0

    def on_start(self) -> None:
        """Open the channel and look the topic up (as the official clients do first)."""
        super().on_start()
        self.call("QueryRoute", lambda client: client.query_route(self.topic), lambda _: 0)


class NormalProducer(_Producer):
    """One NORMAL message per SendMessage."""

    @task
    def send(self) -> None:
        """Send one message."""
        self.call(
            "SendMessage normal",
            lambda client: client.send([client.message(self.topic, self.body)]),
        )


class BatchProducer(_Producer):
    """``--rip5-batch`` NORMAL messages per SendMessage."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.batch: int = max(1, _option(environment, "rip5_batch", 16))

    @task
    def send(self) -> None:
        """Send one batch."""
        self.call(
            f"SendMessage batch {self.batch}",
            lambda client: client.send(
                [client.message(self.topic, self.body) for _ in range(self.batch)]
            ),
        )


class FifoProducer(_Producer):
    """One FIFO message per SendMessage; message groups round robin."""

    _next_user = 0

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.topic = _option(environment, "rip5_fifo_topic", "loadtest-fifo")
        count = max(1, _option(environment, "rip5_message_groups", 8))
        FifoProducer._next_user += 1
        self.message_groups = [f"u{FifoProducer._next_user}-g{i}" for i in range(count)]
        self._sent = 0

    @task
    def send(self) -> None:
        """Send one message in the next message group."""
        group = self.message_groups[self._sent % len(self.message_groups)]
        self._sent += 1
        self.call(
            "SendMessage fifo",
            lambda client: client.send(
                [client.message(self.topic, self.body, message_group=group)]
            ),
        )


class Consumer(RocketUser):
    """A simple consumer: receive (long polling), then ack what arrived in one call."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.topic: str = _option(environment, "rip5_topic", "loadtest")
        self.consumer_group: str = _option(environment, "rip5_group", "loadtest-group")
        self.batch: int = max(1, _option(environment, "rip5_receive_batch", 32))
        self.invisible_ms: int = _option(environment, "rip5_invisible_ms", 30_000)
        self.long_poll_ms: int = _option(environment, "rip5_long_poll_ms", 2_000)

    def wait_time(self) -> float:
        """Receive again at once: the long poll is the wait."""
        return 0.0

    def on_start(self) -> None:
        """Open the channel and look the topic up."""
        super().on_start()
        self.call("QueryRoute", lambda client: client.query_route(self.topic), lambda _: 0)

    @task
    def receive_and_ack(self) -> None:
        """One receive; one ack for everything it returned."""
        received: list[Received] | None = self.call(
            "ReceiveMessage",
            lambda client: client.receive(
                self.consumer_group,
                self.topic,
                batch_size=self.batch,
                invisible_ms=self.invisible_ms,
                long_polling_ms=self.long_poll_ms,
            ),
            lambda messages: sum(m.body_bytes for m in messages),
        )
        if received:
            self.call(
                "AckMessage",
                lambda client: client.ack(self.consumer_group, self.topic, received),
            )
