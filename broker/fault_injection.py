"""Test-only fault injection in the broker's shell: a planted bug the chaos suite must catch.

Off unless ``RIP5_FAULT_ACK_BEFORE_STORE`` is set in the broker's
environment (the chaos suite's checker tests set it; no production setting
reads it). When set to a delay in ms, the broker ACKS SENDS BEFORE STORING
THEM: :class:`AckBeforeStore` answers every append at once with made-up
results and appends the messages that many ms later, in the background.
A message acked this way is lost whenever the broker dies (or the append
fails) within the delay: exactly the bug a broker must never have, planted
so that a test can show the checker reports it as lost.

SHELL: tasks, the clock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from broker.domain import Message, QueueRef, SendResult
from broker.services.base import MessageStore

ACK_BEFORE_STORE_ENV = "RIP5_FAULT_ACK_BEFORE_STORE"

_log = logging.getLogger(__name__)


class AckBeforeStore:
    """A :class:`MessageStore` that acks appends first and stores them ``delay_ms`` later."""

    def __init__(self, inner: MessageStore, delay_ms: int) -> None:
        """Wrap ``inner``; every other call goes to it unchanged."""
        self._inner = inner
        self._delay_ms = delay_ms
        self._pending: set[asyncio.Task[None]] = set()
        self._fake_offset = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, queue: QueueRef, messages: Sequence[Message]) -> list[SendResult]:
        """The planted bug: results now, the append later (lost if the broker dies first)."""
        task = asyncio.create_task(self._store_later(queue, list(messages)))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        now_ms = int(time.time() * 1000)
        first = self._fake_offset
        self._fake_offset += len(messages)
        return [SendResult(queue, first + i, now_ms) for i in range(len(messages))]

    async def _store_later(self, queue: QueueRef, messages: list[Message]) -> None:
        await asyncio.sleep(self._delay_ms / 1000)
        try:
            await self._inner.append(queue, messages)
        except Exception as exc:  # noqa: BLE001 - the bug: an acked append that failed is dropped
            _log.warning("ack-before-store: %d acked messages lost: %s", len(messages), exc)


def wrap_store(store: MessageStore) -> MessageStore:
    """``store``, or the planted bug around it when the environment asks for it."""
    text = os.environ.get(ACK_BEFORE_STORE_ENV, "")
    if not text:
        return store
    delay_ms = int(text)
    _log.error(
        "FAULT INJECTION: %s=%d: this broker acks sends before storing them (test only)",
        ACK_BEFORE_STORE_ENV,
        delay_ms,
    )
    return AckBeforeStore(store, delay_ms)
