"""Callers waiting on one shared call (coalesced appends, pops and acks)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


def fail_waiting(waiting: Iterable[asyncio.Future[Any]], error: BaseException) -> None:
    """Hand ``error`` to every caller still waiting (one that gave up is skipped)."""
    for done in waiting:
        if not done.done():
            done.set_exception(error)
