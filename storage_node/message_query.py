"""Message query by id or key in a time range, over a group's local log and its tier
(SHELL: it awaits the tier reader and yields to the loop between key index chunks).

The key index (``storage_node/key_index.py``) walks the chunks; this runs its steps:
a ``TierScan`` step is answered from the tier reader's cache, a ``None`` step lets the
loop run raft rounds and calls in between. A tier that cannot be read fails the query
with UNAVAILABLE (retriable), like any read of old offsets.
"""

from __future__ import annotations

import asyncio

from protocol.storage_api import QueryMessagesResponse, StoredMessage, from_record
from storage_node.key_index import (
    Hit,
    KeyIndex,
    Query,
    RecordReader,
    SearchResult,
    TieredRecord,
    TierScan,
)
from storage_node.partition.queries import PartitionQueries
from storage_node.partition.queues import QueueId
from storage_node.tier_reads import TierReader


async def query_messages(
    key_index: KeyIndex,
    group_id: int,
    state: PartitionQueries,
    read: RecordReader,
    tier_reader: TierReader | None,
    query: Query,
) -> QueryMessagesResponse:
    """The messages of group ``group_id`` that ``query`` finds, in the key index's order
    (tier hits first, then the local log's); ``read`` reads local entries' records,
    ``tier_reader`` (None: no tier) the tier's."""
    result = await _search(key_index, group_id, state, read, tier_reader, query)
    # The hits of a queue are read together: hits in one log entry decode it once.
    # A local hit trimmed away since its step is left out; tier hits come with
    # their records. The answer keeps the hits' order.
    found: dict[Hit, StoredMessage] = {
        hit: StoredMessage(hit.queue_offset, tiered.store_timestamp_ms, from_record(tiered.record))
        for hit, tiered in result.tiered.items()
    }
    by_queue: dict[QueueId, list[int]] = {}
    for queue, offset in result.hits:
        if (queue, offset) not in found and offset >= state.first_offset(*queue):
            by_queue.setdefault(queue, []).append(offset)
    for queue, offsets in by_queue.items():
        entries = [state.entry(*queue, offset) for offset in offsets]
        records = read(queue, entries)
        for offset, entry, record in zip(offsets, entries, records, strict=True):
            stored = StoredMessage(offset, entry.store_timestamp_ms, from_record(record))
            found[Hit(queue, offset)] = stored
    messages = [found[hit] for hit in result.hits if hit in found]
    return QueryMessagesResponse(messages, result.scanned, result.complete)


async def _search(
    key_index: KeyIndex,
    group_id: int,
    state: PartitionQueries,
    read: RecordReader,
    tier_reader: TierReader | None,
    query: Query,
) -> SearchResult:
    steps = key_index.steps(group_id, state, read, query, tiered=tier_reader is not None)
    answer: list[TieredRecord] | None = None
    while True:
        try:
            scan = steps.send(answer)
        except StopIteration as done:
            result: SearchResult = done.value
            return result
        answer = None
        if scan is None:
            await asyncio.sleep(0)
        else:
            assert tier_reader is not None  # the index asks for tier scans only when tiered
            answer = await _tier_records(tier_reader, group_id, state, scan)


async def _tier_records(
    tier_reader: TierReader, group_id: int, state: PartitionQueries, scan: TierScan
) -> list[TieredRecord]:
    objects = state.tier.objects(scan.queue)
    looked = await tier_reader.read(group_id, objects, scan.low, scan.high - scan.low)
    return [TieredRecord(m.queue_offset, m.store_timestamp_ms, m.record) for m in looked]
