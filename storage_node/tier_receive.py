"""Receive (pop) of messages only the tier holds: the leader's side of a ``TierReceive``.

A local trim never passes a queue's upload point, and a consumer group whose
position is below the local first offset keeps it (``PartitionState`` trims
the groups only to the first offset the tier and the log together hold). Before
the leader proposes such a group's receive, :func:`with_tier_rows` reads what
the receive may hand out of the tier (``PartitionQueries.tier_window``: the
fresh offsets from the group's cursor up to the local first offset, and its
expired or repeated leases down there) with the node's :class:`TierReader`, and
puts each message's offset, store time, tag and message group in the command
(``TierRow``). Every replica then applies the same grants without reading the
tier; the leader answers with the bodies it read (they are in the read cache).

A SQL92 filter is evaluated here on the rows read (its verdicts go in the same
command); a tag filter is applied by the state machine on the rows' tags, as
for local messages. A tier that cannot be read raises ``TierUnavailable``
(UNAVAILABLE, retriable) as for pull reads.

SHELL (tier reads through ``TierReader``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from protocol.sql92 import Sql92Filter, visible_properties
from storage_node.partition.commands import FilteredReceive, Receive, TierReceive, TierRow
from storage_node.partition.queries import PartitionQueries
from storage_node.tier_reads import TierMessage, TierReader

WINDOW_FACTOR = 4
"""A receive of ``n`` messages reads up to ``n * WINDOW_FACTOR`` fresh tier messages
(filters drop some; a tier block holds many, and the read cache keeps them)."""


@dataclass(frozen=True, slots=True)
class TierRows:
    """A receive with the rows it carries, and the messages read for them by offset.
    ``fresh``: the command covers fresh tier offsets (a receive that got nothing from
    them still moved the group on, so the caller may receive again at once)."""

    command: Receive
    messages: dict[int, TierMessage]
    fresh: bool


async def with_tier_rows(
    reader: TierReader,
    state: PartitionQueries,
    command: Receive,
    sql: Sql92Filter | None,
    now_ms: int,
) -> TierRows:
    """``command`` as a :class:`TierReceive` if the group may get messages only the tier
    holds (see the module docstring); else ``command`` unchanged and no messages."""
    queue = (command.topic, command.queue_id)
    window = state.tier_window(
        command.group,
        command.topic,
        command.queue_id,
        command.initial_position,
        now_ms,
        command.max_messages * WINDOW_FACTOR,
    )
    if not window:
        return TierRows(command, {}, False)
    group_id = state.config.group_id
    objects = state.tier.objects(queue)
    messages: dict[int, TierMessage] = {}
    fresh_end = window.first
    if window.end > window.first:
        read = await reader.read(group_id, objects, window.first, window.end - window.first)
        for message in read:
            messages[message.queue_offset] = message
        if read:
            fresh_end = read[-1].queue_offset + 1
    for offset in window.leased:
        if offset not in messages:
            for message in await reader.read(group_id, objects, offset, 1):
                messages[message.queue_offset] = message
    rows = tuple(
        TierRow(m.queue_offset, m.store_timestamp_ms, m.record.tag, m.record.message_group)
        for m in sorted(messages.values(), key=lambda m: m.queue_offset)
    )
    fields = {field.name: getattr(command, field.name) for field in dataclasses.fields(Receive)}
    if fresh_end > window.first:  # the verdicts cover the fresh rows only
        unmatched = tuple(
            offset
            for offset in range(window.first, fresh_end)
            if sql is not None and offset in messages and not _matches(sql, messages[offset])
        )
        return TierRows(
            TierReceive(**fields, evaluated_end=fresh_end, unmatched=unmatched, tier_rows=rows),
            messages,
            True,
        )
    if isinstance(command, FilteredReceive):  # the local verdicts stand
        verdicts = (command.evaluated_end, command.unmatched)
    else:  # every fresh local offset may be looked at
        verdicts = (state.end_offset(*queue), ())
    return TierRows(
        TierReceive(**fields, evaluated_end=verdicts[0], unmatched=verdicts[1], tier_rows=rows),
        messages,
        False,
    )


def _matches(sql: Sql92Filter, message: TierMessage) -> bool:
    record = message.record
    return sql.matches(visible_properties(record.properties, record.tag, record.keys))
