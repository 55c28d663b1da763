"""Callers waiting on one shared call (coalesced appends, pops and acks)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def fail_waiting(waiting: Iterable[asyncio.Future[Any]], error: BaseException) -> None:
    """Hand ``error`` to every caller still waiting (one that gave up is skipped)."""
    for done in waiting:
        if not done.done():
            done.set_exception(error)


def deal_out(waiting: Iterable[tuple[int, asyncio.Future[list[T]]]], results: Sequence[T]) -> None:
    """Hand each caller its slice of ``results``: ``waiting`` is (how many it asked
    for, its future) in the order its items went into the shared call. A caller
    that gave up is skipped; its slice is not handed to anyone else."""
    start = 0
    for count, done in waiting:
        end = start + count
        if not done.done():
            done.set_result(list(results[start:end]))
        start = end
