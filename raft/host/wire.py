"""The bytes that carry one round's raft traffic from one node to another.

All messages from node A to node B produced in one driver round, for every
group they share, travel as ONE batch. Inside a batch a message is a msgpack
array with its trailing default fields left out, and ``to``/``from_`` are
implied by the batch header (a replica's id is its node's id), so a
heartbeat or its response costs about ten bytes: heartbeats of all groups
between two nodes are coalesced into one frame per round.

Layout (msgpack)::

    [VERSION, from_node, to_node, [item, ...]]
    item     = [group, type, term, log_term, index, commit, reject, reject_hint,
                context, entries, snapshot]           (trailing defaults dropped)
    entries  = [first_index, term, entry_type, data, term, entry_type, data, ...]
               (consecutive indices from first_index, flattened)
    snapshot = [index, term, voters, learners, voters_outgoing, data]

``type`` is a :class:`raft.types.MsgType`, or :data:`QUIESCE` for the
driver's own "this group is going idle" notice (never given to a raft core).

PURE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgpack

from raft.types import (
    ConfState,
    Entry,
    EntryType,
    Message,
    MsgType,
    Snapshot,
    SnapshotMetadata,
)

VERSION = 1
QUIESCE = 100
"""Item type of a quiesce notice: term = leader's term, index = its last index, commit."""


class WireError(ValueError):
    """Bytes that are not a valid raft batch."""


@dataclass(frozen=True, slots=True)
class QuiesceNotice:
    """The leader of ``group_id`` stops ticking it; followers in step do the same."""

    group_id: int
    term: int
    last_index: int
    commit: int


@dataclass(frozen=True, slots=True)
class Batch:
    """One decoded batch: messages per group plus quiesce notices."""

    from_node: int
    to_node: int
    messages: list[tuple[int, Message]]
    quiesce: list[QuiesceNotice]


def _encode_message(group_id: int, m: Message) -> list[object]:
    snapshot: object = None
    if m.snapshot is not None:
        meta = m.snapshot.metadata
        conf = meta.conf_state
        snapshot = [
            meta.index,
            meta.term,
            sorted(conf.voters),
            sorted(conf.learners),
            sorted(conf.voters_outgoing),
            m.snapshot.data,
        ]
    fields: list[object] = [
        group_id,
        int(m.type),
        m.term,
        m.log_term,
        m.index,
        m.commit,
        m.reject,
        m.reject_hint,
        m.context,
        _flat_entries(m.entries) if m.entries else None,
        snapshot,
    ]
    end = len(fields)
    while end > 2 and fields[end - 1] in _DEFAULTS[end - 1]:
        end -= 1
    return fields[:end]


def _flat_entries(entries: Sequence[Entry]) -> list[object]:
    flat: list[object] = [entries[0].index]
    extend = flat.extend
    for e in entries:
        extend((e.term, e.type, e.data))
    return flat


_ENTRY_TYPES = {int(t): t for t in EntryType}
_MESSAGE_TYPES = {int(t): t for t in MsgType}


# Per field position: the values that mean "default" and may be dropped at the tail.
_DEFAULTS: tuple[tuple[object, ...], ...] = (
    (),
    (),
    (0,),
    (0,),
    (0,),
    (0,),
    (False,),
    (0,),
    (b"",),
    (None,),
    (None,),
)


def encode_batch(
    from_node: int,
    to_node: int,
    messages: Sequence[tuple[int, Message]],
    quiesce: Sequence[QuiesceNotice] = (),
) -> bytes:
    """One batch of (group id, message) pairs (and quiesce notices) for ``to_node``."""
    items = [_encode_message(g, m) for g, m in messages]
    items.extend([q.group_id, QUIESCE, q.term, 0, q.last_index, q.commit] for q in quiesce)
    packed: bytes = msgpack.packb([VERSION, from_node, to_node, items], use_bin_type=True)
    return packed


def decode_batch(data: bytes) -> Batch:
    """Inverse of :func:`encode_batch`; ``WireError`` names what is wrong."""
    try:
        version, from_node, to_node, items = msgpack.unpackb(data, use_list=True)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise WireError(f"not a raft batch: {exc}") from None
    if version != VERSION:
        raise WireError(f"unsupported raft batch version {version}")
    messages: list[tuple[int, Message]] = []
    quiesce: list[QuiesceNotice] = []
    try:
        for item in items:
            fields = item + _PAD[len(item) :]
            group_id, mtype, term, log_term, index, commit, reject, hint, ctx, ents, snap = fields
            if mtype == QUIESCE:
                quiesce.append(QuiesceNotice(group_id, term, index, commit))
                continue
            entries: tuple[Entry, ...] = ()
            if ents:
                first = ents[0]
                it = iter(ents)
                next(it)
                types = _ENTRY_TYPES
                entries = tuple(
                    Entry(t, first + k, types[et], d)
                    for k, (t, et, d) in enumerate(zip(it, it, it, strict=True))
                )
            snapshot = None
            if snap is not None:
                s_index, s_term, voters, learners, outgoing, s_data = snap
                snapshot = Snapshot(
                    SnapshotMetadata(
                        index=s_index,
                        term=s_term,
                        conf_state=ConfState(
                            voters=frozenset(voters),
                            learners=frozenset(learners),
                            voters_outgoing=frozenset(outgoing),
                        ),
                    ),
                    s_data,
                )
            messages.append(
                (
                    group_id,
                    Message(
                        type=_MESSAGE_TYPES[mtype],
                        to=to_node,
                        from_=from_node,
                        term=term,
                        log_term=log_term,
                        index=index,
                        entries=entries,
                        commit=commit,
                        reject=reject,
                        reject_hint=hint,
                        snapshot=snapshot,
                        context=ctx,
                    ),
                )
            )
    except (ValueError, TypeError, KeyError) as exc:
        raise WireError(f"malformed raft batch item: {exc!r}") from None
    return Batch(from_node, to_node, messages, quiesce)


_PAD: list[object] = [None, None, 0, 0, 0, 0, False, 0, b"", None, None]
