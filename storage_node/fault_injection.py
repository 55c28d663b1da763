"""Test-only fault injection in the storage node's shell: a failing or slow disk, a jumped clock.

Off unless the environment names a file in ``RIP5_FAULT_INJECTION`` (the
chaos suite, ``rip5 chaos``, sets it; no production setting reads it). The
file holds one JSON object; the node re-reads it whenever it changes
(checked every ``POLL_MS``), so the fault can be switched on and off while
the node runs:

- ``"wal_write_error": "ENOSPC"`` (any errno name): every WAL write raises
  that OSError, as a full disk would, from inside the WAL writer
  (:class:`raft.wal.logstore.LogStore`'s ``io_hook``), not by filling the disk;
- ``"wal_sync_delay_ms": 200``: every WAL fdatasync takes that much longer
  (in the sync thread, as a slow disk would);
- ``"clock_offset_ms": 60000``: the node's wall clock (the one its clock,
  :meth:`storage_node.service.StorageNode.now_ms`, steers toward) steps that
  far ahead (negative: behind), as a mis-set clock or an NTP step would; the
  monotonic clock is not moved.

A file that cannot be read or parsed leaves the faults as they were and is
logged once per change.

SHELL: reads a file, the clock; sleeps.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import time
from dataclasses import dataclass

FAULT_FILE_ENV = "RIP5_FAULT_INJECTION"
POLL_MS = 100

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InjectedFaults:
    """The faults switched on now (the defaults: none)."""

    wal_write_error: str = ""
    wal_sync_delay_ms: int = 0
    clock_offset_ms: int = 0


def parse(text: str) -> InjectedFaults:
    """The faults a file's text asks for; ValueError naming what is wrong."""
    raw = json.loads(text or "{}")
    if not isinstance(raw, dict):
        raise ValueError("the fault file must hold a JSON object")
    unknown = set(raw) - set(InjectedFaults.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown faults {sorted(unknown)}")
    error = str(raw.get("wal_write_error", ""))
    if error and not isinstance(getattr(errno, error, None), int):
        raise ValueError(f"wal_write_error {error!r} is no errno name")
    return InjectedFaults(
        error, int(raw.get("wal_sync_delay_ms", 0)), int(raw.get("clock_offset_ms", 0))
    )


class FaultInjection:
    """The faults read from one file, and the hooks that apply them."""

    def __init__(self, path: str) -> None:
        """Read ``path`` now and then whenever :meth:`run` sees it change."""
        self.path = path
        self.current = InjectedFaults()
        self._seen: tuple[int, int] | None = None
        self.reload()

    def reload(self) -> None:
        """Read the file again if it changed since the last read."""
        try:
            stat = os.stat(self.path)
        except OSError:
            stat = None
        seen = (stat.st_mtime_ns, stat.st_size) if stat is not None else None
        if seen == self._seen:
            return
        self._seen = seen
        try:
            with open(self.path) as handle:
                faults = parse(handle.read())
        except (OSError, ValueError) as exc:
            _log.error("fault injection: cannot use %s: %s", self.path, exc)
            return
        if faults != self.current:
            _log.warning("fault injection: now %s", faults)
        self.current = faults

    async def run(self) -> None:
        """Re-read the file every ``POLL_MS`` until cancelled."""
        while True:
            await asyncio.sleep(POLL_MS / 1000)
            self.reload()

    def wal_io(self, operation: str) -> None:
        """The WAL's ``io_hook``: fail a write, or slow a sync, as the file says."""
        faults = self.current
        if operation == "write" and faults.wal_write_error:
            code = getattr(errno, faults.wal_write_error)
            raise OSError(code, f"{os.strerror(code)} (injected by {FAULT_FILE_ENV})")
        if operation == "sync" and faults.wal_sync_delay_ms:
            time.sleep(faults.wal_sync_delay_ms / 1000)  # in the sync thread, as a slow disk

    def wall_ms(self) -> int:
        """The node's wall clock with the injected offset."""
        return int(time.time() * 1000) + self.current.clock_offset_ms


def from_environment() -> FaultInjection | None:
    """The fault injection the environment asks for, or None (always, outside tests)."""
    path = os.environ.get(FAULT_FILE_ENV, "")
    return FaultInjection(path) if path else None
