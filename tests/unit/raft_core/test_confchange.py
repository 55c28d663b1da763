"""Single-step membership changes and their entry encoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raft.core.confchange import apply_change, decode_conf_change, encode_conf_change
from raft.core.tracker import MembershipConfig
from raft.errors import InvalidConfChange
from raft.types import ConfChange, ConfChangeType, ConfState


@given(st.sampled_from(list(ConfChangeType)), st.integers(1, 2**64 - 1))
def test_changes_round_trip_through_entry_data(kind: ConfChangeType, node_id: int) -> None:
    change = ConfChange(kind, node_id)
    assert decode_conf_change(encode_conf_change(change)) == change


def test_malformed_entry_data_is_named() -> None:
    with pytest.raises(InvalidConfChange, match="expected 9"):
        decode_conf_change(b"\x00")
    with pytest.raises(InvalidConfChange, match="unknown conf change type 9"):
        decode_conf_change(b"\x09" + bytes(8))


def config(voters: set[int], learners: set[int] = frozenset()) -> MembershipConfig:  # type: ignore[assignment]
    return MembershipConfig(frozenset(voters), frozenset(learners))


def test_add_promote_demote_remove() -> None:
    cfg = config({1, 2, 3})
    cfg = apply_change(cfg, ConfChange(ConfChangeType.ADD_LEARNER, 4))
    assert (cfg.voters, cfg.learners) == ({1, 2, 3}, {4})
    cfg = apply_change(cfg, ConfChange(ConfChangeType.ADD_VOTER, 4))
    assert (cfg.voters, cfg.learners) == ({1, 2, 3, 4}, set())
    cfg = apply_change(cfg, ConfChange(ConfChangeType.ADD_LEARNER, 1))
    assert (cfg.voters, cfg.learners) == ({2, 3, 4}, {1})
    cfg = apply_change(cfg, ConfChange(ConfChangeType.REMOVE_NODE, 1))
    assert (cfg.voters, cfg.learners) == ({2, 3, 4}, set())
    assert cfg.to_conf_state() == ConfState(frozenset({2, 3, 4}))


def test_unsafe_changes_are_refused() -> None:
    with pytest.raises(InvalidConfChange, match="remove every voter"):
        apply_change(config({1}), ConfChange(ConfChangeType.REMOVE_NODE, 1))
    with pytest.raises(InvalidConfChange, match="not positive"):
        apply_change(config({1}), ConfChange(ConfChangeType.ADD_VOTER, 0))
    joint = MembershipConfig(frozenset({1, 2}), frozenset(), frozenset({1, 2, 3}))
    with pytest.raises(InvalidConfChange, match="joint"):
        apply_change(joint, ConfChange(ConfChangeType.ADD_VOTER, 4))
    assert joint.is_voter(3)
    assert not joint.is_voter(4)


def test_v2_changes_round_trip_and_malformed_data_is_named() -> None:
    from raft.core.confchange import decode_conf_change_v2, decode_entry, encode_conf_change_v2
    from raft.types import ConfChangeTransition, ConfChangeV2, Entry, EntryType

    change = ConfChangeV2(
        (ConfChange(ConfChangeType.ADD_VOTER, 4), ConfChange(ConfChangeType.REMOVE_NODE, 3)),
        ConfChangeTransition.JOINT_EXPLICIT,
    )
    data = encode_conf_change_v2(change)
    assert decode_conf_change_v2(data) == change
    assert decode_entry(Entry(1, 1, EntryType.CONF_CHANGE_V2, data)) == change
    assert decode_conf_change_v2(encode_conf_change_v2(ConfChangeV2())).leaves_joint()
    with pytest.raises(InvalidConfChange, match="only 1 bytes"):
        decode_conf_change_v2(b"\x00")
    with pytest.raises(InvalidConfChange, match="for 2 changes"):
        decode_conf_change_v2(data[:-1])
    with pytest.raises(InvalidConfChange, match="unknown conf change transition 7"):
        decode_conf_change_v2(b"\x07" + data[1:])


def test_joint_configurations_are_entered_then_left() -> None:
    from raft.core.confchange import apply_change_v2, enter_joint, leave_joint
    from raft.types import ConfChangeTransition, ConfChangeV2

    cfg = config({1, 2, 3})
    single = apply_change_v2(cfg, ConfChangeV2((ConfChange(ConfChangeType.ADD_VOTER, 4),)))
    assert (single.voters, single.is_joint()) == ({1, 2, 3, 4}, False)
    joint = apply_change_v2(
        cfg,
        ConfChangeV2(
            (ConfChange(ConfChangeType.ADD_LEARNER, 3), ConfChange(ConfChangeType.ADD_VOTER, 5)),
            ConfChangeTransition.JOINT_IMPLICIT,
        ),
    )
    assert (joint.voters, joint.voters_outgoing) == ({1, 2, 5}, {1, 2, 3})
    assert (joint.learners, joint.learners_next, joint.auto_leave) == (set(), {3}, True)
    with pytest.raises(InvalidConfChange, match="already in a joint"):
        enter_joint(joint, (ConfChange(ConfChangeType.ADD_VOTER, 6),), auto_leave=False)
    left = apply_change_v2(joint, ConfChangeV2())
    assert (left.voters, left.learners, left.is_joint()) == ({1, 2, 5}, {3}, False)
    with pytest.raises(InvalidConfChange, match="not in a joint"):
        leave_joint(left)
