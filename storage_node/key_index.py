"""The key index of a storage node: finding messages by id or key within a time range.

RocketMQ keeps an index file beside its commit log (hash slots of
``topic#key`` and of the unique message id, each pointing at a commit log
offset and a store time). Here a queue's messages already sit in the
partition's queue index (offset -> log entry, store time), so the key index
only has to map ids and keys to queue offsets:

- A queue's offsets are cut into **chunks** of ``CHUNK_OFFSETS``. A chunk
  whose last offset is below the queue's end is **sealed**: offsets are
  never reassigned, so what it holds never changes. A sealed chunk is
  indexed once, when a query first needs it, by reading its records from
  the log (``message id -> offsets``, ``key -> offsets``), and the index is
  cached.
- The open chunk (the queue's last, still filling) is never cached: a query
  reads its records in range and matches them directly.
- The cache is bounded: at most ``chunks_max`` chunk indexes (least
  recently used leave first), so the memory it takes is bounded whatever
  the node stores. Appends pay nothing: indexing happens on queries only.
- A time range ``[begin_ms, end_ms]`` becomes an offset range per queue by
  the queue index's store times (nondecreasing per queue: the partition's
  clock never goes back), so only the chunks overlapping it are looked at.
- A query reads at most ``scan_max`` records (indexing chunks plus the open
  ends); past that it stops and says it is incomplete.

A dead-letter copy is found by its original id and keys in its dead-letter
queue too (the reader sees the original record there).

Offsets only the tier holds (below the local first offset, in the group's
recorded tier objects, ``partition.tier``) are searched too when the caller
asks for it (``tiered``): their records are not in the log, so the search
yields a :class:`TierScan` naming the offsets it needs, a chunk at a time,
and the caller (a shell: the tier is I/O) sends back the records read
(:class:`TieredRecord`). The objects' store time ranges select the ones a
time range may hit; a record is a hit only if its own store time is in the
range. These chunks are matched directly, not cached here (the tier reader
keeps the blocks it read in its own cache).

PURE.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from protocol.records import MessageRecord
from protocol.storage_api import TIME_MAX_MS
from storage_node.partition.queries import PartitionQueries
from storage_node.partition.queues import QueueEntry, QueueId

CHUNK_OFFSETS = 1024
"""Queue offsets per chunk: the unit indexed and cached."""

CHUNKS_MAX = 512
"""Chunk indexes a node keeps (about 0.5 M messages' ids and keys)."""

SCAN_MAX = 131_072
"""Records one query reads from the log at most."""


class TierScan(NamedTuple):
    """A search's request for the records of ``[low, high)`` of ``queue`` from the tier:
    the caller sends back what the tier holds of them, oldest first
    (``Sequence[TieredRecord]``; fewer if objects expired meanwhile)."""

    queue: QueueId
    low: int
    high: int


class TieredRecord(NamedTuple):
    """A record read from the tier, at its queue offset, with its store time."""

    queue_offset: int
    store_timestamp_ms: int
    record: MessageRecord


SearchSteps = Generator[TierScan | None, Sequence[TieredRecord] | None, "SearchResult"]
"""A search run a step at a time (:meth:`KeyIndex.steps`): it yields None after each
chunk, or a :class:`TierScan` to be answered by ``send`` with the records asked for."""

TierRecordReader = Callable[[TierScan], Sequence[TieredRecord]]
"""Answers a :class:`TierScan` (a synchronous reader: tests, tools)."""

RecordReader = Callable[[QueueId, Sequence[QueueEntry]], Sequence[MessageRecord]]
"""Reads the records of consecutive entries of a queue (as a reader of it sees them)."""


@dataclass(frozen=True, slots=True)
class Query:
    """What to look for: exactly one of ``message_id`` and ``key``, in ``topic`` ("" any),
    stored in ``[begin_ms, end_ms]``; at most ``limit`` hits."""

    topic: str
    message_id: str
    key: str
    begin_ms: int
    end_ms: int
    limit: int

    def __post_init__(self) -> None:
        if bool(self.message_id) == bool(self.key):
            raise ValueError("a query names exactly one of a message id and a key")
        if self.limit < 1:
            raise ValueError("limit must be at least 1")
        if self.end_ms < self.begin_ms:
            raise ValueError(f"the time range ends ({self.end_ms}) before it begins")

    def matches(self, record: MessageRecord) -> bool:
        """Whether ``record`` is a hit."""
        if self.message_id:
            return record.message_id == self.message_id
        return self.key in record.keys


class Hit(NamedTuple):
    """A message found: its queue and offset."""

    queue: QueueId
    queue_offset: int


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The hits (per queue oldest first, queues in order), the records read (from the
    log and the tier), and whether the whole range was searched (False: the scan budget
    ran out). ``tiered``: the hits read from the tier, with their records (the caller
    has no other copy of them)."""

    hits: list[Hit]
    scanned: int
    complete: bool
    tiered: dict[Hit, TieredRecord] = field(default_factory=dict)


class ChunkIndex(NamedTuple):
    """The ids and keys of one sealed chunk, each to the offsets that carry it."""

    ids: dict[str, list[int]]
    keys: dict[str, list[int]]

    def offsets(self, query: Query) -> list[int]:
        """The chunk's offsets that match ``query``, ascending."""
        if query.message_id:
            return self.ids.get(query.message_id, [])
        return self.keys.get(query.key, [])


ChunkKey = tuple[int, str, int, int]
"""(raft group id, topic, queue id, chunk number)."""


class KeyIndex:
    """The node's cache of chunk indexes (see the module docstring)."""

    def __init__(self, chunks_max: int = CHUNKS_MAX, scan_max: int = SCAN_MAX) -> None:
        """An empty index keeping at most ``chunks_max`` chunks; queries read at most
        ``scan_max`` records each."""
        if chunks_max < 1 or scan_max < 1:
            raise ValueError("chunks_max and scan_max must be at least 1")
        self.chunks_max = chunks_max
        self.scan_max = scan_max
        self._chunks: collections.OrderedDict[ChunkKey, ChunkIndex] = collections.OrderedDict()

    def __len__(self) -> int:
        """How many chunk indexes are cached."""
        return len(self._chunks)

    def forget_group(self, group_id: int) -> None:
        """Drop the chunks of a raft group (its replica left this node)."""
        for key in [key for key in self._chunks if key[0] == group_id]:
            del self._chunks[key]

    def search(
        self,
        group_id: int,
        state: PartitionQueries,
        read: RecordReader,
        query: Query,
        tier_read: TierRecordReader | None = None,
    ) -> SearchResult:
        """The messages of group ``group_id`` (whose applied state is ``state``; records
        read through ``read``, and from the tier through ``tier_read`` if given) that
        match ``query``: :meth:`steps` run to the end."""
        steps = self.steps(group_id, state, read, query, tiered=tier_read is not None)
        return run_to_end(steps, tier_read)

    def steps(
        self,
        group_id: int,
        state: PartitionQueries,
        read: RecordReader,
        query: Query,
        *,
        tiered: bool = False,
    ) -> SearchSteps:
        """:meth:`search` one chunk at a time: yields after each chunk (at most
        ``CHUNK_OFFSETS`` records read), so a caller on an event loop can let other work
        run in between; returns the result. ``state`` may change between steps (appends,
        trims): each step reads it afresh, and offsets trimmed meanwhile are skipped.
        With ``tiered``, a queue's offsets only the tier holds are searched first (the
        steps yield :class:`TierScan` requests for them, see the module docstring)."""
        hits: list[Hit] = []
        tiered_hits: dict[Hit, TieredRecord] = {}
        budget = _Budget(self.scan_max)
        queues = [q for q in state.queue_ids() if not query.topic or q[0] == query.topic]
        for queue in queues:
            if tiered:
                spent = yield from _search_tier(state, queue, query, budget, hits, tiered_hits)
                if spent:
                    return SearchResult(hits, budget.used, False, tiered_hits)
                if len(hits) >= query.limit:
                    break
            end = state.end_offset(*queue)
            low = max(
                state.first_offset(*queue), state.offset_for_timestamp(*queue, query.begin_ms)
            )
            high = end
            if query.end_ms < TIME_MAX_MS:
                high = state.offset_for_timestamp(*queue, query.end_ms + 1)
            chunk = low // CHUNK_OFFSETS
            while chunk * CHUNK_OFFSETS < high and len(hits) < query.limit:
                if budget.spent:
                    return SearchResult(hits, budget.used, False, tiered_hits)
                first = state.first_offset(*queue)
                chunk_low = max(chunk * CHUNK_OFFSETS, first)
                if (chunk + 1) * CHUNK_OFFSETS <= end:  # sealed
                    index = self._chunk(group_id, queue, chunk, chunk_low, state, read, budget)
                    found = [o for o in index.offsets(query) if max(low, first) <= o < high]
                else:  # the open chunk: matched directly, not cached
                    start = max(chunk_low, low)
                    found = [
                        offset
                        for offset, record in _records(state, read, queue, start, high, budget)
                        if query.matches(record)
                    ]
                hits += [Hit(queue, offset) for offset in found[: query.limit - len(hits)]]
                chunk += 1
                yield None
            if len(hits) >= query.limit:
                break
        return SearchResult(hits, budget.used, True, tiered_hits)

    def _chunk(
        self,
        group_id: int,
        queue: QueueId,
        chunk: int,
        low: int,
        state: PartitionQueries,
        read: RecordReader,
        budget: _Budget,
    ) -> ChunkIndex:
        """The index of a sealed chunk (records from ``low`` on), cached or built now."""
        key = (group_id, queue[0], queue[1], chunk)
        index = self._chunks.get(key)
        if index is not None:
            self._chunks.move_to_end(key)
            return index
        index = ChunkIndex({}, {})
        high = (chunk + 1) * CHUNK_OFFSETS
        for offset, record in _records(state, read, queue, low, high, budget):
            index.ids.setdefault(record.message_id, []).append(offset)
            for message_key in dict.fromkeys(record.keys):
                index.keys.setdefault(message_key, []).append(offset)
        self._chunks[key] = index
        while len(self._chunks) > self.chunks_max:
            self._chunks.popitem(last=False)
        return index


def run_to_end(steps: SearchSteps, tier_read: TierRecordReader | None = None) -> SearchResult:
    """The remaining steps of a search (:meth:`KeyIndex.steps`) run, its tier scans
    answered by ``tier_read``; its result. Raises ValueError on a tier scan without
    ``tier_read``."""
    answer: Sequence[TieredRecord] | None = None
    while True:
        try:
            request = steps.send(answer)
        except StopIteration as done:
            result: SearchResult = done.value
            return result
        answer = None
        if request is not None:
            if tier_read is None:
                raise ValueError("a tiered search needs a tier reader")
            answer = tier_read(request)


def _search_tier(
    state: PartitionQueries,
    queue: QueueId,
    query: Query,
    budget: _Budget,
    hits: list[Hit],
    tiered_hits: dict[Hit, TieredRecord],
) -> Generator[TierScan, Sequence[TieredRecord] | None, bool]:
    """Search ``queue``'s offsets only the tier holds, a :class:`TierScan` of at most
    ``CHUNK_OFFSETS`` at a time, adding to ``hits`` and ``tiered_hits``; whether the
    budget ran out. The local first offset is read afresh at each step (a trim
    meanwhile extends what only the tier holds)."""
    for first, high in _tier_ranges(state, queue, query):
        low = first
        while low < min(high, state.first_offset(*queue)) and len(hits) < query.limit:
            if budget.spent:
                return True
            step_high = min(high, state.first_offset(*queue), low + CHUNK_OFFSETS)
            answer = yield TierScan(queue, low, step_high)
            found = list(answer or ())
            budget.take(len(found))
            for tiered in found:
                if len(hits) < query.limit and _tier_hit(tiered, low, step_high, query):
                    hit = Hit(queue, tiered.queue_offset)
                    hits.append(hit)
                    tiered_hits[hit] = tiered
            low = step_high
    return False


def _tier_hit(tiered: TieredRecord, low: int, high: int, query: Query) -> bool:
    """Whether a record read from the tier for ``[low, high)`` is a hit of ``query``."""
    return (
        low <= tiered.queue_offset < high
        and query.begin_ms <= tiered.store_timestamp_ms <= query.end_ms
        and query.matches(tiered.record)
    )


def _tier_ranges(state: PartitionQueries, queue: QueueId, query: Query) -> list[tuple[int, int]]:
    """The offset ranges of ``queue``'s recorded tier objects whose store times overlap
    the query's range, below the local first offset, merged, ascending."""
    local_first = state.first_offset(*queue)
    ranges: list[tuple[int, int]] = []
    for entry in state.tier.objects(queue):
        if entry.first_offset >= local_first:
            break
        if entry.max_store_timestamp_ms < query.begin_ms:
            continue
        if entry.min_store_timestamp_ms > query.end_ms:
            break  # store times never go back: later objects are later still
        low, high = entry.first_offset, min(entry.end_offset, local_first)
        if ranges and ranges[-1][1] == low:
            ranges[-1] = (ranges[-1][0], high)
        else:
            ranges.append((low, high))
    return ranges


class _Budget:
    """Records a query may still read."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @property
    def spent(self) -> bool:
        return self.used >= self.limit

    def take(self, count: int) -> None:
        self.used += count


def _records(
    state: PartitionQueries,
    read: RecordReader,
    queue: QueueId,
    low: int,
    high: int,
    budget: _Budget,
) -> list[tuple[int, MessageRecord]]:
    """The records at offsets ``[low, high)`` of ``queue`` with their offsets (charged
    to ``budget``)."""
    if low >= high:
        return []
    entries = state.read(queue[0], queue[1], low, high - low)
    records = read(queue, entries)
    budget.take(len(records))
    return list(enumerate(records, low))
