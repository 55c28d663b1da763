"""What the storage store makes of a storage node's answer to an append."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from broker.domain import Message, QueueRef, SendResult
from broker.errors import BrokerError
from broker.services.storage import StorageStore
from protocol import errors
from protocol.storage_api import AppendOutcome, AppendResponse
from protocol.vocabulary import Placement

QUEUE = QueueRef("t", 3)


class _Metadata:
    def on_route_change(self, callback: Callable[[int | None], None]) -> None:
        del callback


def _store(response: AppendResponse) -> StorageStore:
    store = StorageStore(_Metadata(), None)  # type: ignore[arg-type]

    async def answer(queue: QueueRef, what: str, method: Any, **_: Any) -> AppendResponse:
        return response

    store._call = answer  # type: ignore[method-assign,assignment]
    return store


def _messages(count: int) -> list[Message]:
    return [Message("t", b"x", f"m{i}") for i in range(count)]


async def test_the_queued_form_gives_consecutive_offsets() -> None:
    store = _store(AppendResponse([], 77, ["m0", "m1", "m2"], 10))
    assert await store.append(QUEUE, _messages(3)) == [
        SendResult(QUEUE, offset, 77, Placement.QUEUED) for offset in (10, 11, 12)
    ]


async def test_the_listed_form_keeps_each_placement() -> None:
    listed = [AppendOutcome("m0", 0, 4, True), AppendOutcome("m1", 1, -1, False)]
    store = _store(AppendResponse(listed, 77))
    assert await store.append(QUEUE, _messages(2)) == [
        SendResult(QUEUE, 4, 77, Placement.QUEUED),
        SendResult(QUEUE, -1, 77, Placement.DELAYED),
    ]


@pytest.mark.parametrize(
    "response",
    [AppendResponse([], 77, ["m0"], 10), AppendResponse([AppendOutcome("m0", 0, 1, False)], 77)],
)
async def test_an_answer_for_other_messages_is_an_internal_error(
    response: AppendResponse,
) -> None:
    with pytest.raises(BrokerError, match="1 outcomes for 2 messages") as raised:
        await _store(response).append(QUEUE, _messages(2))
    assert raised.value.code is errors.INTERNAL
