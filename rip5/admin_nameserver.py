"""``rip5 admin nameserver``: the nameserver group's own members.

``list`` shows each member (voter or learner, the leader marked); ``add``
joins a running nameserver (started with ``--join``) through a raft
membership change (learner, then voter once it caught up); ``remove`` takes
one out (the leader hands leadership away first). Every command follows the
leader among the ``--nameserver`` addresses.

SHELL.
"""

from __future__ import annotations

import click
from rich.table import Table

from angelia_rpc.cluster_services import ControlService
from protocol import control_api as ctl
from rip5.admin import CALL_TIMEOUT_MS, _print, nameserver_option, run_service

MEMBERSHIP_TIMEOUT_MS = 30_000
"""An add waits for the new member to catch up (the nameserver bounds that at 20 s)."""


def members_table(response: ctl.MembersResponse) -> Table:
    """The nameserver group's members."""
    table = Table(title="nameservers")
    for column in ("id", "address", "role", "leader"):
        table.add_column(column)
    for m in response.members:
        table.add_row(str(m.node_id), m.address or "?", m.role, "yes" if m.leader else "")
    return table


@click.group()
def nameserver() -> None:
    """list, add, remove: the nameserver group's members (raft membership changes)."""


@nameserver.command("list")
@nameserver_option
def nameserver_list(nameserver: str) -> None:
    """The nameserver group's members."""
    response = run_service(
        nameserver,
        ControlService,
        lambda s: s.members(ctl.MembersRequest(), timeout_ms=CALL_TIMEOUT_MS),
    )
    _print(members_table(response))


@nameserver.command("add")
@click.argument("node_id", type=click.IntRange(1, 1_000_000))
@click.argument("address")
@nameserver_option
def nameserver_add(node_id: int, address: str, nameserver: str) -> None:
    """Add nameserver NODE_ID serving at ADDRESS (host:port; start it first with --join)."""
    request = ctl.AddMemberRequest(node_id, address)
    response = run_service(
        nameserver,
        ControlService,
        lambda s: s.add_member(request, timeout_ms=MEMBERSHIP_TIMEOUT_MS),
    )
    click.echo(f"added nameserver {node_id} at {address}")
    _print(members_table(response))


@nameserver.command("remove")
@click.argument("node_id", type=click.IntRange(1, 1_000_000))
@nameserver_option
def nameserver_remove(node_id: int, nameserver: str) -> None:
    """Remove nameserver NODE_ID from the group (then stop its process)."""
    request = ctl.RemoveMemberRequest(node_id)
    response = run_service(
        nameserver,
        ControlService,
        lambda s: s.remove_member(request, timeout_ms=MEMBERSHIP_TIMEOUT_MS),
    )
    click.echo(f"removed nameserver {node_id}")
    _print(members_table(response))
