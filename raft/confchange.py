"""Membership changes: one voter or learner at a time.

A change takes effect when the host applies its committed CONF_CHANGE entry
(``RawNode.apply_conf_change``). Single-step changes keep every two
successive majorities overlapping, so at most one change may be pending at a
time (the leader enforces it). A voter can be demoted to a learner and a
learner promoted to a voter in one step.

Entries carry a change as 9 bytes: the type, then the node id (big-endian u64).

PURE.
"""

from __future__ import annotations

import struct

from raft.errors import InvalidConfChange
from raft.tracker import MembershipConfig
from raft.types import ConfChange, ConfChangeType

_WIRE = struct.Struct(">BQ")


def encode_conf_change(change: ConfChange) -> bytes:
    """The entry data for ``change``."""
    return _WIRE.pack(change.type, change.node_id)


def decode_conf_change(data: bytes) -> ConfChange:
    """The change an entry's data holds; raises InvalidConfChange if malformed."""
    if len(data) != _WIRE.size:
        raise InvalidConfChange(f"conf change data has {len(data)} bytes, expected {_WIRE.size}")
    kind, node_id = _WIRE.unpack(data)
    try:
        change_type = ConfChangeType(kind)
    except ValueError:
        raise InvalidConfChange(f"unknown conf change type {kind}") from None
    return ConfChange(change_type, node_id)


def apply_change(config: MembershipConfig, change: ConfChange) -> MembershipConfig:
    """The configuration after ``change``; raises InvalidConfChange if it is unsafe."""
    if config.voters_outgoing:
        raise InvalidConfChange("a single-step change cannot be applied in a joint configuration")
    node_id = change.node_id
    if node_id <= 0:
        raise InvalidConfChange(f"node id {node_id} is not positive")
    voters = set(config.voters)
    learners = set(config.learners)
    if change.type == ConfChangeType.ADD_VOTER:
        learners.discard(node_id)
        voters.add(node_id)
    elif change.type == ConfChangeType.ADD_LEARNER:
        voters.discard(node_id)
        learners.add(node_id)
    else:
        voters.discard(node_id)
        learners.discard(node_id)
    if not voters:
        raise InvalidConfChange(f"{change.type.name} of {node_id} would remove every voter")
    return MembershipConfig(frozenset(voters), frozenset(learners))
