"""``rip5 bench storage``'s receive+ack phase fails on a stall instead of asking forever."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from protocol.records import MessageRecord, pack_records
from protocol.storage_api import (
    AckOutcome,
    AckRequest,
    AckResponse,
    PackedDelivery,
    ReceiveRequest,
    ReceiveResponse,
)
from rip5.bench import storage


class _LosingStorage:
    """Storage that holds only the first of a queue's two appended messages (the
    other was lost, as a dropped topic loses its queues) and refuses every ack."""

    def __init__(self) -> None:
        self.delivered = False
        self.receives = 0

    async def receive(self, request: ReceiveRequest) -> ReceiveResponse:
        self.receives += 1
        if self.delivered:
            return ReceiveResponse([])
        self.delivered = True
        record = MessageRecord(request.topic, request.queue_id, "m0", b"x")
        delivery = PackedDelivery(request.topic, request.queue_id, 0, 7, 1, 60_000, 1)
        return ReceiveResponse([], records=pack_records([record]), deliveries=[delivery])

    async def ack(self, request: AckRequest) -> AckResponse:
        return AckResponse(
            [AckOutcome(h.queue_offset, 4, "INVALID_RECEIPT_HANDLE") for h in request.handles]
        )


class _Cluster:
    def __init__(self, stub: _LosingStorage) -> None:
        self.stub = stub

    def group_of(self, topic: str, queue_id: int) -> int:
        return 1

    async def call(self, invoke: Callable[[Any], Awaitable[Any]], group: int) -> Any:
        return await invoke(self.stub)


async def test_a_receive_ack_phase_with_messages_that_never_come_fails_naming_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(storage, "STALL_S", -1.0)  # the first empty answer is past the deadline
    stub = _LosingStorage()
    args = argparse.Namespace(queues=1, batch=64, in_flight=4)
    owed = r"stalled.*\{0: 1\}.*owe 1 of the 2 appended; 1 acked messages were refused"
    with pytest.raises(RuntimeError, match=owed):
        await storage._consume_phase(_Cluster(stub), args, {0: 2})  # type: ignore[arg-type]
    assert stub.receives == 2
