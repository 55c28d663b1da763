"""rip5.topic_file: topic files (CSV lines and TOML tables) and the batches that
create their topics; and ``rip5 admin topic create --from-file`` refusing bad files."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from protocol import nameserver_api as api
from protocol.vocabulary import MessageType
from rip5 import admin, topic_file
from rip5.topic_file import TopicFileError, parse_topic_file

TEMPLATE = api.CreateTopicRequest(
    "", "c1", 8, int(MessageType.NORMAL), retention_ms=60_000, read_replicas=True
)


def test_csv_lines_take_the_template_for_what_they_leave_out() -> None:
    text = "name,queues,type\n# a comment\n\norders\npayments, 4\naudit,2,fifo\nlate,,DELAY\n"
    topics = parse_topic_file(text, False, TEMPLATE)
    assert [(t.name, t.queue_count, MessageType(t.message_type)) for t in topics] == [
        ("orders", 8, MessageType.NORMAL),
        ("payments", 4, MessageType.NORMAL),
        ("audit", 2, MessageType.FIFO),
        ("late", 8, MessageType.DELAY),
    ]
    assert all(t.cluster == "c1" and t.retention_ms == 60_000 for t in topics)
    assert all(t.read_replicas for t in topics)  # --read-replicas applies to every line


def test_toml_tables() -> None:
    text = '[[topic]]\nname = "orders"\n\n[[topic]]\nname = "audit"\nqueues = 2\ntype = "FIFO"\n'
    topics = parse_topic_file(text, True, TEMPLATE)
    assert [(t.name, t.queue_count, t.message_type) for t in topics] == [
        ("orders", 8, int(MessageType.NORMAL)),
        ("audit", 2, int(MessageType.FIFO)),
    ]


@pytest.mark.parametrize(
    ("text", "toml", "message"),
    [
        ("ok\nbad topic,4\n", False, r"line 2: topic name 'bad topic' has ' ' at position 3"),
        ("ok,0\n", False, r"line 1: queues must be a whole number in \[1, 1024\]: 0"),
        ("ok,1025\n", False, r"line 1: queues must be"),
        ("ok,x\n", False, r"line 1: queues must be"),
        ("ok,1,weird\n", False, r"line 1: type 'weird' is not one of normal, fifo"),
        ("ok,1,fifo,extra\n", False, r"line 1: 4 fields"),
        ("a\nb\na\n", False, r"line 3: topic 'a' is given twice \(also line 1\)"),
        ("[[topic]]\nqueues = 2\n", True, r"\[\[topic\]\] #1: topic name is empty"),
        ('[[topic]]\nname = "a"\ncolor = 1\n', True, r"#1: unknown keys \['color'\]"),
        ('[[topic]]\nname = "a"\nqueues = 0\n', True, r"#1: queues must be"),
        ('topic = "a"\n', True, r"array of tables"),
        ('name = "a"\n', True, r"unknown keys \['name'\]"),
        ("[[topic]\n", True, r"not valid TOML"),
    ],
)
def test_a_bad_file_is_refused_naming_the_line(text: str, toml: bool, message: str) -> None:
    with pytest.raises(TopicFileError, match=message):
        parse_topic_file(text, toml, TEMPLATE)


class BatchingNameserver:
    """Answers CreateTopics like the nameserver would, recording each request."""

    def __init__(self) -> None:
        self.requests: list[api.CreateTopicsRequest] = []

    async def create_topics(
        self, request: api.CreateTopicsRequest, **_: object
    ) -> api.CreateTopicsResponse:
        self.requests.append(request)
        return api.CreateTopicsResponse(len(request.topics) - 1, len(self.requests))

    async def call(self, method: Callable[[Any], Awaitable[Any]]) -> Any:
        return await method(self)


def test_topics_go_in_batches_of_a_thousand_one_after_the_other() -> None:
    nameserver = BatchingNameserver()
    topics = [api.CreateTopicRequest(f"t{i}", "c1", 8) for i in range(2_500)]
    progress: list[int] = []
    done = asyncio.run(
        topic_file.create_topics(
            nameserver,  # type: ignore[arg-type]
            topics,
            skip_existing=True,
            on_batch=progress.append,
        )
    )
    assert [len(r.topics) for r in nameserver.requests] == [1000, 1000, 500]
    assert [r.topics[0].name for r in nameserver.requests] == ["t0", "t1000", "t2000"]
    assert all(r.skip_existing for r in nameserver.requests)
    assert progress == [1000, 2000, 2500]
    assert done == topic_file.Created(created=2497, sent=2500, revision=3)


def test_the_cli_refuses_a_bad_file_before_sending(tmp_path: Path) -> None:
    path = tmp_path / "topics.csv"
    path.write_text("ok-topic\nbad topic,4\n")
    result = CliRunner().invoke(admin.topic, ["create", "--from-file", str(path)])
    assert result.exit_code == 2
    assert "line 2" in result.output
    assert "' ' at position 3" in result.output
    both = CliRunner().invoke(admin.topic, ["create", "x", "--from-file", str(path)])
    assert both.exit_code == 2
    assert "not both" in both.output
    neither = CliRunner().invoke(admin.topic, ["create"])
    assert neither.exit_code == 2
    assert "NAME" in neither.output
