"""Reads below a queue's local first offset, served from the tier.

With a tier, a queue's messages below its local first offset are in the
objects its group recorded (``partition.tier``). :class:`TierReader` finds the
object holding an offset from the recorded list alone, reads its footer and
the blocks wanted with ranged reads (``Tier.read_range``) in a worker thread,
and checks every byte it decodes (``protocol.message_objects``). Decoded blocks
and footers are kept in a read cache bounded in bytes (least recently used go
first), so consumers reading the same old range one after the other read the
tier once.

A tier that cannot be read (an outage, a missing object, no answer within
:data:`READ_TIMEOUT_MS`) raises
:class:`storage_node.errors.TierUnavailable` (UNAVAILABLE, retriable) naming
the object: a consumer of old data retries, while reads of local data and
appends go on unaffected.

SHELL (file and network I/O through the tier).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from protocol.message_objects import (
    TRAILER_BYTES,
    BlockInfo,
    ObjectEntry,
    ObjectFooter,
    block_records,
    decode_block,
    decode_footer,
    footer_length,
)
from protocol.records import MessageRecord
from storage_node.errors import TierUnavailable
from storage_node.tier_store import Tier

T = TypeVar("T")

READ_TIMEOUT_MS = 2_000
"""The longest one ranged read of the tier may take before the read answers UNAVAILABLE
(drivers retry an unreachable endpoint for much longer on their own)."""

CACHE_BYTES = 64 << 20
"""The read cache's bound: decoded blocks (counted by their bytes in the object)."""


@dataclass(frozen=True, slots=True)
class TierMessage:
    """A message read from the tier, at its queue offset."""

    queue_offset: int
    store_timestamp_ms: int
    record: MessageRecord


class TierReader:
    """Reads of recorded tier objects, with a read cache (see the module docstring)."""

    def __init__(self, tier: Tier, cache_bytes: int = CACHE_BYTES) -> None:
        self.tier = tier
        self.cache_bytes = cache_bytes
        self.cached_bytes = 0
        self.read_bytes = 0
        """Bytes read from the tier so far (footers and blocks; cache hits not counted).
        Counted on the event loop, after each read's thread returned."""
        self._footers: dict[tuple[int, str], ObjectFooter] = {}
        self._blocks: collections.OrderedDict[
            tuple[int, str, int], tuple[int, list[TierMessage]]
        ] = collections.OrderedDict()

    async def read(
        self, group_id: int, objects: list[ObjectEntry], offset: int, count_max: int
    ) -> list[TierMessage]:
        """Up to ``count_max`` messages from ``offset`` (in the recorded ``objects``, in
        offset order); fewer at the end of the objects."""
        messages: list[TierMessage] = []
        for entry in objects:
            if entry.end_offset <= offset or len(messages) >= count_max:
                continue
            footer = await self._footer(group_id, entry)
            for block in footer.blocks:
                if block.end_offset <= offset:
                    continue
                for message in await self._block(group_id, entry, block):
                    if message.queue_offset >= offset and len(messages) < count_max:
                        messages.append(message)
                if len(messages) >= count_max:
                    break
            offset = entry.end_offset
        return messages

    async def _footer(self, group_id: int, entry: ObjectEntry) -> ObjectFooter:
        key = (group_id, entry.name)
        cached = self._footers.get(key)
        if cached is not None:
            return cached
        footer, read_bytes = await self._io(self._read_footer, group_id, entry)
        self.read_bytes += read_bytes
        if len(self._footers) > 4096:  # footers are small: a count bounds them
            self._footers.clear()
        self._footers[key] = footer
        return footer

    def _read_footer(self, group_id: int, entry: ObjectEntry) -> tuple[ObjectFooter, int]:
        """The object's footer, and the bytes read for it."""
        size = entry.size_bytes
        trailer = self.tier.read_range(group_id, entry, size - TRAILER_BYTES, size)
        length = footer_length(trailer, entry.name)
        start = max(0, size - TRAILER_BYTES - length)
        tail = self.tier.read_range(group_id, entry, start, size)
        return decode_footer(tail, entry.name, size), len(trailer) + len(tail)

    async def _block(
        self, group_id: int, entry: ObjectEntry, block: BlockInfo
    ) -> list[TierMessage]:
        key = (group_id, entry.name, block.first_offset)
        cached = self._blocks.get(key)
        if cached is not None:
            self._blocks.move_to_end(key)
            return cached[1]
        messages = await self._io(self._read_block, group_id, entry, block)
        self.read_bytes += block.length
        self._blocks[key] = (block.length, messages)
        self.cached_bytes += block.length
        while self.cached_bytes > self.cache_bytes and len(self._blocks) > 1:
            _, (length, _) = self._blocks.popitem(last=False)
            self.cached_bytes -= length
        return messages

    def _read_block(self, group_id: int, entry: ObjectEntry, block: BlockInfo) -> list[TierMessage]:
        data = self.tier.read_range(group_id, entry, block.position, block.position + block.length)
        decoded = decode_block(data, block, entry.name)
        return [
            TierMessage(block.first_offset + i, stored_ms, record)
            for i, (stored_ms, record) in enumerate(
                zip(decoded.store_timestamps_ms, block_records(decoded), strict=True)
            )
        ]

    async def _io(self, read: Callable[..., T], group_id: int, *args: object) -> T:
        """``read`` in a worker thread; a failure is :class:`TierUnavailable`."""
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(read, group_id, *args), READ_TIMEOUT_MS / 1000
            )
        except Exception as exc:
            raise TierUnavailable(
                f"the tier at {self.tier.url} cannot serve group {group_id}'s old messages "
                f"now: {type(exc).__name__}: {exc}"
            ) from exc
