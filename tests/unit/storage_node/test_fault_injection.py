"""The storage node's test-only fault injection: the file's faults, read as they change."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from storage_node.fault_injection import FaultInjection, InjectedFaults, parse


def test_the_file_names_the_faults() -> None:
    assert parse("") == InjectedFaults()
    assert parse('{"wal_write_error": "ENOSPC", "clock_offset_ms": -5}') == InjectedFaults(
        "ENOSPC", 0, -5
    )
    with pytest.raises(ValueError, match="unknown faults"):
        parse('{"explode": 1}')
    with pytest.raises(ValueError, match="no errno name"):
        parse('{"wal_write_error": "EWHATEVER"}')
    with pytest.raises(ValueError, match="JSON object"):
        parse("[1]")


def test_the_hooks_apply_what_the_file_says_now(tmp_path: Path) -> None:
    path = tmp_path / "faults.json"
    path.write_text('{"wal_write_error": "ENOSPC", "clock_offset_ms": 60000}')
    injection = FaultInjection(str(path))
    with pytest.raises(OSError, match="injected") as caught:
        injection.wal_io("write")
    assert caught.value.errno == errno.ENOSPC
    injection.wal_io("sync")  # no sync delay asked: returns at once
    assert abs(injection.wall_ms() - (time.time() * 1000 + 60_000)) < 5_000  # 60 s ahead
    path.write_text("{}")
    os.utime(path, ns=(1, 1))  # a different mtime even within the clock's resolution
    injection.reload()
    injection.wal_io("write")  # healed
    assert injection.current == InjectedFaults()


def test_a_bad_file_keeps_the_faults_as_they_were(tmp_path: Path) -> None:
    path = tmp_path / "faults.json"
    path.write_text('{"wal_sync_delay_ms": 5}')
    injection = FaultInjection(str(path))
    path.write_text("not json")
    os.utime(path, ns=(2, 2))
    injection.reload()
    assert injection.current.wal_sync_delay_ms == 5
