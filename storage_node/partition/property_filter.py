"""SQL92 property filters on a receive: evaluated by the leader, decided in the log.

A SQL92 filter (``protocol.sql92``) tests a message's properties, which live
in its record in the log, not in the queue index (the index keeps only the
tag and message group). So, unlike a tag filter, it cannot be evaluated by
every replica on apply without each of them reading the bodies back. Instead
the leader, before it proposes a ``Receive``, reads the records of the fresh
offsets that receive would look at, evaluates the filter on each, and puts
its verdicts in the command (a ``FilteredReceive``: ``evaluated_end``, ``unmatched``):
apply hands out only evaluated offsets that matched and finishes the
unmatched ones for the group (skipped for good, as RocketMQ's broker does
with a message its filter rejects), on every replica alike.

A verdict is a fact about one message (its properties never change), so it
stays right whatever else is applied between the evaluation and the
command: a concurrent receive can only have taken some of the offsets
already, which apply then passes over. Expired leases are redelivered as
they are (they matched when first handed out).

An offset read (a pull) changes no state, so it needs no verdicts in the
log: :func:`matching` evaluates the records it read and returns the matches.

Evaluation stops once ``max_messages`` offsets matched (the rest stay fresh,
evaluated by a later receive), after :data:`EVALUATED_MAX` offsets, or where
the group's scan window ends. Each log entry is read and decoded once per
receive.

PURE.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from protocol.records import FilterColumns
from protocol.sql92 import Sql92Filter, visible_properties
from storage_node.partition.commands import FilteredReceive, Receive, append_filter_columns
from storage_node.partition.queries import PartitionQueries
from storage_node.partition.queues import QueueEntry, QueueId
from storage_node.partition.reads import EntryReader, records_of

EVALUATED_MAX = 1024
"""At most this many offsets are evaluated for one receive (it blocks the node's loop);
the receive then says there is ``more``."""


class Evaluated(NamedTuple):
    """A receive with its filter's verdicts; ``more``: evaluation stopped before the
    group's scan window ended (a receive that got nothing may try again at once)."""

    command: FilteredReceive
    more: bool


def evaluate(
    state: PartitionQueries,
    read_entry: EntryReader,
    command: Receive,
    sql_filter: Sql92Filter,
) -> Evaluated:
    """``command`` with the verdicts of ``sql_filter`` on the fresh offsets it would
    look at in ``state`` (the group's, read from the log through ``read_entry``).

    With no fresh offset, the verdicts are empty and end at 0: the receive hands
    out expired leases only.
    """
    queue = (command.topic, command.queue_id)
    group_id = state.config.group_id
    fresh = state.fresh_entries(
        command.group, command.topic, command.queue_id, command.initial_position
    )
    unmatched: list[int] = []
    matched = 0
    end = 0
    views = _views(fresh, read_entry, group_id, queue)
    for evaluated, (offset, tag, keys, properties) in enumerate(views):
        if matched >= command.max_messages or evaluated >= EVALUATED_MAX:
            return Evaluated(_with(command, end, unmatched), more=True)
        end = offset + 1
        if sql_filter.matches(visible_properties(properties, tag, keys)):
            matched += 1
        else:
            unmatched.append(offset)
    return Evaluated(_with(command, end, unmatched), more=False)


def matching(
    entries: Sequence[QueueEntry],
    first_offset: int,
    read_entry: EntryReader,
    group_id: int,
    queue: QueueId,
    sql_filter: Sql92Filter,
    count_max: int,
) -> tuple[list[int], list[QueueEntry], int]:
    """``partition.pull.matching`` for a SQL92 filter (an offset read, a pull).

    The offsets and entries of ``entries`` (consecutive, the first at
    ``first_offset``; records read through ``read_entry`` from group
    ``group_id``) that match, at most ``count_max``, and the offset after the
    last entry looked at. At most :data:`EVALUATED_MAX` are looked at.
    """
    looked = entries[:EVALUATED_MAX]
    offsets: list[int] = []
    kept: list[QueueEntry] = []
    views = _views(enumerate(looked, first_offset), read_entry, group_id, queue)
    for offset, tag, keys, properties in views:
        if sql_filter.matches(visible_properties(properties, tag, keys)):
            offsets.append(offset)
            kept.append(entries[offset - first_offset])
            if len(kept) >= count_max:
                return offsets, kept, offset + 1
    return offsets, kept, first_offset + len(looked)


def _with(command: Receive, end: int, unmatched: list[int]) -> FilteredReceive:
    fields = {field.name: getattr(command, field.name) for field in dataclasses.fields(Receive)}
    return FilteredReceive(**fields, evaluated_end=end, unmatched=tuple(unmatched))


_View = tuple[int, str, tuple[str, ...], tuple[tuple[str, str], ...]]
"""An offset and what the filter sees of its message: tag, keys, properties."""


def _views(
    fresh: Iterator[tuple[int, QueueEntry]], read_entry: EntryReader, group_id: int, queue: QueueId
) -> Iterator[_View]:
    """The fresh offsets with what the filter sees of their messages.

    Each log entry is read once and only its records' tags, keys and properties
    are decoded (``commands.append_filter_columns``, no record built); an entry off that fast
    path is read record by record (``reads.records_of``, which names a fault).
    """
    columns_of: dict[int, FilterColumns | None] = {}
    for offset, entry in fresh:
        index = entry.log_index
        columns = columns_of.get(index, _UNREAD)
        if columns is _UNREAD:
            columns = columns_of[index] = append_filter_columns(read_entry(index))
        if columns is not None and entry.position < len(columns[0]):
            position = entry.position
            yield offset, columns[0][position], columns[1][position], columns[2][position]
            continue
        (record,) = records_of(read_entry, group_id, queue, [entry])
        yield offset, record.tag, record.keys, record.properties


_UNREAD: FilterColumns = ((), (), ())
"""A marker: the entry is not read yet (compared by identity)."""
