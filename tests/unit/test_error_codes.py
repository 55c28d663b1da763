from angelia_rpc.errors import from_exception
from nameserver.errors import NameserverNotLeader
from protocol import errors
from raft.errors import ProposalDropped, RaftNotLeader
from storage_node.errors import StorageNotLeader


def test_codes_are_unique_and_in_append_only_order() -> None:
    numbers = [code.number for code in errors.all_codes()]
    assert numbers == sorted(set(numbers))
    names = [code.name for code in errors.all_codes()]
    assert len(names) == len(set(names))


def test_unknown_number_reads_as_internal() -> None:
    assert errors.by_number(99_999) is errors.INTERNAL
    assert errors.by_number(errors.NOT_LEADER.number) is errors.NOT_LEADER


def test_not_leader_asks_for_a_route_refresh() -> None:
    assert errors.NOT_LEADER.retriable
    assert errors.NOT_LEADER.refresh_route
    assert not errors.BAD_REQUEST.retriable


def test_each_side_names_its_not_leader_and_all_carry_the_same_flags() -> None:
    # The three NOT_LEADER errors (raft's, the storage node's, the nameserver's)
    # differ in name and in what their hint addresses; callers read only the flags.
    raft = RaftNotLeader("not the leader", leader=3)
    storage = StorageNotLeader("follows", "10.0.0.3:7701")
    nameserver = NameserverNotLeader("follows", "")
    assert (raft.leader, raft.leader_hint) == (3, "3")  # a node id, for the services
    assert RaftNotLeader().leader_hint == ""
    for error in (raft, storage, nameserver):
        assert error.code is errors.NOT_LEADER
        assert error.retriable
        assert error.refresh_route
    assert storage.leader_hint == "10.0.0.3:7701"
    assert ProposalDropped().leader_hint == ""  # every coded error has a hint, mostly none
    assert from_exception(raft).leader_hint == "3"
    assert from_exception(storage).leader_hint == "10.0.0.3:7701"
    assert from_exception(nameserver).leader_hint == ""
