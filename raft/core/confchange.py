"""Membership changes: single steps, and joint consensus for several at once.

A change takes effect when the host applies its committed entry
(``RawNode.apply_conf_change``); at most one may be pending at a time (the
leader enforces it).

- A single change (ConfChange, or a ConfChangeV2 with one change and the
  AUTO transition) adds or removes one voter or learner, or promotes or
  demotes one member. Successive majorities then always overlap.
- Joint consensus (Raft thesis §4.3): a ConfChangeV2 with several changes
  (or a JOINT_* transition) enters a joint configuration in which every
  decision needs a majority of the old voters *and* of the new ones; an
  empty ConfChangeV2 leaves it. With ``auto_leave`` the leader proposes the
  leave itself once the joint configuration is applied. A voter demoted to
  learner stays an (outgoing) voter until the joint configuration is left
  (``learners_next``).

Entry data: a ConfChange is 9 bytes (type, then node id as a big-endian
u64); a ConfChangeV2 is the transition byte, a u16 count, then that many
9-byte changes.

PURE.
"""

from __future__ import annotations

import struct

from raft.core.tracker import MembershipConfig
from raft.errors import InvalidConfChange
from raft.types import (
    ConfChange,
    ConfChangeTransition,
    ConfChangeType,
    ConfChangeV2,
    Entry,
    EntryType,
)

_CHANGE = struct.Struct(">BQ")
_HEADER = struct.Struct(">BH")


def encode_conf_change(change: ConfChange) -> bytes:
    """The entry data for ``change``."""
    return _CHANGE.pack(change.type, change.node_id)


def _decode_one(data: bytes, offset: int) -> ConfChange:
    kind, node_id = _CHANGE.unpack_from(data, offset)
    try:
        change_type = ConfChangeType(kind)
    except ValueError:
        raise InvalidConfChange(f"unknown conf change type {kind}") from None
    return ConfChange(change_type, node_id)


def decode_conf_change(data: bytes) -> ConfChange:
    """The change an entry's data holds; raises InvalidConfChange if malformed."""
    if len(data) != _CHANGE.size:
        raise InvalidConfChange(f"conf change data has {len(data)} bytes, expected {_CHANGE.size}")
    return _decode_one(data, 0)


def encode_conf_change_v2(change: ConfChangeV2) -> bytes:
    """The entry data for ``change``."""
    parts = [_HEADER.pack(change.transition, len(change.changes))]
    parts.extend(encode_conf_change(one) for one in change.changes)
    return b"".join(parts)


def decode_conf_change_v2(data: bytes) -> ConfChangeV2:
    """The ConfChangeV2 an entry's data holds; raises InvalidConfChange if malformed."""
    if len(data) < _HEADER.size:
        raise InvalidConfChange(f"conf change v2 data has only {len(data)} bytes")
    transition, count = _HEADER.unpack_from(data)
    if len(data) != _HEADER.size + count * _CHANGE.size:
        raise InvalidConfChange(f"conf change v2 data of {len(data)} bytes for {count} changes")
    try:
        kind = ConfChangeTransition(transition)
    except ValueError:
        raise InvalidConfChange(f"unknown conf change transition {transition}") from None
    changes = tuple(_decode_one(data, _HEADER.size + i * _CHANGE.size) for i in range(count))
    return ConfChangeV2(changes, kind)


def decode_entry(entry: Entry) -> ConfChange | ConfChangeV2:
    """The change a CONF_CHANGE or CONF_CHANGE_V2 entry holds (for the host to apply)."""
    if entry.type == EntryType.CONF_CHANGE_V2:
        return decode_conf_change_v2(entry.data)
    return decode_conf_change(entry.data)


def apply_change(config: MembershipConfig, change: ConfChange) -> MembershipConfig:
    """The configuration after one single-step ``change``; raises if it is unsafe."""
    if config.is_joint():
        raise InvalidConfChange("a single-step change cannot be applied in a joint configuration")
    voters, learners, _ = _apply(set(config.voters), set(config.learners), set(), (change,), set())
    return MembershipConfig(frozenset(voters), frozenset(learners))


def _apply(
    voters: set[int],
    learners: set[int],
    learners_next: set[int],
    changes: tuple[ConfChange, ...],
    outgoing: set[int],
) -> tuple[set[int], set[int], set[int]]:
    for change in changes:
        node_id = change.node_id
        if node_id <= 0:
            raise InvalidConfChange(f"node id {node_id} is not positive")
        voters.discard(node_id)
        learners.discard(node_id)
        learners_next.discard(node_id)
        if change.type == ConfChangeType.ADD_VOTER:
            voters.add(node_id)
        elif change.type == ConfChangeType.ADD_LEARNER:
            # An outgoing voter keeps voting until the joint config is left.
            (learners_next if node_id in outgoing else learners).add(node_id)
    if not voters:
        raise InvalidConfChange("the change would remove every voter")
    return voters, learners, learners_next


def apply_change_v2(config: MembershipConfig, change: ConfChangeV2) -> MembershipConfig:
    """The configuration after ``change``: a single step, entering or leaving joint."""
    if change.leaves_joint():
        return leave_joint(config)
    if change.transition == ConfChangeTransition.AUTO and len(change.changes) == 1:
        return apply_change(config, change.changes[0])
    return enter_joint(
        config, change.changes, auto_leave=change.transition != ConfChangeTransition.JOINT_EXPLICIT
    )


def enter_joint(
    config: MembershipConfig, changes: tuple[ConfChange, ...], *, auto_leave: bool
) -> MembershipConfig:
    """The joint configuration (old voters, new voters) that ``changes`` lead to."""
    if config.is_joint():
        raise InvalidConfChange("already in a joint configuration")
    outgoing = set(config.voters)
    voters, learners, learners_next = _apply(
        set(config.voters), set(config.learners), set(), changes, outgoing
    )
    return MembershipConfig(
        frozenset(voters),
        frozenset(learners),
        frozenset(outgoing),
        frozenset(learners_next),
        auto_leave,
    )


def leave_joint(config: MembershipConfig) -> MembershipConfig:
    """The incoming half of a joint configuration, alone; demoted voters become learners."""
    if not config.is_joint():
        raise InvalidConfChange("not in a joint configuration")
    return MembershipConfig(config.voters, config.learners | config.learners_next)
