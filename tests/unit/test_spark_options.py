"""The Spark source's options and the writer's ids and queues (no JVM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.message_objects import OFFSET_MAX, ReadWindow
from spark_batch.source import ReadOptionError, ReadPlan, parse_time_ms, storage_options
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
