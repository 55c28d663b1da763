"""SQL92 receives through the storage service (one-node raft driver, real WAL)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from protocol import errors
from protocol.filters import FilterKind
from protocol.sql92 import FilterExpressionError
from protocol.storage_api import AppendRequest, Message, ReadRequest, ReceiveRequest
from storage_node.errors import BadCommand
from storage_node.partition.property_filter import EVALUATED_MAX
from tests.unit.storage_node.test_service import CONTEXT, one_node

SQL = int(FilterKind.SQL)


def _sql_receive(expression: str, **fields: object) -> ReceiveRequest:
    return ReceiveRequest(
        "g",
        "t",
        0,
        8,
        30_000,
        filter_expression=expression,
        filter_kind=SQL,
        **fields,  # type: ignore[arg-type]
    )


async def test_only_matching_messages_leave_storage(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        messages = [
            Message("t", 0, f"m{i}", b"x", tag="a" if i % 2 else "", properties={"n": str(i)})
            for i in range(6)
        ]
        await node.append(AppendRequest("t", 0, messages), CONTEXT)
        received = await node.receive(_sql_receive("n >= 2 AND TAGS IS NOT NULL"), CONTEXT)
        assert [m.message.message.message_id for m in received.messages] == ["m3", "m5"]
        assert [m.message.queue_offset for m in received.messages] == [3, 5]
        # The others are consumed for the group: nothing more comes.
        again = await node.receive(_sql_receive("n >= 2 AND TAGS IS NOT NULL"), CONTEXT)
        assert again.messages == []


async def test_a_long_run_of_unmatched_messages_is_passed_in_one_long_poll(
    tmp_path: Path,
) -> None:
    async with one_node(tmp_path) as node:
        filler = [Message("t", 0, f"f{i}", b"x") for i in range(EVALUATED_MAX + 500)]
        await node.append(AppendRequest("t", 0, filler), CONTEXT)
        await node.append(
            AppendRequest("t", 0, [Message("t", 0, "hit", b"x", properties={"n": "1"})]), CONTEXT
        )
        # More than one evaluation's worth of misses: the receive goes on at once
        # rather than waiting for the queue to grow (which it never does here).
        received = await node.receive(_sql_receive("n = 1", poll_ms=10_000), CONTEXT)
        assert [m.message.message.message_id for m in received.messages] == ["hit"]


async def test_a_bad_expression_or_kind_is_refused(tmp_path: Path) -> None:
    async with one_node(tmp_path) as node:
        with pytest.raises(FilterExpressionError) as bad:
            await node.receive(_sql_receive("n = "), CONTEXT)
        assert bad.value.code is errors.ILLEGAL_FILTER_EXPRESSION
        assert "line 1, column" in str(bad.value)
        with pytest.raises(BadCommand, match="unknown filter kind 7"):
            await node.receive(ReceiveRequest("g", "t", 0, 8, 30_000, filter_kind=7), CONTEXT)


async def test_an_offset_read_with_sql92_returns_only_matches_and_moves_past_the_rest(
    tmp_path: Path,
) -> None:
    async with one_node(tmp_path) as node:
        messages = [Message("t", 0, f"m{i}", b"x", properties={"n": str(i % 3)}) for i in range(9)]
        await node.append(AppendRequest("t", 0, messages), CONTEXT)
        read = ReadRequest("t", 0, 1, count_max=2, filter_expression="n = 0", filter_kind=SQL)
        first = await node.read(read, CONTEXT)
        assert [m.queue_offset for m in first.messages] == [3, 6]
        assert first.next_offset == 7  # after the second match
        rest = await node.read(dataclasses.replace(read, queue_offset=7), CONTEXT)
        assert (rest.messages, rest.next_offset) == ([], 9)  # looked at 7 and 8
        with pytest.raises(FilterExpressionError):
            await node.read(dataclasses.replace(read, filter_expression="n ="), CONTEXT)
