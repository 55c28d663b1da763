"""ACL 2.0 end to end: users and policies made with `rip5 admin`, enforced by the broker
on the official Python client's signed calls, and still with the nameserver down.

One cluster for the module (1 nameserver started with a super user, 1 storage
node, 1 broker with ``--acl``). The users and policies are created with the
admin CLI, signed by the super user; the client runs in its own interpreter
(``tests/e2e/acl_client.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from angelia_rpc import AngeliaError
from angelia_rpc.cluster_services import NameserverService
from angelia_rpc.config import RpcOptions
from angelia_rpc.nameserver_client import NameserverClient
from protocol import errors
from protocol import nameserver_api as api
from protocol.acl import PolicyEntry, parse_actions, parse_decision, parse_resource
from protocol.acl_wire import entry_info
from protocol.rocketmq.v2 import definition_pb2 as pb
from rip5.admin_acl import signed_by
from tests.contract.test_official_client import run_official
from tests.contract.test_remoting_clients import CPP_SITE
from tests.e2e.cluster import LocalCluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CPP_ACL_CLIENT = Path(__file__).with_name("acl_cpp_client.py")
SUPER = ("root", "r00t-secret")
NORMAL = 1


def admin(
    cluster: LocalCluster, *args: str, signed: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``rip5 admin ARGS`` against the cluster (signed by the super user)."""
    credentials = ["--ak", SUPER[0], "--sk", SUPER[1]] if signed else []
    return subprocess.run(
        [sys.executable, "-m", "rip5", "admin", *args, "--nameserver",
         cluster.nameserver_address, *credentials],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "RIP5_RPC_TRANSPORT": cluster.rpc.rpc_transport,
             "RIP5_RPC_CODEC": cluster.rpc.rpc_codec},
    )  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's cluster, its topics, groups, users and policies."""
    root = tmp_path_factory.mktemp("acl")
    super_file = root / "super-user"
    super_file.write_text(f"{SUPER[0]}:{SUPER[1]}\n")
    local = LocalCluster(
        root / "cluster",
        storage=1,
        groups=2,
        broker_flags=(
            "--acl",
            "--acl-refresh-ms",
            "200",
            "--acl-inner-user-file",
            str(super_file),
        ),
        nameserver_flags=(
            "--acl-super-user-file",
            str(super_file),
            "--replication-factor",
            "1",
        ),
        # The internal RPC on http2 with the json codec (every process, and the admin CLI
        # through RIP5_RPC_*): test_rpc_transports.py covers grpc, every other cluster tcp.
        rpc=RpcOptions("http2", "json"),
    )
    try:
        local.start()
        local.create(
            {"acl-orders": (2, NORMAL), "acl-other": (2, NORMAL)},
            {"acl-readers": (False, 3)},
            signed_by(*SUPER),
        )
        # The first user through the CLI (its signing), the rest through the API.
        done = admin(local, "user", "create", "writer", "--secret", "w-secret")
        assert done.returncode == 0, done.stderr
        asyncio.run(_grant(local))
        yield local
    finally:
        codes = local.stop()
    died = {name: code for name, code in codes.items() if name != "nameserver" and code != 0}
    assert not died, f"processes did not stop cleanly: {died} (logs in {local.root})"


def _entry(resource: str, actions: str, decision: str = "Allow") -> api.PolicyEntryInfo:
    return entry_info(
        PolicyEntry(parse_resource(resource), parse_actions(actions), parse_decision(decision))
    )


async def _grant(cluster: LocalCluster) -> None:
    """The users and policies of the tests, signed by the super user."""
    signed = signed_by(*SUPER)
    nameserver = NameserverClient(cluster.nameserver_addresses, cluster.rpc.rpc_config())
    calls: list[Callable[[NameserverService], Awaitable[object]]] = [
        *(
            lambda ns, name=name: ns.create_user(
                api.UserRequest(api.UserInfo(name, f"{name[0]}-secret", 0), signed)
            )
            for name in ("reader", "mixed")
        ),
        *(
            lambda ns, subject=subject, entries=entries: ns.update_acl(
                api.AclRequest(api.AclInfo(subject, entries), signed)
            )
            for subject, entries in (
                ("writer", [_entry("Topic:acl-orders", "Pub")]),
                ("reader", [_entry("Topic:acl-*", "Sub"), _entry("Group:acl-readers", "Sub")]),
                (
                    "mixed",
                    [_entry("Topic:acl-*", "Pub,Sub"), _entry("Topic:acl-orders", "Pub", "Deny")],
                ),
            )
        ),
    ]
    try:
        for call in calls:
            await nameserver.call(call)
    finally:
        await nameserver.close()


def run_cpp_script(script: Path, *args: str, home: Path) -> dict[str, Any]:
    """A script of the classic C++ client (installed by ``make remoting-clients``)."""
    assert (CPP_SITE / "rocketmq" / "librocketmq.so").exists(), (
        f"the 4.x client in {CPP_SITE} is not installed: run `make remoting-clients`"
    )
    result = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=home, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "HOME": str(home), "PYTHONPATH": str(CPP_SITE)},
    )  # fmt: skip
    assert result.returncode == 0, f"client failed:\n{result.stdout}\n{result.stderr}"
    observed: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return observed


def client(cluster: LocalCluster, scenario: str, *args: str) -> Any:
    """One scenario of the official client, against the broker."""
    home = cluster.root / "home"
    home.mkdir(exist_ok=True)
    argv = ["-m", "tests.e2e.acl_client", scenario, str(cluster.broker_port()), *args]
    return run_official(argv, home, timeout_s=120)


