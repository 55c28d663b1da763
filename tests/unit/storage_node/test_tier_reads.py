"""Reads of a recorded tier object (storage_node.tier_reads): the messages from an
offset, the read cache, and the count of bytes read from the tier."""

from __future__ import annotations

import asyncio
from pathlib import Path

from protocol.message_objects import TRAILER_BYTES, ObjectBuilder, tier_object_name
from protocol.records import pack_record
from storage_node.tier_reads import TierReader
from storage_node.tier_store import Tier

from .partition.harness import record

GROUP = 3


def test_reads_count_the_bytes_read_from_the_tier_not_the_cache_hits(tmp_path: Path) -> None:
    tier = Tier(f"file://{tmp_path}")
    records = [record(f"m{i}", body=b"b%d" % i) for i in range(6)]
    builder = ObjectBuilder("orders", 0, 10)
    name = tier_object_name("orders", 0, 10, 1)
    parts = [builder.header()]
    parts.append(builder.add_block([100, 101, 102], [pack_record(r) for r in records[:3]]))
    parts.append(builder.add_block([103, 104, 105], [pack_record(r) for r in records[3:]]))
    tail, entry = builder.finish(name)
    path = Path(tier.group_root(GROUP)) / name
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join([*parts, tail]))
    reader = TierReader(tier)

    found = asyncio.run(reader.read(GROUP, [entry], 13, 2))
    assert [(m.queue_offset, m.store_timestamp_ms, m.record.message_id) for m in found] == [
        (13, 103, "m3"),
        (14, 104, "m4"),
    ]
    # The trailer, the footer with the trailer, then the second block only.
    assert reader.read_bytes == TRAILER_BYTES + len(tail) + len(parts[2])
    read_once = reader.read_bytes
    again = asyncio.run(reader.read(GROUP, [entry], 10, 6))  # the first block is new
    assert [m.record.message_id for m in again] == [f"m{i}" for i in range(6)]
    assert reader.read_bytes == read_once + len(parts[1])
    asyncio.run(reader.read(GROUP, [entry], 10, 6))  # all cached now
    assert reader.read_bytes == read_once + len(parts[1])
