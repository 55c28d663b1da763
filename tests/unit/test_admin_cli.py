"""``rip5 admin topic create|update --type``: every spelling an operator may type, and a
clear usage error for anything else; ``--read-replicas on|off``, shown by the tables and
``topic list --json``. The nameserver call is replaced by a recorder."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from click.testing import CliRunner

from protocol import nameserver_api as api
from protocol.vocabulary import MessageType
from rip5 import admin


class RecordingNameserver:
    """Answers create_topic / update_topic with the topic the request describes."""

    def __init__(self) -> None:
        self.requests: list[object] = []

    async def create_topic(self, request: api.CreateTopicRequest, **_: object) -> api.TopicResponse:
        self.requests.append(request)
        topic = api.TopicInfo(
            request.name,
            request.cluster,
            request.queue_count,
            request.message_type,
            1,
            6,
            read_replicas=request.read_replicas,
        )
        return api.TopicResponse(topic, 7)

    async def update_topic(self, request: api.UpdateTopicRequest, **_: object) -> api.TopicResponse:
        self.requests.append(request)
        kind = request.message_type or int(MessageType.NORMAL)
        topic = api.TopicInfo(
            request.name, "c", 8, kind, 1, 6, read_replicas=bool(request.read_replicas)
        )
        return api.TopicResponse(topic, 8)

    async def list_topics(self, request: api.ListRequest, **_: object) -> api.TopicListResponse:
        self.requests.append(request)
        topics = [
            api.TopicInfo("cold", "c", 8, 0, 1, 6),
            api.TopicInfo("hot", "c", 8, 0, 1, 6, read_replicas=True),
        ]
        return api.TopicListResponse(topics, 9)


@pytest.fixture
def nameserver(monkeypatch: pytest.MonkeyPatch) -> RecordingNameserver:
    recorder = RecordingNameserver()

    def run(address: str, method: Callable[[Any], Awaitable[object]]) -> object:
        async def call() -> object:
            return await method(recorder)

        return asyncio.run(call())

    monkeypatch.setattr(admin, "run", run)
    return recorder


SPELLINGS = [
    (spelling, kind)
    for kind in MessageType
    for spelling in (kind.name, kind.name.lower(), kind.name.capitalize())
]


@pytest.mark.parametrize("command", ["create", "update"])
@pytest.mark.parametrize(("spelling", "kind"), SPELLINGS)
def test_the_v2_enum_spelling_is_taken_in_any_case(
    nameserver: RecordingNameserver, command: str, spelling: str, kind: MessageType
) -> None:
    result = CliRunner().invoke(admin.topic, [command, "Orders", "--type", spelling])
    assert result.exit_code == 0, result.output
    (request,) = nameserver.requests
    assert isinstance(request, api.CreateTopicRequest | api.UpdateTopicRequest)
    assert request.message_type == int(kind)
    assert kind.name.lower() in result.output  # the table names the type as stored


def test_create_without_type_makes_a_normal_topic(nameserver: RecordingNameserver) -> None:
    result = CliRunner().invoke(admin.topic, ["create", "Orders"])
    assert result.exit_code == 0, result.output
    assert nameserver.requests == [
        api.CreateTopicRequest("Orders", admin.DEFAULT_CLUSTER, 8, int(MessageType.NORMAL), 0, 6)
    ]


@pytest.mark.parametrize("command", ["create", "update"])
@pytest.mark.parametrize("value", ["TIMED", "MIXED", "", "fifo2"])
def test_a_bad_type_is_a_usage_error_naming_the_allowed_ones(
    nameserver: RecordingNameserver, command: str, value: str
) -> None:
    result = CliRunner().invoke(admin.topic, [command, "Orders", "--type", value])
    assert result.exit_code == admin.EXIT_USAGE
    assert "--type" in result.output
    assert repr(value) in result.output
    for kind in MessageType:
        assert repr(kind.name.lower()) in result.output
    assert nameserver.requests == []


def test_the_storage_table_shows_down_degraded_and_healthy_nodes() -> None:
    nodes = [
        api.StorageNodeInfo(1, "c1", "h:1", True, 5),
        api.StorageNodeInfo(2, "c1", "h:2", True, 5, degraded=True, fsync_p99_us=250_000),
        api.StorageNodeInfo(3, "c1", "h:3", False, 5, draining=True),
    ]
    table = admin.storage_nodes_table(nodes, 5)
    health = next(c for c in table.columns if c.header == "health")
    assert list(health.cells) == ["up", "up, DEGRADED", "DOWN, DRAINING"]
    fsync = next(c for c in table.columns if c.header == "fsync_p99")
    assert list(fsync.cells) == ["-", "250.0 ms", "-"]


def _column(output: str, row: str) -> str:
    """The read_replicas cell of the table row starting with ``row`` (the last column)."""
    line = next(line for line in output.splitlines() if line.strip("│ ").startswith(row))
    return line.strip("│ ").rsplit("│", 1)[-1].strip()


def test_read_replicas_are_off_unless_asked_for(nameserver: RecordingNameserver) -> None:
    result = CliRunner().invoke(admin.topic, ["create", "Cold"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(admin.topic, ["create", "Hot", "--read-replicas", "on"])
    assert result.exit_code == 0, result.output
    assert _column(result.output, "Hot") == "on"
    cold, hot = nameserver.requests
    assert isinstance(cold, api.CreateTopicRequest)
    assert isinstance(hot, api.CreateTopicRequest)
    assert (cold.read_replicas, hot.read_replicas) == (False, True)


def test_an_update_changes_read_replicas_only_when_given(nameserver: RecordingNameserver) -> None:
    for args in (["--queues", "9"], ["--read-replicas", "on"], ["--read-replicas", "off"]):
        result = CliRunner().invoke(admin.topic, ["update", "Hot", *args])
        assert result.exit_code == 0, result.output
    assert [r.read_replicas for r in nameserver.requests] == [None, True, False]  # type: ignore[attr-defined]
    assert _column(result.output, "Hot") == "off"


def test_a_bad_read_replicas_value_is_a_usage_error(nameserver: RecordingNameserver) -> None:
    result = CliRunner().invoke(admin.topic, ["update", "Hot", "--read-replicas", "yes"])
    assert result.exit_code == admin.EXIT_USAGE
    assert "--read-replicas" in result.output
    assert "'on'" in result.output
    assert "'off'" in result.output
    assert nameserver.requests == []


def test_topic_list_shows_read_replicas_in_its_table_and_json(
    nameserver: RecordingNameserver,
) -> None:
    result = CliRunner().invoke(admin.topic, ["list"])
    assert result.exit_code == 0, result.output
    assert (_column(result.output, "cold"), _column(result.output, "hot")) == ("off", "on")
    result = CliRunner().invoke(admin.topic, ["list", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["revision"] == 9
    assert {t["name"]: t["read_replicas"] for t in document["topics"]} == {
        "cold": False,
        "hot": True,
    }
