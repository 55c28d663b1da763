"""``rip5 dev``: a whole local cluster on 127.0.0.1 under one supervisor.

Layout: ``nameservers`` nameservers (one raft group; 1 by default, 3 to
survive the loss of one), ``storage`` storage nodes and ``brokers`` brokers,
each in its own folder under the data directory and on consecutive ports from
the role's base port (or, with ``free_ports``, each on a port that was free
when the plan was made: what tests use, so runs on one machine never clash).
Every child runs as a real process (``python -m rip5 <role> ...``).

Dashboard (``dashboard``, what ``rip5 dev`` asks for): one more child,
``rip5 dashboard`` on ``dashboard_port`` (8088) over the nameservers, charting
the brokers' metrics; with ACL on (``acl_super_user_file``), behind a login
(``--acl``).

Metrics: every child serves its Prometheus metrics on a port that was free
when the plan was made (``--metrics-listen``; :func:`metrics_endpoints`), which
``rip5 dev`` prints once the cluster is ready.

Placement: the nameserver creates the cluster with ``storage_groups`` groups
and a replication factor of ``min(3, storage)``, and places the groups once
that many storage nodes registered; the storage nodes join it (``--nameserver``,
no ``--peers``) and start the replicas it assigns them. Storage nodes and
brokers are given every nameserver and follow whichever leads.
"""

from __future__ import annotations

import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

from angelia_rpc.config import RpcOptions
from angelia_rpc.ports import free_port
from rip5.supervisor import ChildSpec


@dataclass(frozen=True)
class DevLayout:
    """Sizes and base ports of a local cluster."""

    data_dir: Path
    brokers: int = 1
    storage: int = 3
    nameserver_port: int = 9876
    storage_port: int = 7701
    broker_port: int = 8081
    auto_create: bool = True
    log_level: str = "info"
    # Raft groups of the storage cluster: 16 here, not the nameserver's 64 for a cluster
    # of many machines. A group commits one raft entry per round, and a write to many
    # queues joins into an entry only the messages in flight to one group: 128 in flight
    # over 64 groups made 1.5 messages an entry at a million queues, over 16 groups 3.8,
    # and the publish 16-31% faster (docs/scale.md, "Fewer groups on one machine").
    storage_groups: int = 16
    secret: str = ""  # the brokers' receipt-handle secret; empty: a random one per run
    free_ports: bool = False
    nameservers: int = 1
    # The web console (rip5 dashboard) at dashboard_port (a free port with free_ports).
    dashboard: bool = False
    dashboard_port: int = 8088
    # Every child serves its metrics on a free port; False: none does (nothing counted).
    metrics: bool = True
    # The brokers' remoting ports count down from here, so they never meet the gRPC
    # ports counting up from broker_port.
    remoting_port: int = 8080
    replication: str = "raft"  # or "controller" (RIP-44): nameservers and storage nodes
    tier_url: str = ""  # every storage node's --tier-url; empty: no tier
    # ACL 2.0: the file holding NAME:SECRET of the super user the nameserver creates
    # first; set, the brokers check every call (``--acl``). Empty: ACL off.
    acl_super_user_file: str = ""
    # The internal RPC of every child (transport, codec, mutual TLS).
    rpc: RpcOptions = field(default_factory=RpcOptions)


REPLICATION_FACTOR_MAX = 3
REMOTING_FLAG = "--remoting-listen"
METRICS_FLAG = "--metrics-listen"
METRICS_PREFIX = "rip5 dev metrics:"
DASHBOARD_FLAG = "--listen"


def _role_argv(role: str, data_dir: Path, log_level: str, *flags: str) -> tuple[str, ...]:
    return (
        sys.executable,
        "-m",
        "rip5",
        role,
        "--data-dir",
        str(data_dir),
        "--log-level",
        log_level,
        *flags,
    )


