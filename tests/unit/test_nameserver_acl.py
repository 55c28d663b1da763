"""The nameserver keeps ACL users and policies: commands, errors, snapshots, wire shapes."""

from __future__ import annotations

import pytest

from nameserver import commands as c
from nameserver.errors import AlreadyExists, BadRequest, NotFound
from nameserver.state import MetadataState
from protocol.acl import (
    Acl,
    AclTables,
    Action,
    Decision,
    PolicyEntry,
    User,
    UserType,
    parse_resource,
)
from protocol.acl_wire import tables_of, tables_response

ROOT = User("root", "r00t", UserType.SUPER)
ALICE = User("alice", "s3cret")
PUB_ORDERS = PolicyEntry(parse_resource("Topic:orders"), (Action.PUB,))
DENY_ALL = PolicyEntry(parse_resource("*"), (Action.ALL,), Decision.DENY, ("10.0.0.0/8",))


def applied(state: MetadataState, *commands: c.Command) -> MetadataState:
    for command in commands:
        assert c.decode(c.encode(command)) == command  # each travels the log intact
        state.apply(command)
    return state


def test_users_and_policies_are_created_updated_and_deleted() -> None:
    state = applied(
        MetadataState(),
        c.CreateUser(ROOT),
        c.CreateUser(ALICE),
        c.PutAcl("alice", (PUB_ORDERS,), create=True),
        c.UpdateUser("alice", secret="n3w"),
        c.PutAcl("alice", (DENY_ALL,)),
    )
    tables = state.acl_tables()
    assert tables.user("alice") == User("alice", "n3w")
    assert tables.acl("alice") == Acl("alice", (PUB_ORDERS, DENY_ALL))
    revision = state.revision
    applied(state, c.DeleteAcl("alice", (DENY_ALL.resource,)))
    assert state.acl_tables().acl("alice") == Acl("alice", (PUB_ORDERS,))
    applied(state, c.UpdateUser("alice", user_type=UserType.SUPER), c.DeleteUser("alice"))
    assert state.acl_tables() == AclTables((ROOT,), ())  # the policy went with its user
    assert state.revision == revision  # not watched: no revision, no change


def test_bad_acl_commands_are_refused_and_change_nothing() -> None:
    state = applied(MetadataState(), c.CreateUser(ALICE), c.PutAcl("alice", (PUB_ORDERS,)))
    before = state.snapshot()
    refused: list[tuple[c.Command, type[Exception], str]] = [
        (c.CreateUser(User("alice", "x")), AlreadyExists, "exists already"),
        (c.CreateUser(User("bob", "")), BadRequest, "secret"),
        (c.UpdateUser("bob", secret="x"), NotFound, "'bob' does not exist"),
        (c.PutAcl("bob", (PUB_ORDERS,)), NotFound, "'bob' does not exist"),
        (c.PutAcl("alice", (PUB_ORDERS,), create=True), AlreadyExists, "has a policy"),
        (c.PutAcl("alice", (PolicyEntry(parse_resource("*"), ()),)), BadRequest, "no actions"),
        (c.DeleteAcl("alice", (parse_resource("Topic:x"),)), NotFound, "no entry for Topic:x"),
        (c.DeleteAcl("root"), NotFound, "has no policy"),
    ]
    for command, error, words in refused:
        with pytest.raises(error, match=words):
            state.apply(command)
    assert state.snapshot() == before


def test_snapshots_carry_the_acl_tables_only_when_there_are_any() -> None:
    empty = MetadataState()
    assert MetadataState.restore(empty.snapshot()).snapshot() == empty.snapshot()
    state = applied(
        MetadataState(), c.CreateUser(ROOT), c.CreateUser(ALICE), c.PutAcl("alice", (DENY_ALL,))
    )
    restored = MetadataState.restore(state.snapshot())
    assert restored.acl_tables() == state.acl_tables()
    assert restored.snapshot() == state.snapshot()
    assert len(state.snapshot()) > len(empty.snapshot())


def test_the_tables_travel_the_nameserver_api_both_ways() -> None:
    tables = AclTables((ALICE, ROOT), (Acl("alice", (PUB_ORDERS, DENY_ALL)),))
    response = tables_response(tables, 7)
    assert response.revision == 7
    assert response.acls[0].entries[1].resource == "*"
    assert tables_of(response) == tables
