"""The storage API for transaction check-back: scan due half messages, note checks.

Over the one-node service of ``test_service.py`` (real WAL in tmp_path).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol import errors, routing
from protocol.storage_api import (
    AppendRequest,
    EndTransactionRequest,
    Message,
    NoteTransactionChecksRequest,
    QueueInfoRequest,
    ScanTransactionsRequest,
)
from storage_node.errors import StorageError
from storage_node.service import FIRST_GROUP_ID
from tests.unit.storage_node.test_service import CONTEXT, GROUPS, one_node

FAR_FUTURE_MS = 1 << 50


async def test_due_half_messages_are_scanned_with_their_messages_and_counted(
    tmp_path: Path,
) -> None:
    async with one_node(tmp_path) as node:
        group_id = routing.group_id("t", 0, FIRST_GROUP_ID, GROUPS)
        halves = [
            Message("t", 0, f"tx{i}", b"half %d" % i, tag="tg", properties={"k": "v"},
                    message_type=4)
            for i in range(3)
        ]  # fmt: skip
        appended = await node.append(AppendRequest("t", 0, halves), CONTEXT)
        stored_ms = appended.store_timestamp_ms
        # Stored at stored_ms: not due for a scan that wants older ones.
        none = await node.scan_transactions(
            ScanTransactionsRequest(group_id, stored_ms, FAR_FUTURE_MS), CONTEXT
        )
        assert none.halves == []
        scan = ScanTransactionsRequest(group_id, stored_ms + 1, stored_ms + 1, limit=2)
        found = await node.scan_transactions(scan, CONTEXT)
        assert [h.message.message_id for h in found.halves] == ["tx0", "tx1"]
        first = found.halves[0]
        assert (first.message.body, first.message.tag, first.message.properties) == (
            b"half 0",
            "tg",
            {"k": "v"},
        )
        assert (first.store_timestamp_ms, first.check_count) == (stored_ms, 0)

        await node.end_transaction(EndTransactionRequest("t", 0, "tx2", True), CONTEXT)
        noted = await node.note_transaction_checks(
            NoteTransactionChecksRequest(group_id, ["tx0", "tx1", "tx2"], check_max=1), CONTEXT
        )
        assert (noted.noted, noted.rolled_back, noted.unknown) == (["tx0", "tx1"], [], ["tx2"])
        # Checked just now: not due again for a scan wanting checks before the store time.
        again = await node.scan_transactions(
            ScanTransactionsRequest(group_id, FAR_FUTURE_MS, stored_ms), CONTEXT
        )
        assert again.halves == []
        counted = await node.scan_transactions(
            ScanTransactionsRequest(group_id, FAR_FUTURE_MS, FAR_FUTURE_MS), CONTEXT
        )
        assert [(h.message.message_id, h.check_count) for h in counted.halves] == [
            ("tx0", 1),
            ("tx1", 1),
        ]
        # A second check exceeds check_max 1: rolled back, never queued.
        out = await node.note_transaction_checks(
            NoteTransactionChecksRequest(group_id, ["tx0"], check_max=1), CONTEXT
        )
        assert out.rolled_back == ["tx0"]
        with pytest.raises(StorageError) as gone:
            await node.end_transaction(EndTransactionRequest("t", 0, "tx0", True), CONTEXT)
        assert gone.value.code is errors.NOT_FOUND
        assert (await node.queue_info(QueueInfoRequest("t", 0), CONTEXT)).end_offset == 1


async def test_scanning_a_group_not_hosted_is_refused(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        with pytest.raises(StorageError) as caught:
            await node.scan_transactions(ScanTransactionsRequest(999, 0, 0), CONTEXT)
        assert caught.value.code is errors.GROUP_NOT_HOSTED
        with pytest.raises(StorageError) as caught:
            await node.scan_transactions(
                ScanTransactionsRequest(FIRST_GROUP_ID, 0, 0, limit=0), CONTEXT
            )
        assert caught.value.code is errors.BAD_REQUEST
