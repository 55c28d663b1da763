"""Nameserver membership changes on real processes, through ``rip5 admin nameserver``.

Three nameservers; a fourth is started with ``--join`` and added (a learner,
then a voter); the leader is removed (it hands leadership away first) and
its process stopped. The group then is {2 of the first three, the fourth}:
one more of the original nodes is SIGKILLed, and writes still commit, which
they can only with the fourth node's vote. Metadata written before the
changes is still there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from angelia_rpc.ports import free_port
from tests.integration.test_nameserver import RIP5, Nameservers, admin
from tests.waiting import wait_until


def _members(cluster: Nameservers) -> dict[int, tuple[str, bool]] | None:
    """node id -> (role, leader?) from ``rip5 admin nameserver list``; None while it fails."""
    listed = admin(cluster, "nameserver", "list")
    if listed.returncode != 0:
        return None
    members: dict[int, tuple[str, bool]] = {}
    for line in listed.stdout.splitlines():
        match = re.match(r"\W*(\d+)\W+(\S+)\W+(voter|learner)\W*(yes)?", line)
        if match:
            members[int(match[1])] = (match[3], match[4] == "yes")
    return members


def _leader(cluster: Nameservers) -> int:
    members = _members(cluster) or {}
    return next((n for n, (_, leads) in members.items() if leads), 0)


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
            lambda: admin(cluster, "topic", "create", "Before", "--queues", "2").returncode == 0,
            timeout_s=60,
            what="a leader that creates a topic",
        )
        assert _members(cluster) is not None
        assert {n: role for n, (role, _) in (_members(cluster) or {}).items()} == {
            1: "voter",
            2: "voter",
            3: "voter",
        }

        _start_joining(cluster, 4)
        added = admin(cluster, "nameserver", "add", "4", cluster.addresses[4])
        assert added.returncode == 0, added.stderr
        assert "added nameserver 4" in added.stdout
        members = _members(cluster) or {}
        assert {n: role for n, (role, _) in members.items()} == {
            1: "voter",
            2: "voter",
            3: "voter",
            4: "voter",
        }
        again = admin(cluster, "nameserver", "add", "4", cluster.addresses[4])
        assert again.returncode == 0, again.stderr  # a retried add is safe

        leader = _leader(cluster)
        assert leader in (1, 2, 3, 4)
        removed = leader if leader != 4 else 1
        gone = admin(cluster, "nameserver", "remove", str(removed))
        assert gone.returncode == 0, gone.stderr
        members = _members(cluster) or {}
        assert sorted(members) == sorted({1, 2, 3, 4} - {removed})
        cluster.kill(removed)

        # Of the three voters left, kill one of the original nodes: the other and the
        # fourth node must form the quorum.
        victim = min({1, 2, 3} - {removed})
        cluster.kill(victim)
        wait_until(
            lambda: admin(cluster, "topic", "create", "After", "--queues", "2").returncode == 0,
            timeout_s=30,
            what="a write committed by the remaining original node and the fourth",
        )
        described = admin(cluster, "topic", "describe", "Before")
        assert described.returncode == 0, described.stderr
        assert _leader(cluster) in ({1, 2, 3, 4} - {removed, victim})

        refused = admin(cluster, "nameserver", "remove", "99")
        assert refused.returncode == 1
        assert "not a member" in refused.stderr
    finally:
        cluster.stop_all()