def plan(layout: DevLayout) -> list[ChildSpec]:
    """The child processes to start."""

    def port(base: int, i: int = 0) -> int:
        return free_port() if layout.free_ports else base + i

    if layout.nameservers < 1:
        raise ValueError(f"a dev cluster needs at least one nameserver, not {layout.nameservers}")
    listens = [f"127.0.0.1:{port(layout.nameserver_port, i)}" for i in range(layout.nameservers)]
    nameserver = ",".join(listens)  # every one: the others follow the leader
    groups = str(layout.storage_groups)
    factor = str(min(REPLICATION_FACTOR_MAX, layout.storage))
    wanted: list[tuple[str, str, tuple[str, ...]]] = []
    for i, listen in enumerate(listens):
        flags: tuple[str, ...] = (
            "--listen", listen, "--groups", groups, "--replication-factor", factor
        )  # fmt: skip
        if len(listens) > 1:
            peers = ",".join(f"{n}={a}" for n, a in enumerate(listens, 1))
            flags += ("--node-id", str(i + 1), "--peers", peers)
        if layout.replication != "raft":
            flags += ("--replication", layout.replication)
        if layout.acl_super_user_file:
            flags += ("--acl-super-user-file", layout.acl_super_user_file)
        wanted.append(("nameserver" if i == 0 else f"nameserver-{i + 1}", "nameserver", flags))
    # The nameserver assigns groups; the storage nodes check that they agree on the count.
    for i in range(layout.storage):
        wanted.append(
            (
                f"storage-{i + 1}",
                "storage",
                (
                    "--listen",
                    f"127.0.0.1:{port(layout.storage_port, i)}",
                    "--node-id",
                    str(i + 1),
                    "--nameserver",
                    nameserver,
                    "--groups",
                    groups,
                    *(
                        ()
                        if layout.replication == "raft"
                        else ("--replication", layout.replication)
                    ),
                    *(("--tier-url", layout.tier_url) if layout.tier_url else ()),
                ),
            )
        )
    for i in range(layout.brokers):
        wanted.append(
            (
                f"broker-{i + 1}",
                "broker",
                (
                    "--listen",
                    f"127.0.0.1:{port(layout.broker_port, i)}",
                    REMOTING_FLAG,
                    f"127.0.0.1:{port(layout.remoting_port, -i)}",
                    "--nameserver",
                    nameserver,
                    "--auto-create" if layout.auto_create else "--no-auto-create",
                    # The brokers sign what they create (retry topics...) as the super user.
                    *(
                        ("--acl", "--acl-inner-user-file", layout.acl_super_user_file)
                        if layout.acl_super_user_file
                        else ()
                    ),
                ),
            )
        )
    # One secret per dev cluster: every broker signs and checks receipt handles with it.
    # It travels in the environment (not argv, which any local user can read).
    secret_env = {"RIP5_BROKER_SECRET": layout.secret or secrets.token_hex(16)}
    specs = [
        ChildSpec(
            name,
            _role_argv(
                role,
                layout.data_dir / name,
                layout.log_level,
                *flags,
                *layout.rpc.rpc_flags,
                METRICS_FLAG,
                f"127.0.0.1:{free_port()}" if layout.metrics else "",
            ),
            secret_env if role == "broker" else {},
        )
        for name, role, flags in wanted
    ]
    if layout.dashboard:
        brokers = ",".join(v for n, v in metrics_endpoints(specs).items() if n.startswith("broker"))
        flags = (
            DASHBOARD_FLAG,
            f"127.0.0.1:{port(layout.dashboard_port)}",
            "--nameserver",
            nameserver,
            "--broker-metrics",
            brokers,
            *(("--acl",) if layout.acl_super_user_file else ()),
            *(("--tier-url", layout.tier_url) if layout.tier_url else ()),
        )
        specs.append(
            ChildSpec(
                "dashboard",
                _role_argv("dashboard", layout.data_dir / "dashboard", layout.log_level, *flags),
                {},
            )
        )
    return specs


def _flag_values(specs: list[ChildSpec], flag: str) -> dict[str, str]:
    return {spec.name: spec.argv[spec.argv.index(flag) + 1] for spec in specs if flag in spec.argv}


ACL_SUPER_USER = "rip5-admin"


def acl_super_user_file(root: Path) -> Path:
    """The file of ``rip5 dev --acl``'s super user under ``root`` (``NAME:SECRET``, only
    its owner may read it): written with a random secret unless it exists already, so a
    cluster restarted on the same data keeps its super user."""
    path = root / "acl-super-user"
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(f"{ACL_SUPER_USER}:{secrets.token_hex(16)}\n")
    return path


def remoting_endpoints(specs: list[ChildSpec]) -> dict[str, str]:
    """Each broker's remoting endpoint (4.x clients), by child name."""
    return _flag_values(specs, REMOTING_FLAG)


def metrics_endpoints(specs: list[ChildSpec]) -> dict[str, str]:
    """Each child's Prometheus metrics endpoint (host:port, path /metrics), by child name
    (none when the children serve no metrics)."""
    return {name: value for name, value in _flag_values(specs, METRICS_FLAG).items() if value}


def metrics_banner(endpoints: dict[str, str]) -> str:
    """What ``rip5 dev`` prints after :func:`ready_banner`: where each child's metrics are."""
    listed = ", ".join(f"{name} http://{address}/metrics" for name, address in endpoints.items())
    return f"{METRICS_PREFIX} {listed or 'none (--no-metrics)'}"


def parse_metrics_banner(line: str) -> dict[str, str] | None:
    """The endpoints (host:port by child name) a :func:`metrics_banner` line names; None
    if ``line`` is not one."""
    if not line.startswith(METRICS_PREFIX):
        return None
    endpoints: dict[str, str] = {}
    for item in line[len(METRICS_PREFIX) :].strip().split(", "):
        name, _, url = item.partition(" http://")
        if url.endswith("/metrics"):
            endpoints[name] = url[: -len("/metrics")]
    return endpoints


def dashboard_banner(endpoints: dict[str, str]) -> str | None:
    """Where the dashboard serves (from its ready endpoint), if the cluster has one."""
    address = endpoints.get("dashboard")
    return None if address is None else f"rip5 dev dashboard: http://{address}/"


def ready_banner(endpoints: dict[str, str], remoting: dict[str, str] | None = None) -> str:
    """What ``rip5 dev`` prints once every child is ready: the first broker's gRPC
    endpoint, and its remoting endpoint when ``remoting`` names one."""
    brokers = [name for name in endpoints if name.startswith("broker")]
    if brokers:
        remoting_endpoint = (remoting or {}).get(brokers[0])
        also = f"remoting endpoint {remoting_endpoint}; " if remoting_endpoint else ""
        return (
            f"rip5 dev ready: client endpoint {endpoints[brokers[0]]} "
            f"({also}{len(endpoints)} processes; Ctrl-C to stop)"
        )
    running = ", ".join(endpoints) or "none"
    return (
        f"rip5 dev ready: {len(endpoints)} processes running ({running}); no broker, so "
        "no client endpoint; Ctrl-C to stop"
    )
