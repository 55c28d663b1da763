"""Message objects and manifests: round trips, seeking by offset and time, corruption."""

from __future__ import annotations

import crc32c
import pytest

from protocol import message_objects as mo
from protocol.records import MessageRecord, MessageType, pack_record


def _record(i: int) -> MessageRecord:
    return MessageRecord(
        "orders",
        3,
        f"id-{i}",
        bytes([i % 256]) * (i % 7 + 1),
        tag="a" if i % 2 else "",
        keys=(f"k{i}",) if i % 3 else (),
        message_group="g" if i % 5 == 0 else "",
        properties=(("p", str(i)),) if i % 4 else (),
        born_timestamp_ms=1_000 + i,
        message_type=MessageType.FIFO if i % 5 == 0 else MessageType.NORMAL,
    )


def _object(first: int, blocks: list[list[int]]) -> tuple[bytes, mo.ObjectEntry]:
    builder = mo.ObjectBuilder("orders", 3, first)
    parts = [builder.header()]
    for offsets in blocks:
        parts.append(
            builder.add_block(
                [10_000 + o * 10 for o in offsets], [pack_record(_record(o)) for o in offsets]
            )
        )
    tail, entry = builder.finish(mo.object_name("orders", 3, first))
    parts.append(tail)
    return b"".join(parts), entry


def _read_all(
    data: bytes, name: str, window: mo.ReadWindow
) -> list[tuple[int, int, MessageRecord]]:
    footer = mo.decode_footer(data[-4096:], name, len(data))
    rows = []
    for block in footer.blocks_in(window):
        decoded = mo.decode_block(data[block.position : block.position + block.length], block, name)
        for i, record in enumerate(mo.block_records(decoded)):
            rows.append((decoded.first_offset + i, decoded.store_timestamps_ms[i], record))
    return rows


def test_object_round_trip_and_entry() -> None:
    data, entry = _object(100, [list(range(100, 110)), list(range(110, 113))])
    assert (entry.first_offset, entry.end_offset, entry.size_bytes) == (100, 113, len(data))
    assert (entry.min_store_timestamp_ms, entry.max_store_timestamp_ms) == (11_000, 11_120)
    assert entry.crc32c == crc32c.crc32c(data)
    rows = _read_all(data, entry.name, mo.ReadWindow())
    assert [r[0] for r in rows] == list(range(100, 113))
    assert [r[2] for r in rows] == [_record(o) for o in range(100, 113)]
    assert [r[1] for r in rows] == [10_000 + o * 10 for o in range(100, 113)]


def test_blocks_in_skips_blocks_outside_the_window() -> None:
    data, entry = _object(0, [list(range(4)), list(range(4, 8)), list(range(8, 12))])
    footer = mo.decode_footer(data, entry.name, len(data))
    by_offset = footer.blocks_in(mo.ReadWindow(first_offset=5, end_offset=7))
    assert [b.first_offset for b in by_offset] == [4]
    by_time = footer.blocks_in(mo.ReadWindow(from_timestamp_ms=10_080, to_timestamp_ms=10_081))
    assert [b.first_offset for b in by_time] == [8]


def test_a_corrupt_block_names_object_and_offset() -> None:
    data, entry = _object(40, [list(range(40, 44)), list(range(44, 48))])
    footer = mo.decode_footer(data, entry.name, len(data))
    second = footer.blocks[1]
    broken = bytearray(data)
    broken[second.position + 20] ^= 0xFF
    with pytest.raises(mo.ObjectCorrupted, match=r"objects/orders/3/0+40\.r5mo.*offset 44"):
        _read_all(bytes(broken), entry.name, mo.ReadWindow())
    # The first block is intact and still readable on its own.
    assert len(_read_all(bytes(broken), entry.name, mo.ReadWindow(end_offset=44))) == 4


