"""The disk probe of a storage node whose WAL failed (storage_node/disk_failure.py)."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

from storage_node.disk_failure import PROBE_NAME, disk_takes_writes, until_disk_takes_writes


def _full(operation: str) -> None:
    if operation == "write":
        raise OSError(errno.ENOSPC, "No space left on device (injected)")


def test_a_disk_that_takes_writes_leaves_no_probe_behind(tmp_path: Path) -> None:
    assert disk_takes_writes(tmp_path, None) is None
    assert not (tmp_path / PROBE_NAME).exists()


def test_a_full_disk_is_named(tmp_path: Path) -> None:
    error = disk_takes_writes(tmp_path, _full)
    assert error is not None
    assert error.errno == errno.ENOSPC
    assert not (tmp_path / PROBE_NAME).exists()


def test_a_missing_directory_is_a_failed_disk(tmp_path: Path) -> None:
    error = disk_takes_writes(tmp_path / "gone", None)
    assert error is not None
    assert error.errno == errno.ENOENT


async def test_waits_until_space_returns(tmp_path: Path) -> None:
    full = [True]

    def hook(operation: str) -> None:
        if full[0]:
            _full(operation)

    stopping = asyncio.Event()
    waiting = asyncio.create_task(until_disk_takes_writes(tmp_path, hook, stopping))
    await asyncio.sleep(0)
    assert not waiting.done()
    full[0] = False  # space returns
    assert await asyncio.wait_for(waiting, 10) is True


async def test_stopping_ends_the_wait(tmp_path: Path) -> None:
    stopping = asyncio.Event()
    waiting = asyncio.create_task(until_disk_takes_writes(tmp_path, _full, stopping))
    stopping.set()
    assert await asyncio.wait_for(waiting, 10) is False
