"""The streaming reader's offsets and options (no JVM, no cluster)."""

from __future__ import annotations

import pickle

import pytest

from protocol.rocketmq.v2 import definition_pb2 as pb
from spark_batch.source import ReadOptionError
from spark_batch.stream import (
    QueueRange,
    Rip5StreamReader,
    capped_end,
    messages_to_arrow,
    offsets_from_json,
    offsets_json,
    starting_offsets,
)


def test_offsets_round_trip_through_their_json_form() -> None:
    offsets = {3: 10, 0: 7}
    assert offsets_json(offsets) == {"0": 7, "3": 10}
    assert offsets_from_json(offsets_json(offsets), "x") == offsets


@pytest.mark.parametrize("value", [{"a": 1}, {"0": "x"}, {"0": -1}, {"-1": 0}])
def test_malformed_offsets_are_refused_naming_what(value: dict[str, object]) -> None:
    with pytest.raises(ReadOptionError, match="start offset"):
        offsets_from_json(value, "start offset")


def test_starting_offsets_option() -> None:
    assert starting_offsets(None) == "earliest"
    assert starting_offsets(" Earliest") == "earliest"
    assert starting_offsets("LATEST") == "latest"
    assert starting_offsets('{"0": 5, "2": 9}') == {0: 5, 2: 9}
    for bad in ("soon", "[1]", '{"q": 1}'):
        with pytest.raises(ReadOptionError, match="startingOffsets"):
            starting_offsets(bad)


def test_capped_end_shares_the_limit_fairly_and_passes_on_what_a_queue_leaves() -> None:
    start = {0: 0, 1: 100, 2: 50, 3: 8}
    end = {0: 1000, 1: 102, 2: 1000, 3: 8}
    # 3 queues have messages; queue 1 needs only 2 of its share of 100
    assert capped_end(start, end, 300) == {0: 149, 1: 102, 2: 199, 3: 8}
    assert capped_end(start, end, 10_000) == end
    assert capped_end(start, end, 1) == {0: 1, 1: 100, 2: 50, 3: 8}
    total = sum(capped_end(start, end, 301)[q] - start[q] for q in start)
    assert total == 301


def test_capped_end_of_a_new_queue_starts_where_its_end_is_unknown() -> None:
    assert capped_end({}, {0: 5}, 3) == {0: 5}


def test_partitions_cover_only_queues_with_messages() -> None:
    reader = Rip5StreamReader({"endpoints": "127.0.0.1:1", "topic": "t"})
    parts = reader.partitions({"0": 4, "1": 9}, {"0": 10, "1": 9, "2": 3})
    assert [(p.queue_id, p.start, p.end) for p in parts] == [(0, 4, 10), (2, 0, 3)]
    assert all(isinstance(p, QueueRange) for p in parts)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"topic": "t"}, "endpoints"),
        ({"endpoints": "h:1"}, "topic"),
        ({"endpoints": "nohost", "topic": "t"}, "endpoints"),
        ({"endpoints": "h:1", "topic": "t", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"endpoints": "h:1", "topic": "t", "startingOffsets": "x"}, "startingOffsets"),
    ],
)
def test_bad_stream_options_are_named(options: dict[str, str], named: str) -> None:
    with pytest.raises(ReadOptionError, match=named):
        Rip5StreamReader(options)


def test_messages_become_the_batch_readers_columns() -> None:
    system = pb.SystemProperties(
        message_id="m1",
        tag="",
        keys=["a"],
        message_group="g",
        message_type=pb.FIFO,
        queue_id=2,
        queue_offset=41,
    )
    system.born_timestamp.FromMilliseconds(1_000)
    system.store_timestamp.FromMilliseconds(2_000)
    message = pb.Message(
        topic=pb.Resource(name="t"),
        system_properties=system,
        user_properties={"k": "v"},
        body=b"x",
    )
    row = messages_to_arrow([message]).to_pylist()[0]
    assert row["topic"] == "t"
    assert (row["queue_id"], row["queue_offset"]) == (2, 41)
    assert (row["tag"], row["keys"], row["message_group"]) == (None, ["a"], "g")
    assert (row["properties"], row["body"], row["message_type"]) == ([("k", "v")], b"x", "FIFO")
    assert row["born_timestamp"].timestamp() == 1.0
    assert row["store_timestamp"].timestamp() == 2.0
    assert row["delivery_timestamp"] is None


def test_a_reader_that_opened_channels_still_pickles_without_them() -> None:
    reader = Rip5StreamReader({"endpoints": "127.0.0.1:1", "topic": "t", "group": "g"})
    reader._client()  # a planner's channel (lazily connected: nothing is dialled)
    copy = pickle.loads(pickle.dumps(reader))
    assert (copy.endpoints, copy.topic, copy.group) == (["127.0.0.1:1"], "t", "g")
    assert copy._consumer is None
    reader.stop()