def test_a_corrupt_footer_or_trailer_is_refused() -> None:
    data, entry = _object(0, [[0, 1]])
    with pytest.raises(mo.ObjectCorrupted, match="bad trailer magic"):
        mo.decode_footer(data[:-8] + b"XXXX" + data[-4:], entry.name, len(data))
    broken = bytearray(data)
    broken[-mo.TRAILER_BYTES - 3] ^= 1
    with pytest.raises(mo.ObjectCorrupted, match="footer checksum mismatch"):
        mo.decode_footer(bytes(broken), entry.name, len(data))


def _manifest() -> mo.Manifest:
    objects = [
        mo.ObjectEntry("objects/orders/0/a", 0, 10, 100, 190, 1, 2),
        mo.ObjectEntry("objects/orders/0/b", 10, 20, 200, 290, 1, 2),
    ]
    return mo.Manifest(
        "snap-1",
        123,
        [
            mo.QueueManifest("orders", 0, 5, 0, 20, 100, 290, objects),
            mo.QueueManifest("orders", 1, 6, 0, 0, -1, -1, []),
            mo.QueueManifest("other", 0, 7, 0, 10, 100, 190, [objects[0]]),
        ],
        [mo.GroupPoint(5, 40), mo.GroupPoint(6, 3)],
    )


def test_manifest_round_trip_and_checksum() -> None:
    manifest = _manifest()
    data = mo.encode_manifest(manifest)
    assert mo.decode_manifest(data, "x") == manifest
    with pytest.raises(mo.ObjectCorrupted, match="checksum mismatch"):
        mo.decode_manifest(data.replace(b'"snap-1"', b'"snap-2"'), "x")
    with pytest.raises(mo.ObjectCorrupted, match="not a manifest"):
        mo.decode_manifest(b"{", "x")


def test_manifest_with_a_gap_is_refused() -> None:
    queue = mo.QueueManifest(
        "t",
        0,
        1,
        0,
        20,
        0,
        0,
        [mo.ObjectEntry("a", 0, 10, 0, 0, 1, 1), mo.ObjectEntry("b", 11, 20, 0, 0, 1, 1)],
    )
    with pytest.raises(mo.ObjectCorrupted, match="object b does not start at offset 10"):
        mo.check_queue(queue, "x")


def test_select_objects_prunes_by_topic_queue_offset_and_time() -> None:
    queues = _manifest().queues
    assert len(mo.select_objects(queues, mo.ReadWindow())) == 3
    assert [
        r.entry.name for r in mo.select_objects(queues, mo.ReadWindow(), topics=["orders"])
    ] == [
        "objects/orders/0/a",
        "objects/orders/0/b",
    ]
    assert mo.select_objects(queues, mo.ReadWindow(), topics=["orders"], queue_ids=[1]) == []
    reads = mo.select_objects(queues, mo.ReadWindow(first_offset=12), topics=["orders"])
    assert [(r.entry.name, r.first_offset, r.end_offset) for r in reads] == [
        ("objects/orders/0/b", 12, 20)
    ]
    timed = mo.select_objects(queues, mo.ReadWindow(from_timestamp_ms=195, to_timestamp_ms=200))
    assert timed == []
    timed = mo.select_objects(queues, mo.ReadWindow(from_timestamp_ms=190), topics=["orders"])
    assert [r.entry.name for r in timed] == ["objects/orders/0/a", "objects/orders/0/b"]


def test_the_export_call_crosses_every_angelia_codec() -> None:
    from angelia_rpc.codec import CODEC_NAMES, codec_named
    from protocol import storage_api as st

    entry = mo.ObjectEntry("objects/t/1/x.r5mo", 0, 10, 5, 9, 100, 7)
    queue = mo.QueueManifest("t", 1, 3, 0, 10, 5, 9, [entry])
    values = [
        st.ExportSnapshotRequest(3, "s3://bucket/snap", ["t"], 1000, 500, {"key": "k"}),
        st.ExportSnapshotResponse(3, 99, [queue]),
    ]
    for name in CODEC_NAMES:
        codec = codec_named(name)
        for value in values:
            assert codec.decoder(type(value))(codec.encoder(type(value))(value)) == value, name
