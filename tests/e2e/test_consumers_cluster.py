"""Consumer features through the official Python client against a real cluster:
SQL92 subscriptions, and recall of timed messages; and a SQL92 pull over our own
gRPC v2 stubs (the official Python client has no pull consumer).

One cluster for the module (1 nameserver, 3 storage nodes, 1 broker, auto-create
off: topics and groups are created through the nameserver as an operator would).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from tests.e2e.cluster import LocalCluster, official_client_step, running_cluster
from tests.e2e.sql_filter_table import EXPRESSIONS

pytestmark = pytest.mark.integration

NORMAL, DELAY = 1, 3
META = (("x-mq-client-id", "e2e-sql-pull-client"),)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's cluster, with its topics and consumer groups."""
    with running_cluster(
        tmp_path_factory.mktemp("cluster"),
        {
            "sql": (2, NORMAL),
            "sql-pull": (1, NORMAL),
            "timed": (2, DELAY),
            "plain": (1, NORMAL),
        },
        {
            **{f"sql-{i}": (False, 3) for i in range(len(EXPRESSIONS))},
            "sql-bad": (False, 3),
            "recall-reader": (False, 3),
            "sql-puller": (False, 3),
        },
        groups=4,
    ) as local:
        yield local


def run_client(cluster: LocalCluster, scenario: str, *args: object) -> dict[str, Any]:
    """Run one scenario of ``tests/e2e/consumers_client.py`` in its own interpreter."""
    return official_client_step(cluster, "tests.e2e.consumers_client", scenario, *args)


def test_sql92_subscriptions_receive_exactly_the_matching_messages(
    cluster: LocalCluster,
) -> None:
    received = run_client(cluster, "sql_filters", "sql")["received"]
    assert received == dict(EXPRESSIONS)


def test_a_bad_sql92_expression_is_refused_with_its_position(cluster: LocalCluster) -> None:
    seen = run_client(cluster, "sql_refused", "sql")
    assert seen["refused"]
    assert seen["code"] == pb.ILLEGAL_FILTER_EXPRESSION
    assert "line 2, column 6" in seen["message"]


def test_a_timed_message_recalled_before_due_never_arrives(cluster: LocalCluster) -> None:
    seen = run_client(cluster, "recall", "timed", "plain")
    assert seen["handles"] == [True, True]  # a timed message's send returns a handle
    assert seen["plain_handle"] is None  # a normal message's does not
    assert 0.5 < seen["recall_before_due_s"] <= 1.0
    recalled_id, kept_id = seen["sent_ids"]
    assert seen["recalled_id"] == recalled_id
    assert seen["received"] == ["kept"]  # the recalled one never came
    late = seen["late_recall"]
    assert late["code"] == pb.NOT_FOUND
    assert kept_id in late["message"]
    assert "delivered" in late["message"]


def _pull_sql(stub: service_pb2_grpc.MessagingServiceStub, expression: str) -> dict[str, Any]:
    """One PullMessage of queue 0 of ``sql-pull`` from offset 0 with a SQL92 filter."""
    request = spb.PullMessageRequest(
        group=pb.Resource(name="sql-puller"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="sql-pull"), id=0),
        offset=0,
        batch_size=32,
        filter_expression=pb.FilterExpression(type=pb.SQL, expression=expression),
    )
    request.long_polling_timeout.FromSeconds(5)
    out: dict[str, Any] = {"bodies": []}
    for response in stub.PullMessage(request, metadata=META, timeout=20):
        kind = response.WhichOneof("content")
        if kind == "status":
            out["status"] = (response.status.code, response.status.message)
        elif kind == "message":
            out["bodies"].append(response.message.body.decode())
        else:
            out["next_offset"] = response.next_offset
    return out


def test_a_sql92_pull_returns_only_the_matches(cluster: LocalCluster) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{cluster.broker_port()}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        messages = [
            pb.Message(
                topic=pb.Resource(name="sql-pull"),
                body=str(i).encode(),
                user_properties={"n": str(i)} if i != 4 else {},
                system_properties=pb.SystemProperties(
                    message_id=f"01{i:030X}", message_type=pb.NORMAL, body_encoding=pb.IDENTITY
                ),
            )
            for i in range(6)
        ]
        sent = stub.SendMessage(spb.SendMessageRequest(messages=messages), metadata=META)
        assert sent.status.code == pb.OK
        pulled = _pull_sql(stub, "n >= 3 OR n IS NULL")
        assert pulled["status"][0] == pb.OK
        assert pulled["bodies"] == ["3", "4", "5"]
        assert pulled["next_offset"] == 6
        refused = _pull_sql(stub, "n >= ")
        assert refused["status"][0] == pb.ILLEGAL_FILTER_EXPRESSION
        assert "line 1, column" in refused["status"][1]
