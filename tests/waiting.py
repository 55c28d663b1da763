"""Waiting for a condition with a deadline: tests never sleep to synchronise."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], object], timeout_s: float = 20.0, what: str = "condition"
) -> object:
    """Poll ``condition`` until it returns a truthy value; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


async def async_wait_until(
    condition: Callable[[], object], timeout_s: float = 20.0, what: str = "condition"
) -> object:
    """The asyncio form of :func:`wait_until`."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` names a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")