def test_admin_changes_need_a_super_users_signature(cluster: LocalCluster) -> None:
    unsigned = admin(cluster, "user", "create", "eve", "--secret", "x", signed=False)
    assert unsigned.returncode == 1
    assert "UNAUTHENTICATED" in unsigned.stderr
    listed = admin(cluster, "acl", "list", "--subject", "mixed", signed=False)
    assert listed.returncode == 0
    assert "Topic:acl-orders" in listed.stdout
    assert "Deny" in listed.stdout

    writer = signed_by("writer", "w-secret")

    async def call(method: Callable[[NameserverService], Awaitable[object]]) -> None:
        nameserver = NameserverClient(cluster.nameserver_addresses, cluster.rpc.rpc_config())
        try:
            await nameserver.call(method)
        finally:
            await nameserver.close()

    user = api.UserRequest(api.UserInfo("eve", "x", 0), writer)
    with pytest.raises(AngeliaError, match="not a super user") as refused:
        asyncio.run(call(lambda ns: ns.create_user(user)))
    assert refused.value.code is errors.PERMISSION_DENIED
    # Topics and groups: a user needs Create (Update, Delete) on them; unsigned is refused.
    topic = api.CreateTopicRequest("acl-new", "DefaultCluster", 1, signed=writer)
    with pytest.raises(AngeliaError, match="'writer' may not Create on Topic:acl-new"):
        asyncio.run(call(lambda ns: ns.create_topic(topic)))
    unsigned_delete = admin(cluster, "topic", "delete", "acl-other", signed=False)
    assert unsigned_delete.returncode == 1
    assert "UNAUTHENTICATED" in unsigned_delete.stderr


def test_allowed_pub_and_sub_work(cluster: LocalCluster) -> None:
    (sent,) = client(cluster, "sends", "writer", "w-secret", "acl-orders")
    assert sent["sent"], sent
    got = client(cluster, "receive", "reader", "r-secret", "acl-orders", "acl-readers", "1")
    assert got["received"] == ["from writer"], got


def test_a_missing_permission_is_forbidden_naming_resource_and_action(
    cluster: LocalCluster,
) -> None:
    # The reader may Sub, so it may look the route up, but not Pub.
    (seen,) = client(cluster, "sends", "reader", "r-secret", "acl-orders")
    assert seen["code"] == pb.FORBIDDEN, seen
    assert "may not Pub on Topic:acl-orders" in seen["message"]


def test_a_wrong_secret_is_unauthorized(cluster: LocalCluster) -> None:
    # The Producer cannot even look the route up, and says only that.
    (seen,) = client(cluster, "sends", "writer", "not-the-secret", "acl-orders")
    assert seen.get("sent") is None, seen
    assert "route" in seen["message"]
    # The statuses behind it, for calls signed by the client's own code.
    wrong, unknown, right = client(
        cluster, "signed_sends",
        "writer", "not-the-secret", "acl-orders",
        "nobody", "x", "acl-orders",
        "writer", "w-secret", "acl-orders",
    )  # fmt: skip
    assert wrong["code"] == pb.UNAUTHORIZED, wrong
    assert "signature mismatch for user 'writer'" in wrong["message"]
    assert unknown["code"] == pb.UNAUTHORIZED, unknown
    assert "'nobody' does not exist" in unknown["message"]
    assert right["code"] == pb.OK, right


def test_a_deny_beats_the_allow_that_covers_it(cluster: LocalCluster) -> None:
    denied, allowed = client(
        cluster, "sends", "mixed", "m-secret", "acl-orders", "mixed", "m-secret", "acl-other"
    )
    assert denied["code"] == pb.FORBIDDEN, denied
    assert "denied by the policy entry for Topic:acl-orders" in denied["message"]
    assert allowed["sent"], allowed


def test_classic_clients_sign_on_the_remoting_port(cluster: LocalCluster) -> None:
    """The C++ client's session credentials (AccessKey/Signature ext fields)."""

    def cpp(ak: str, sk: str, sitting: str) -> tuple[dict[str, Any], str]:
        """The send's observation, and the client's log (where it writes the remarks
        of the responses it retried)."""
        home = cluster.root / f"cpp-{sitting}"
        home.mkdir()
        namesrv = cluster.remoting_addresses[0]
        seen = run_cpp_script(CPP_ACL_CLIENT, namesrv, "acl-orders", ak, sk, home=home)
        logs = "".join(p.read_text() for p in (home / "logs").rglob("*") if p.is_file())
        return seen, logs

    allowed, _ = cpp("writer", "w-secret", "allowed")
    assert allowed["status"] == 0, allowed  # SendStatus.OK
    # The C++ client reports every refusal as a missing route after its retries; the
    # broker's answers (NO_PERMISSION, 16) are in its log.
    wrong, wrong_log = cpp("writer", "not-the-secret", "wrong")
    assert wrong["status"] is None
    assert "signature mismatch for user 'writer' (wrong secret?),16" in wrong_log
    forbidden, forbidden_log = cpp("reader", "r-secret", "forbidden")
    assert forbidden["status"] is None
    assert "user 'reader' may not Pub on Topic:acl-orders" in forbidden_log
    assert "error code:16" in forbidden_log


def test_enforcement_goes_on_with_the_nameserver_down(cluster: LocalCluster) -> None:
    assert cluster.nameserver is not None
    cluster.nameserver.kill()
    sent, refused, forbidden = client(
        cluster, "signed_sends",
        "writer", "w-secret", "acl-orders",
        "writer", "not-the-secret", "acl-orders",
        "reader", "r-secret", "acl-orders",
    )  # fmt: skip
    assert sent["code"] == pb.OK, sent
    assert refused["code"] == pb.UNAUTHORIZED, refused
    assert forbidden["code"] == pb.FORBIDDEN, forbidden
