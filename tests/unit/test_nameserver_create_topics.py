"""nameserver.state: CreateTopics creates many topics in one entry, all or nothing,
with an error naming the topic that refused the entry."""

from __future__ import annotations

import pytest

from nameserver import commands as c
from nameserver.errors import AlreadyExists, BadRequest, InvalidName, NotFound
from nameserver.records import ChangeKind
from nameserver.state import MetadataState
from nameserver.validation import CREATE_TOPICS_MAX
from protocol.vocabulary import MessageType


def _state() -> MetadataState:
    state = MetadataState()
    state.apply(c.CreateCluster("c1", 4))
    return state


def _topics(count: int, queues: int = 8) -> tuple[c.CreateTopic, ...]:
    return tuple(c.CreateTopic(f"t{i}", "c1", queues) for i in range(count))


def test_one_entry_creates_every_topic_in_one_revision() -> None:
    state = _state()
    before = state.revision
    topics = (*_topics(3), c.CreateTopic("f", "c1", 2, MessageType.FIFO))
    applied = state.apply(c.CreateTopics(topics))
    assert applied.revision == before + 1
    assert [t.name for t in applied.value] == ["t0", "t1", "t2", "f"]  # type: ignore[attr-defined]
    assert [(ch.kind, ch.key) for ch in applied.changes] == [
        (ChangeKind.TOPIC, name) for name in ("t0", "t1", "t2", "f")
    ]
    assert state.topic("f").message_type is MessageType.FIFO
    assert state.topic("t2").queue_count == 8
    assert len(state.topics()) == 4


def test_the_same_topics_one_by_one_give_the_same_records() -> None:
    batched, single = _state(), _state()
    batched.apply(c.CreateTopics(_topics(5, queues=3)))
    for one in _topics(5, queues=3):
        single.apply(one)
    assert batched.topics() == single.topics()


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (c.CreateTopic("bad topic", "c1", 8), InvalidName, r"topics\[2\] \('bad topic'\)"),
        (c.CreateTopic("t9", "c1", 0), BadRequest, r"topics\[2\] \('t9'\).*queue_count"),
        (c.CreateTopic("t9", "c1", 1025), BadRequest, r"queue_count must be in \[1, 1024\]"),
        (c.CreateTopic("t9", "nope", 8), NotFound, r"topics\[2\] \('t9'\).*cluster 'nope'"),
        (c.CreateTopic("t0", "c1", 8), AlreadyExists, r"topics\[2\] \('t0'\).*given twice"),
        (c.CreateTopic("old", "c1", 8), AlreadyExists, r"'old'.*exists already"),
    ],
)
def test_one_bad_topic_refuses_the_whole_entry(
    bad: c.CreateTopic, error: type[Exception], message: str
) -> None:
    state = _state()
    state.apply(c.CreateTopic("old", "c1", 8))
    before = (state.revision, state.snapshot())
    with pytest.raises(error, match=message) as caught:
        state.apply(c.CreateTopics((*_topics(2), bad, *_topics(1))))
    assert "none of the 4 was created" in str(caught.value)
    assert (state.revision, state.snapshot()) == before


def test_skip_existing_leaves_existing_topics_as_they_are() -> None:
    state = _state()
    state.apply(c.CreateTopic("t1", "c1", 2))
    applied = state.apply(c.CreateTopics(_topics(3), skip_existing=True))
    assert [t.name for t in applied.value] == ["t0", "t2"]  # type: ignore[attr-defined]
    assert state.topic("t1").queue_count == 2
    again = state.apply(c.CreateTopics(_topics(3), skip_existing=True))
    assert again.value == ()
    assert again.changes == ()
    assert again.revision == applied.revision


def test_an_entry_holds_one_to_the_maximum_of_topics() -> None:
    state = _state()
    with pytest.raises(BadRequest, match=r"topics in one CreateTopics must be in \[1, 1000\]"):
        state.apply(c.CreateTopics(()))
    with pytest.raises(BadRequest, match="got 1001"):
        state.apply(c.CreateTopics(_topics(CREATE_TOPICS_MAX + 1)))
    applied = state.apply(c.CreateTopics(_topics(CREATE_TOPICS_MAX)))
    assert len(applied.changes) == CREATE_TOPICS_MAX


def test_a_batch_round_trips_through_the_log_codec() -> None:
    command = c.CreateTopics(_topics(2), skip_existing=True)
    assert c.decode(c.encode(command)) == command
