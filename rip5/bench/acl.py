"""``rip5 bench e2e --acl``: the bench's dev cluster with ACL 2.0 on, and a normal user
whose policy allows the bench's topics and group.

Every call of the load generator (and of the official client run) is then
signed as that user, so the broker verifies a signature and evaluates a
policy on each one: the figure to compare with a run without ``--acl`` (the
same sitting; ``--yardstick`` gives the ratio).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from pathlib import Path

from angelia_rpc.cluster_services import NameserverService
from angelia_rpc.nameserver_client import NameserverClient
from protocol import nameserver_api as api
from protocol.acl import Action, PolicyEntry, parse_resource
from protocol.acl_signature import signed_headers
from protocol.acl_wire import entry_info
from rip5.admin_acl import signed_by

BENCH_USER = "bench"
_SUPER_USER_FILE = re.compile(r"NAME:SECRET is in (\S+)")


def super_user_of_dev_log(log_path: Path) -> tuple[str, str]:
    """The super user ``rip5 dev --acl`` made, from the file its output names."""
    found = _SUPER_USER_FILE.search(log_path.read_text())
    if found is None:
        raise RuntimeError(f"rip5 dev printed no ACL super user file (see {log_path})")
    name, _, secret = Path(found.group(1)).read_text().strip().partition(":")
    return name, secret


def create_bench_user(
    nameserver: str, super_user: tuple[str, str], topics: list[str], group: str
) -> tuple[str, str]:
    """Create the normal user ``bench`` allowed to Pub and Sub on ``topics`` and Sub on
    ``group`` (signed by ``super_user``); its access key and secret."""
    secret = secrets.token_hex(16)
    entries = [
        entry_info(PolicyEntry(parse_resource(f"Topic:{t}"), (Action.PUB, Action.SUB)))
        for t in topics
    ]
    entries.append(entry_info(PolicyEntry(parse_resource(f"Group:{group}"), (Action.SUB,))))

    async def create() -> None:
        client = NameserverClient([nameserver])
        signed = signed_by(*super_user)
        try:

            async def user(ns: NameserverService) -> object:
                info = api.UserInfo(BENCH_USER, secret, 0)
                return await ns.create_user(api.UserRequest(info, signed))

            async def policy(ns: NameserverService) -> object:
                info = api.AclInfo(BENCH_USER, entries)
                return await ns.create_acl(api.AclRequest(info, signed))

            await client.call(user)
            await client.call(policy)
        finally:
            await client.close()

    asyncio.run(create())
    return BENCH_USER, secret


def signed(credentials: tuple[str, str] | None) -> api.SignedBy:
    """The signature of a nameserver write made now with ``credentials`` (none without)."""
    if credentials is None:
        return api.SignedBy()
    return signed_by(*credentials)


def headers(credentials: tuple[str, str] | None) -> tuple[tuple[str, str], ...]:
    """The signature headers of a call made now with ``credentials`` (none without)."""
    if credentials is None:
        return ()
    return signed_headers(*credentials, int(time.time() * 1000))
