"""Nameserver membership changes on real processes, through the control service that
``rip5 admin nameserver`` calls (its CLI: tests/unit/test_admin_nameserver_cli.py).

Three nameservers; a fourth is started with ``--join`` and added (a learner,
then a voter); the leader is removed (it hands leadership away first) and
its process stopped. The group then is {2 of the first three, the fourth}:
one more of the original nodes is SIGKILLed, and writes still commit, which
they can only with the fourth node's vote. Metadata written before the
changes is still there.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from angelia_rpc import AngeliaError
from angelia_rpc.cluster_services import ControlService
from angelia_rpc.ports import free_port
from protocol import control_api as ctl
from protocol import nameserver_api as api
from rip5.admin import NameserverClient
from tests.integration.test_nameserver import RIP5, Nameservers
from tests.waiting import wait_until

T = TypeVar("T")


def _control(cluster: Nameservers, method: Callable[[ControlService], Awaitable[T]]) -> T:
    """One call on the leader, in process (the CLI is exercised by add and remove)."""

    async def call() -> T:
        client = NameserverClient(list(cluster.addresses.values()))
        try:
            return await client.call_service(ControlService, method)
        finally:
            await client.close()

    return asyncio.run(call())


def _members(cluster: Nameservers) -> dict[int, tuple[str, bool]]:
    """node id -> (role, leader?)."""
    response = _control(cluster, lambda s: s.members(ctl.MembersRequest(), timeout_ms=5000))
    return {m.node_id: (m.role, m.leader) for m in response.members}


def _create_topic(cluster: Nameservers, name: str) -> bool:
    async def call() -> None:
        client = NameserverClient(list(cluster.addresses.values()))
        try:
            request = api.CreateTopicRequest(name, "DefaultCluster", 2)
            await client.call(lambda s: s.create_topic(request, timeout_ms=3000))
        finally:
            await client.close()

    try:
        asyncio.run(call())
    except AngeliaError:
        return False
    return True


def _leader(cluster: Nameservers) -> int:
    return next((n for n, (_, leads) in _members(cluster).items() if leads), 0)


def _start_joining(cluster: Nameservers, node_id: int) -> None:
    cluster.addresses[node_id] = f"127.0.0.1:{free_port()}"
    peers = ",".join(f"{n}={a}" for n, a in cluster.addresses.items())
    args = [
        *RIP5,
        "nameserver",
        "--data-dir",
        str(cluster.root / f"ns{node_id}"),
        "--listen",
        cluster.addresses[node_id],
        "--node-id",
        str(node_id),
        "--groups",
        "4",
        "--peers",
        peers,
        "--join",
    ]
    log = open(cluster.root / f"ns{node_id}.log", "ab")  # noqa: SIM115 - the child owns it
    cluster.processes[node_id] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    log.close()


def test_add_a_fourth_nameserver_then_remove_the_leader(tmp_path: Path) -> None:
    cluster = Nameservers(tmp_path, 3)
    try:
        for node_id in (1, 2, 3):
            cluster.start(node_id)
        wait_until(
            lambda: _create_topic(cluster, "Before"),
            timeout_s=60,
            what="a leader that creates a topic",
        )
        assert {n: role for n, (role, _) in _members(cluster).items()} == {
            1: "voter",
            2: "voter",
            3: "voter",
        }

        _start_joining(cluster, 4)
        added = _control(
            cluster,
            lambda s: s.add_member(
                ctl.AddMemberRequest(4, cluster.addresses[4]), timeout_ms=30_000
            ),
        )
        assert [(m.node_id, m.address, m.role) for m in added.members if m.node_id == 4] == [
            (4, cluster.addresses[4], ctl.ROLE_VOTER)
        ]
        members = _members(cluster)
        assert {n: role for n, (role, _) in members.items()} == {
            1: "voter",
            2: "voter",
            3: "voter",
            4: "voter",
        }
        again = _control(
            cluster,
            lambda s: s.add_member(ctl.AddMemberRequest(4, cluster.addresses[4]), timeout_ms=5000),
        )
        assert len(again.members) == 4  # a retried add is safe

        leader = _leader(cluster)
        assert leader in (1, 2, 3, 4)
        removed = leader if leader != 4 else 1
        _control(
            cluster,
            lambda s: s.remove_member(ctl.RemoveMemberRequest(removed), timeout_ms=30_000),
        )
        members = _members(cluster)
        assert sorted(members) == sorted({1, 2, 3, 4} - {removed})
        cluster.kill(removed)

        # Of the three voters left, kill one of the original nodes: the other and the
        # fourth node must form the quorum.
        victim = min({1, 2, 3} - {removed})
        cluster.kill(victim)
        wait_until(
            lambda: _create_topic(cluster, "After"),
            timeout_s=30,
            what="a write committed by the remaining original node and the fourth",
        )
        assert not _create_topic(cluster, "Before")  # it is still there: ALREADY_EXISTS
        assert _leader(cluster) in ({1, 2, 3, 4} - {removed, victim})

        with pytest.raises(AngeliaError, match="nameserver 99 is not a member"):
            _control(
                cluster, lambda s: s.remove_member(ctl.RemoveMemberRequest(99), timeout_ms=5000)
            )
    finally:
        cluster.stop_all()
