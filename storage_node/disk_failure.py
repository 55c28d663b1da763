"""A storage node whose disk fails: noticing it, and noticing when the disk takes writes again.

The contract (carried out by :func:`storage_node.server.serve`):

1. A WAL write or fdatasync fails (ENOSPC, EIO): the raft driver stops its
   rounds for good (:meth:`raft.host.driver.Driver.wait_failed`), so this
   node no longer leads, votes or appends; its groups elect leaders on their
   other replicas. Nothing acked is lost: an entry is acked only once a
   majority made it durable.
2. The node says so (an error log naming the cause), stops heartbeating, so
   the nameserver reports it down, and keeps answering: every request a
   group's leader serves is refused with ``NOT_LEADER`` (no leader hint)
   naming the cause, so callers go to another replica at once, as after a
   crash; a proposal that still reaches the driver fails ``STORAGE_FAILED``.
3. Every ``DISK_PROBE_MS`` it checks whether its WAL directory takes writes
   again (:func:`disk_takes_writes`: a probe file written, fdatasynced and
   removed, through the WAL's fault-injection hook when there is one). Once
   it does, the node reopens its WAL (recovering up to the last durable
   record), restarts its groups and registers again, in the same process
   and on the same address.

SHELL: writes files, sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from raft.host.driver import Driver

DISK_PROBE_MS = 500
"""How often a node whose disk failed checks whether it takes writes again."""
PROBE_BYTES = 64 * 1024
"""The size of the probe file: more than one WAL write usually needs."""
PROBE_NAME = ".disk-probe"


def disk_takes_writes(directory: Path, io_hook: Callable[[str], None] | None) -> OSError | None:
    """Write, fdatasync and remove a probe file in ``directory``; None if that worked,
    else the error (``io_hook`` is the WAL's fault-injection hook, called as before a write)."""
    path = directory / PROBE_NAME
    try:
        if io_hook is not None:
            io_hook("write")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fdatasync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        return exc
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
    return None


async def failure_or_stop(driver: Driver, stopping: asyncio.Event) -> BaseException | None:
    """Wait until the WAL fails (its error) or ``stopping`` is set (None)."""
    wal = asyncio.create_task(driver.wait_failed(), name="wal-watch")
    stop = asyncio.create_task(stopping.wait(), name="stop-watch")
    try:
        done, _ = await asyncio.wait({wal, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        wal.cancel()
        stop.cancel()
    if wal in done and not wal.cancelled():
        return wal.result()
    return None


async def until_disk_takes_writes(
    directory: Path, io_hook: Callable[[str], None] | None, stopping: asyncio.Event
) -> bool:
    """Probe every ``DISK_PROBE_MS`` (in a worker thread); True once the disk takes
    writes, False if ``stopping`` is set first."""
    loop = asyncio.get_running_loop()
    while not stopping.is_set():
        error = await loop.run_in_executor(None, disk_takes_writes, directory, io_hook)
        if error is None:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), DISK_PROBE_MS / 1000)
    return False
