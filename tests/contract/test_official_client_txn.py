"""Timed and transactional messages with the OFFICIAL RocketMQ Python client.

The broker runs over the in-memory ports in its own process (see
``memory_broker.py``; ``--brokers 2`` serves two brokers sharing one store,
one lease table and direct peer calls), the client scenarios in others
(``official_client.py``). The full-cluster runs of the same scenarios are in
``tests/e2e``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.rocketmq.v2 import definition_pb2 as pb
from tests.contract.test_official_client import BrokerProcess, broker, run_client

pytestmark = pytest.mark.integration
__all__ = ["broker"]  # the one-broker fixture, shared with the other official-client tests


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[BrokerProcess]:
    """Two brokers sharing a store; orphans are checked 1 s after their send, every 2 s."""
    process = BrokerProcess(
        tmp_path, "--brokers", "2", "--check-delay-ms", "1000", "--check-interval-ms", "2000"
    )
    try:
        yield process
    finally:
        process.stop()
    assert process.stopped_alive, f"the brokers died during the test: {process.log_path}"


def test_timed_message_arrives_when_due_not_before(broker: BrokerProcess, tmp_path: Path) -> None:
    seen = run_client(broker.port, "timed", tmp_path)
    (received,) = seen["received"]
    assert received["id"] == seen["id"]
    assert received["body"] == "later"
    assert seen["delivery_timestamps"] == [seen["due_ms"]]
    # Not before due, and promptly after (the store wakes the long poll at due time).
    assert seen["due_ms"] <= seen["arrived_ms"] <= seen["due_ms"] + 1_000


def test_commit_is_visible_and_rollback_never(broker: BrokerProcess, tmp_path: Path) -> None:
    seen = run_client(broker.port, "transactions", tmp_path)
    assert seen["transaction_id"].startswith("T1:")
    assert seen["before_commit"] == []
    assert [m["id"] for m in seen["received"]] == [seen["committed"]]
    assert seen["received"][0]["body"] == "commit-me"
    # Ending an ended transaction again: it is no longer there to end.
    assert seen["commit_again"] == pb.NOT_FOUND
    # A check-back may have come before the commit: the checker said "unknown yet".
    assert set(seen["checked"]) <= {seen["committed"]}


def test_orphan_is_resolved_through_a_producer_on_another_broker(
    two_brokers: BrokerProcess, tmp_path: Path
) -> None:
    first, second = two_brokers.ports
    # The first producer sends through broker 1 and exits before deciding.
    orphan = run_client(first, "orphan_send", tmp_path)["orphan"]
    # A second producer of the same group (topic) connects to broker 2 only.
    seen = run_client(second, "orphan_resolve", tmp_path, orphan)
    assert orphan in seen["checked"]
    assert [m["id"] for m in seen["received"]] == [orphan]
    assert seen["received"][0]["body"] == "orphan"
    two_brokers.stop()
    checks = json.loads(two_brokers.port_file.with_suffix(".checks").read_text())
    # Broker 1 started first and so holds the check lease for good (it renews it every
    # scan): it scanned alone and had broker 2 deliver the check to its producer.
    assert checks["broker-1"]["via_peer"] >= 1
    assert checks["broker-1"]["local"] == 0
    assert checks["broker-2"] == {"local": 0, "via_peer": 0}
