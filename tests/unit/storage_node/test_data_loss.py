"""A damaged WAL is set aside, with a durable marker, and the node opens an empty one."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from raft.errors import StorageFailed
from raft.types import Entry
from raft.wal.logstore import LogStore
from storage_node import data_loss

SEGMENT_BYTES = 8192


def _damaged_wal(data_dir: Path) -> Path:
    """A WAL at ``data_dir/wal`` whose first (sealed) segment has a flipped byte."""
    store = LogStore.open(data_dir / "wal", segment_bytes=SEGMENT_BYTES)
    store.append(1, [Entry(term=1, index=i, data=b"x" * 100) for i in range(1, 200)])
    store.commit()
    store.close()
    segments = sorted(
        p for p in (data_dir / "wal" / "wal").iterdir() if not p.name.startswith("spare-")
    )
    blob = bytearray(segments[0].read_bytes())
    blob[200] ^= 0xFF
    segments[0].write_bytes(bytes(blob))
    return segments[0]


def test_a_damaged_wal_is_quarantined_named_and_replaced_by_an_empty_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    damaged = _damaged_wal(tmp_path)
    with caplog.at_level(logging.ERROR):
        store, loss = data_loss.open_wal(tmp_path, SEGMENT_BYTES)
    try:
        assert store.group(1).last_index() == 0  # empty
    finally:
        store.close()
    assert loss is not None
    assert f"WAL segment {damaged.name} is corrupt at offset" in loss.cause
    quarantined = tmp_path / "quarantine" / "wal-1"
    assert loss.quarantined == str(quarantined)
    assert (quarantined / "wal" / damaged.name).exists()  # kept, never deleted
    assert data_loss.read_marker(tmp_path) == loss
    (record,) = [r for r in caplog.records if r.name == data_loss.__name__]
    assert damaged.name in record.getMessage()
    assert str(quarantined) in record.getMessage()


def test_the_marker_outlives_a_restart_and_records_readmitted_groups(tmp_path: Path) -> None:
    _damaged_wal(tmp_path)
    store, loss = data_loss.open_wal(tmp_path, SEGMENT_BYTES)
    store.close()
    assert loss is not None
    loss.readmitted.update({3, 1})
    data_loss.write_marker(tmp_path, loss)
    # A restart (a crash mid-recovery): the WAL opens, the node is still data-lost.
    store, again = data_loss.open_wal(tmp_path, SEGMENT_BYTES)
    store.close()
    assert again == loss
    assert again is not None
    assert again.readmitted == {1, 3}
    data_loss.clear_marker(tmp_path)
    store, healthy = data_loss.open_wal(tmp_path, SEGMENT_BYTES)
    store.close()
    assert healthy is None


def test_a_second_damage_goes_to_a_second_folder(tmp_path: Path) -> None:
    _damaged_wal(tmp_path)
    data_loss.open_wal(tmp_path, SEGMENT_BYTES)[0].close()
    _damaged_wal(tmp_path)
    store, loss = data_loss.open_wal(tmp_path, SEGMENT_BYTES)
    store.close()
    assert loss is not None
    assert loss.quarantined.endswith("wal-2")
    assert loss.readmitted == set()


def test_an_unreadable_marker_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / data_loss.MARKER_NAME).write_text("{not json")
    with pytest.raises(StorageFailed, match=data_loss.MARKER_NAME):
        data_loss.open_wal(tmp_path, SEGMENT_BYTES)
