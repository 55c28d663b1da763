"""The Spark source's options, its column pruning, and the writer's ids and queues (no JVM)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from protocol.message_objects import OFFSET_MAX, BlockColumns, ReadWindow
from protocol.records import MessageRecord
from protocol.vocabulary import MessageType
from spark_batch.source import (
    ARROW_SCHEMA,
    ReadOptionError,
    ReadPlan,
    columns_ddl,
    parse_time_ms,
    read_columns,
    storage_options,
    to_arrow,
)
from spark_batch.writer import message_id, queue_for_partition


def test_read_plan_from_options() -> None:
    plan = ReadPlan.from_options(
        {"topic": "a,b", "QUEUES": "1, 3", "offsetfrom": "10", "timeTo": "2026-01-01T00:00:00"}
    )
    assert plan.topics == ["a", "b"]
    assert plan.queue_ids == [1, 3]
    assert plan.window == ReadWindow(10, OFFSET_MAX, None, 1_767_225_600_000)
    assert ReadPlan.from_options({}).window == ReadWindow()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"queues": "x"}, "queues"),
        ({"offsetTo": "1.5"}, "offsetTo"),
        ({"timeFrom": "soon"}, "timeFrom"),
    ],
)
def test_a_bad_option_is_named(options: dict[str, str], named: str) -> None:
    with pytest.raises(ReadOptionError, match=named):
        ReadPlan.from_options(options)


def test_times_and_storage_options() -> None:
    assert parse_time_ms("t", "1700000000000") == 1_700_000_000_000
    assert parse_time_ms("t", "2023-11-14T22:13:20+00:00") == 1_700_000_000_000
    assert storage_options({"fs.endpoint_url": "http://x", "topic": "t"}) == {
        "endpoint_url": "http://x"
    }


def test_message_ids_are_the_same_on_every_attempt_and_differ_between_rows() -> None:
    assert message_id("w", 3, 17) == message_id("w", 3, 17)
    ids = {message_id("w", p, r) for p in range(4) for r in range(1000)}
    ids |= {message_id("other", 0, r) for r in range(1000)}
    assert len(ids) == 5000
    assert all(len(i) == 32 and i == i.upper() for i in ids)


def test_each_partition_names_one_queue_never_queue_zero_if_others_exist() -> None:
    assert [queue_for_partition(p, [0, 1, 2, 3]) for p in range(5)] == [1, 2, 3, 1, 2]
    assert queue_for_partition(7, [0]) == 0
    with pytest.raises(ReadOptionError, match="no writable queue"):
        queue_for_partition(0, [])


def test_a_topic_the_snapshot_lacks_is_named(tmp_path: Path) -> None:
    from protocol.message_objects import MANIFEST_NAME, Manifest, QueueManifest, encode_manifest
    from spark_batch.source import Rip5Reader

    manifest = Manifest("s", 1, [QueueManifest("orders", 0, 1, 0, 0, -1, -1, [])])
    (tmp_path / MANIFEST_NAME).write_bytes(encode_manifest(manifest))
    assert Rip5Reader({"path": str(tmp_path), "topic": "orders"}).partitions() == []
    with pytest.raises(ReadOptionError, match="holds no topic ordres \\(it holds orders\\)"):
        Rip5Reader({"path": str(tmp_path), "topic": "ordres"}).partitions()


def _block() -> tuple[BlockColumns, list[MessageRecord]]:
    """A decoded block of three mixed messages (columns as ``decode_block`` gives them)."""
    records = [
        MessageRecord("t", 2, "m0", b"zero", tag="a", keys=("k",), born_timestamp_ms=5),
        MessageRecord(
            "t",
            2,
            "m1",
            b"one",
            properties=(("p", "v"),),
            delivery_timestamp_ms=9,
            message_type=MessageType.DELAY,
        ),
        MessageRecord("t", 2, "m2", b"", message_group="g", message_type=MessageType.FIFO),
    ]
    columns = [tuple(column) for column in zip(*records, strict=True)]
    kind = MessageRecord._fields.index("message_type")
    columns[kind] = tuple(int(v) for v in columns[kind])
    return BlockColumns(40, (100, 200, 300), tuple(columns)), records


def test_the_columns_asked_for_are_the_full_batch_s_columns() -> None:
    block, _records = _block()
    window = ReadWindow(0, OFFSET_MAX, 150, None)
    full = to_arrow("t", 2, block, 0, 3, window)
    assert full.schema == ARROW_SCHEMA
    assert full.column("queue_offset").to_pylist() == [41, 42]
    for names in (["body"], ["store_timestamp", "body", "queue_offset"], list(ARROW_SCHEMA.names)):
        pruned = to_arrow("t", 2, block, 0, 3, window, names)
        assert pruned.schema.names == names
        assert pruned.to_pydict() == full.select(names).to_pydict()
    assert to_arrow("t", 2, block, 1, 2, ReadWindow(), ["tag", "message_type"]).to_pylist() == [
        {"tag": None, "message_type": "DELAY"}
    ]


def test_read_columns_from_the_schema_or_the_columns_option() -> None:
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    assert read_columns(None, {}) == ARROW_SCHEMA.names
    assert read_columns(None, {"COLUMNS": " body, tag "}) == ["body", "tag"]
    user = StructType([StructField("queue_offset", LongType()), StructField("body", BinaryType())])
    assert read_columns(user, {}) == ["queue_offset", "body"]
    assert columns_ddl(["keys", "body", "properties"]) == (
        "keys array<string>, body binary, properties map<string,string>"
    )


@pytest.mark.parametrize(
    ("schema", "options", "named"),
    [
        (None, {"columns": "body,bdy"}, "option columns: 'bdy' is not a rip5 column"),
        (None, {"columns": " , "}, "names no column"),
        (None, {"columns": "body,body"}, "names a column twice"),
        ("payload", {}, "schema column 'payload' is not a rip5 column"),
        ("queue_id", {}, "schema column 'queue_id' is string; the rip5 column is int32"),
    ],
)
def test_a_bad_column_is_named(schema: str | None, options: dict[str, str], named: str) -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    struct = None if schema is None else StructType([StructField(schema, StringType())])
    with pytest.raises(ReadOptionError, match=re.escape(named)):
        read_columns(struct, options)
