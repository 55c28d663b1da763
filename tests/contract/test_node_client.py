"""The broker's gRPC endpoint against the OFFICIAL RocketMQ Node.js client (on @grpc/grpc-js).

A user's Node service must survive its clients' shutdown: the client half-closes
its Telemetry stream, drops its listeners and closes the channel (grpc-js then
sends GOAWAY with the stream still open). The server must still answer that
stream (status OK, as the Java proxy does) before the connection ends; dropping
the connection instead killed the Node process with an unhandled
``14 UNAVAILABLE: Connection dropped``. Both servers pass the same case.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.grpc.server import SERVERS
from tests.contract.node_clients import run_node
from tests.contract.test_official_client import BrokerProcess, serving_broker

pytestmark = pytest.mark.integration


@pytest.fixture(params=SERVERS)
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker process over the in-memory ports, on each gRPC server."""
    with serving_broker(tmp_path, "--grpc-server", request.param) as process:
        yield process


def test_producer_and_simple_consumer_shut_down_cleanly(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    result = run_node(
        "official_shutdown.js", str(broker.port), "normal", "node-group", home=tmp_path
    )
    assert result == {"sent": 3, "received": 3}
