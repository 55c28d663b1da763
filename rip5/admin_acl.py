"""``rip5 admin user`` and ``rip5 admin acl``: ACL 2.0 users and policies, in the nameserver.

Once a cluster has a user, every change here must be signed by a super user:
``--ak``/``--sk`` (or ``RIP5_ACL_AK``/``RIP5_ACL_SK``; ``rip5 dev --acl`` prints
the file that holds the first super user's). The signature is the official
clients' (``protocol/acl_signature.py``), over the current time, so a
captured request replays only within the nameserver's skew bound.

Policies are written as RocketMQ writes them: ``--resource Topic:orders``
(``Topic:order*`` a prefix, ``Topic:*`` every topic, ``*`` everything),
``--actions Pub,Sub`` (also Create, Update, Delete, Get, List, All),
``--decision Allow|Deny``, ``--source-ip 10.0.0.0/8,...`` (none: anywhere).

Exit codes as ``rip5 admin``: 0 done, 1 refused or unreachable, 2 bad usage.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.table import Table

from protocol import nameserver_api as api
from protocol.acl import (
    Action,
    Decision,
    InvalidAcl,
    PolicyEntry,
    UserType,
    parse_actions,
    parse_decision,
    parse_resource,
    parse_source_cidrs,
    parse_user_type,
)
from protocol.acl_wire import entry_info, entry_of
from protocol.acl_wire import signed_by as signed_at
from rip5.admin import CALL_TIMEOUT_MS, EXIT_USAGE, _print, fail, nameserver_option, run

T = TypeVar("T")

ak_option = click.option(
    "--ak", default="", envvar="RIP5_ACL_AK", help="access key (user) signing the request"
)
sk_option = click.option(
    "--sk", default="", envvar="RIP5_ACL_SK", help="that user's secret", show_envvar=True
)


def signed_by(ak: str, sk: str) -> api.SignedBy:
    """The signature of a request sent now by ``ak`` (unsigned without an access key)."""
    if not ak:
        return api.SignedBy()
    if not sk:
        fail("--ak needs --sk (the user's secret)", EXIT_USAGE)
    return signed_at(ak, sk, int(time.time() * 1000))


def _parsed(parse: Callable[[str], T], text: str) -> T:
    """``parse(text)``; exit 2 naming the mistake."""
    try:
        return parse(text)
    except InvalidAcl as error:
        fail(str(error), EXIT_USAGE)


@click.group()
def user() -> None:
    """create | update | delete | list ACL users."""


@user.command("create")
@click.argument("name")
@click.option("--secret", required=True, help="the user's secret (its clients' secret key)")
@click.option("--type", "user_type", default="Normal", show_default=True, help="Super or Normal")
@nameserver_option
@ak_option
@sk_option
def user_create(name: str, secret: str, user_type: str, nameserver: str, ak: str, sk: str) -> None:
    """Create user NAME."""
    kind = _parsed(parse_user_type, user_type)
    request = api.UserRequest(api.UserInfo(name, secret, int(kind)), signed_by(ak, sk))
    response = run(nameserver, lambda ns: ns.create_user(request, timeout_ms=CALL_TIMEOUT_MS))
    click.echo(f"created user {name} ({kind.name.lower()}) (revision {response.revision})")


@user.command("update")
@click.argument("name")
@click.option("--secret", default="", help="a new secret (default: keep)")
@click.option("--type", "user_type", default="", help="Super or Normal (default: keep)")
@nameserver_option
@ak_option
@sk_option
def user_update(name: str, secret: str, user_type: str, nameserver: str, ak: str, sk: str) -> None:
    """Change user NAME's secret and/or type."""
    number = int(_parsed(parse_user_type, user_type)) if user_type else 0
    request = api.UserRequest(api.UserInfo(name, secret, number), signed_by(ak, sk))
    response = run(nameserver, lambda ns: ns.update_user(request, timeout_ms=CALL_TIMEOUT_MS))
    click.echo(f"updated user {name} (revision {response.revision})")


@user.command("delete")
@click.argument("name")
@nameserver_option
@ak_option
@sk_option
def user_delete(name: str, nameserver: str, ak: str, sk: str) -> None:
    """Delete user NAME and its policy."""
    request = api.UserRequest(api.UserInfo(name, "", 0), signed_by(ak, sk))
    response = run(nameserver, lambda ns: ns.delete_user(request, timeout_ms=CALL_TIMEOUT_MS))
    click.echo(f"deleted user {name} (revision {response.revision})")


