"""ACL values <-> their nameserver API shapes (``protocol.nameserver_api``), both ways.

The one conversion used by the nameserver (writes in, tables out), the
brokers (tables in) and the admin CLI (what operators type, out). A number
that names no enum member, or a resource written wrongly, is refused with
:class:`protocol.acl.InvalidAcl` naming it.

PURE.
"""

from __future__ import annotations

from protocol import nameserver_api as api
from protocol.acl import (
    Acl,
    AclTables,
    Action,
    Decision,
    InvalidAcl,
    PolicyEntry,
    User,
    UserType,
    parse_resource,
    parse_source_cidrs,
)
from protocol.acl_signature import format_date_time, sign


def signed_by(access_key: str, secret: str, now_ms: int) -> api.SignedBy:
    """The signature of a nameserver write sent at ``now_ms`` by ``access_key``."""
    date_time = format_date_time(now_ms)
    return api.SignedBy(access_key, date_time, sign(secret, date_time))


def user_info(user: User) -> api.UserInfo:
    """The wire shape of ``user``."""
    return api.UserInfo(user.name, user.secret, int(user.user_type))


def user_of(info: api.UserInfo) -> User:
    """The user ``info`` describes (type 0 reads as NORMAL)."""
    return User(info.name, info.secret, user_type_of(info.user_type or int(UserType.NORMAL)))


def user_type_of(number: int) -> UserType:
    """The user type numbered ``number``; :class:`InvalidAcl` if none is."""
    try:
        return UserType(number)
    except ValueError:
        raise InvalidAcl(f"user type {number} is not one of {[int(t) for t in UserType]}") from None


def entry_info(entry: PolicyEntry) -> api.PolicyEntryInfo:
    """The wire shape of a policy entry."""
    return api.PolicyEntryInfo(
        entry.resource.text,
        [int(action) for action in entry.actions],
        int(entry.decision),
        list(entry.source_cidrs),
    )


def entry_of(info: api.PolicyEntryInfo) -> PolicyEntry:
    """The policy entry ``info`` describes."""
    try:
        actions = tuple(Action(number) for number in info.actions)
        decision = Decision(info.decision)
    except ValueError as error:
        raise InvalidAcl(f"policy entry for {info.resource}: {error}") from None
    return PolicyEntry(
        parse_resource(info.resource),
        actions,
        decision,
        parse_source_cidrs(",".join(info.source_cidrs)),
    )


def acl_info(acl: Acl) -> api.AclInfo:
    """The wire shape of a policy."""
    return api.AclInfo(acl.subject, [entry_info(entry) for entry in acl.entries])


def acl_of(info: api.AclInfo) -> Acl:
    """The policy ``info`` describes."""
    return Acl(info.subject, tuple(entry_of(entry) for entry in info.entries))


def tables_response(tables: AclTables, revision: int) -> api.AclTablesResponse:
    """Every user and policy, as the nameserver answers ``acl_tables``."""
    return api.AclTablesResponse(
        [user_info(user) for user in tables.users],
        [acl_info(acl) for acl in tables.acls],
        revision,
    )


def tables_of(response: api.AclTablesResponse) -> AclTables:
    """The users and policies of an ``acl_tables`` answer."""
    return AclTables(
        tuple(user_of(user) for user in response.users),
        tuple(acl_of(acl) for acl in response.acls),
    )