@user.command("list")
@nameserver_option
def user_list(nameserver: str) -> None:
    """List users (secrets are not shown)."""
    tables = _tables(nameserver)
    table = Table(title=f"users (revision {tables.revision})")
    for column in ("name", "type"):
        table.add_column(column)
    for info in tables.users:
        table.add_row(info.name, UserType(info.user_type).name.lower())
    _print(table)


@click.group()
def acl() -> None:
    """create | update | delete | list ACL policies."""


def _entry_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """The options of one policy entry."""
    for option in reversed(
        (
            click.option("--resource", required=True, help="Topic:NAME, Topic:PREFIX*, Topic:*, *"),
            click.option("--actions", default="All", show_default=True, help="Pub,Sub,...,All"),
            click.option("--decision", default="Allow", show_default=True, help="Allow or Deny"),
            click.option("--source-ip", default="", help="CIDRs the entry applies from"),
        )
    ):
        function = option(function)
    return function


def _entry(resource: str, actions: str, decision: str, source_ip: str) -> api.PolicyEntryInfo:
    parsed = PolicyEntry(
        _parsed(parse_resource, resource),
        _parsed(parse_actions, actions),
        _parsed(parse_decision, decision),
        _parsed(parse_source_cidrs, source_ip),
    )
    return entry_info(parsed)


def _put_policy(
    subject: str, entry: api.PolicyEntryInfo, nameserver: str, ak: str, sk: str, *, create: bool
) -> None:
    request = api.AclRequest(api.AclInfo(subject, [entry]), signed_by(ak, sk))
    if create:
        response = run(nameserver, lambda ns: ns.create_acl(request, timeout_ms=CALL_TIMEOUT_MS))
    else:
        response = run(nameserver, lambda ns: ns.update_acl(request, timeout_ms=CALL_TIMEOUT_MS))
    done = "created" if create else "updated"
    click.echo(f"{done} the policy of {subject} (revision {response.revision})")


@acl.command("create")
@click.argument("subject")
@_entry_option
@nameserver_option
@ak_option
@sk_option
def acl_create(subject: str, nameserver: str, ak: str, sk: str, **entry: str) -> None:
    """Give user SUBJECT a policy with one entry (more with ``acl update``)."""
    _put_policy(subject, _entry(**entry), nameserver, ak, sk, create=True)


@acl.command("update")
@click.argument("subject")
@_entry_option
@nameserver_option
@ak_option
@sk_option
def acl_update(subject: str, nameserver: str, ak: str, sk: str, **entry: str) -> None:
    """Add (or replace) the entry for one resource in user SUBJECT's policy."""
    _put_policy(subject, _entry(**entry), nameserver, ak, sk, create=False)


@acl.command("delete")
@click.argument("subject")
@click.option("--resource", default="", help="only this resource's entry (default: all)")
@nameserver_option
@ak_option
@sk_option
def acl_delete(subject: str, resource: str, nameserver: str, ak: str, sk: str) -> None:
    """Delete user SUBJECT's policy, or one resource's entry of it."""
    entries = [_entry(resource, "All", "Allow", "")] if resource else []
    request = api.AclRequest(api.AclInfo(subject, entries), signed_by(ak, sk))
    response = run(nameserver, lambda ns: ns.delete_acl(request, timeout_ms=CALL_TIMEOUT_MS))
    click.echo(f"deleted from the policy of {subject} (revision {response.revision})")


@acl.command("list")
@nameserver_option
@click.option("--subject", default="", help="only this user's policy")
def acl_list(nameserver: str, subject: str) -> None:
    """List policies, one row per entry."""
    tables = _tables(nameserver)
    table = Table(title=f"policies (revision {tables.revision})")
    for column in ("subject", "resource", "actions", "decision", "source"):
        table.add_column(column)
    for info in tables.acls:
        if subject and info.subject != subject:
            continue
        for entry in map(entry_of, info.entries):
            table.add_row(
                info.subject,
                entry.resource.text,
                ",".join(Action(a).name.capitalize() for a in entry.actions),
                Decision(entry.decision).name.capitalize(),
                ",".join(entry.source_cidrs) or "any",
            )
    _print(table)


def _tables(nameserver: str) -> api.AclTablesResponse:
    request = api.AclTablesRequest()
    return run(nameserver, lambda ns: ns.acl_tables(request, timeout_ms=CALL_TIMEOUT_MS))
