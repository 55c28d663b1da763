"""``rip5 admin``: topics, consumer groups and cluster status, through the nameserver.

Every command talks to the nameserver over Angelia (``--nameserver``, one or
more comma-separated host:port; a follower's NOT_LEADER answer is followed to
the leader it names, an unreachable address to the next one). Names are
checked with RocketMQ's rules before anything is sent.

Exit codes: 0 done; 1 the nameserver refused the request or could not be
reached (the message says which and why); 2 bad usage (an invalid name or
option value).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import NoReturn, TypeVar

import click
import uvloop
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress
from rich.table import Table

from angelia_rpc import AngeliaError, RpcConfig
from angelia_rpc.cluster_services import ControlService, NameserverService
from angelia_rpc.nameserver_client import NameserverClient, parse_addresses
from angelia_rpc.service import Service
from nameserver import names
from nameserver.errors import NameserverError
from protocol import control_api as ctl
from protocol import errors
from protocol import nameserver_api as api
from protocol.acl_wire import signed_by
from protocol.vocabulary import MessageType, Permission
from rip5 import rpc_environment, topic_file
from rip5.admin_storage import ClusterAdmin
from rip5.units import ago, duration_text, size_text

EXIT_REFUSED = 1
EXIT_USAGE = 2
CALL_TIMEOUT_MS = 5000
DEFAULT_CLUSTER = "DefaultCluster"

# ``--type`` takes RocketMQ's enum spelling in any case (NORMAL, FIFO, DELAY, TRANSACTION).
MESSAGE_TYPES = {kind.name.lower(): int(kind) for kind in MessageType}
PERMISSIONS = {
    "none": int(Permission.NONE),
    "w": int(Permission.WRITE),
    "r": int(Permission.READ),
    "rw": int(Permission.READ_WRITE),
}
MESSAGE_TYPE_CHOICE = click.Choice(sorted(MESSAGE_TYPES), case_sensitive=False)
T = TypeVar("T")
S = TypeVar("S", bound=Service)


def fail(message: str, code: int) -> NoReturn:
    """Print ``rip5: message`` on stderr and exit with ``code``."""
    click.echo(f"rip5: {message}", err=True)
    sys.exit(code)


def parse_nameservers(text: str) -> list[str]:
    """The ``--nameserver`` addresses; exit 2 naming a malformed one."""
    try:
        return parse_addresses(text)
    except ValueError as exc:
        fail(f"--nameserver: {exc}", EXIT_USAGE)


def check_name(validate: Callable[[str], None], name: str) -> None:
    """Check ``name`` with a RocketMQ naming rule; exit 2 with the reason if it breaks it."""
    try:
        validate(name)
    except NameserverError as exc:
        fail(str(exc), EXIT_USAGE)


def run(nameserver: str, method: Callable[[NameserverService], Awaitable[T]]) -> T:
    """Call the nameserver once (following the leader); exit 1 with the reason on failure."""
    return run_service(nameserver, NameserverService, method)


def run_service(nameserver: str, service: type[S], method: Callable[[S], Awaitable[T]]) -> T:
    """:func:`run`, for another service the nameservers serve (``ControlService``)."""
    return run_with_client(nameserver, lambda client: client.call_service(service, method))


def run_with_client(nameserver: str, body: Callable[[NameserverClient], Awaitable[T]]) -> T:
    """Run ``body`` with a client of the nameservers (several calls, each following the
    leader); exit 1 with the reason if a call fails."""
    addresses = parse_nameservers(nameserver)

    async def go() -> T:
        client = NameserverClient(addresses, rpc_config_from_environment())
        try:
            return await body(client)
        finally:
            await client.close()

    try:
        return uvloop.run(go())
    except AngeliaError as exc:
        if exc.code in (errors.UNAVAILABLE, errors.DEADLINE_EXCEEDED):
            fail(f"cannot reach the nameserver at {nameserver}: {exc.message}", EXIT_REFUSED)
        fail(f"the nameserver refused: {exc.code.name}: {exc.message}", EXIT_REFUSED)


def rpc_config_from_environment() -> RpcConfig:
    """The internal RPC a cluster speaks, for admin commands (``rip5/rpc_environment.py``:
    ``RIP5_RPC_*``); exit 2 if the variables do not fit."""
    try:
        return rpc_environment.rpc_config_from_environment()
    except (ValueError, AngeliaError) as error:
        fail(f"RIP5_RPC_*: {error}", EXIT_USAGE)


def signed_from_environment() -> api.SignedBy:
    """The signature of a write, as the user ``RIP5_ACL_AK`` with secret ``RIP5_ACL_SK``
    (unsigned without them: enough while the cluster has no ACL user)."""
    access_key = os.environ.get("RIP5_ACL_AK", "")
    if not access_key:
        return api.SignedBy()
    return signed_by(access_key, os.environ.get("RIP5_ACL_SK", ""), int(time.time() * 1000))


console = Console(width=160)


def _print(table: Table) -> None:
    console.print(table)


def _name_of(mapping: dict[str, int], number: int) -> str:
    for name, value in mapping.items():
        if value == number:
            return name
    return str(number)


def topics_table(topics: list[api.TopicInfo], title: str = "topics") -> Table:
    """Topics as a table."""
    table = Table(title=title)
    columns = (
        "name",
        "cluster",
        "queues",
        "type",
        "retention",
        "perm",
        "limits",
        "read_replicas",
    )
    for column in columns:
        table.add_column(column)
    for t in topics:
        table.add_row(
            t.name,
            t.cluster,
            str(t.queue_count),
            _name_of(MESSAGE_TYPES, t.message_type),
            duration_text(t.retention_ms) if t.retention_ms else "default",
            _name_of(PERMISSIONS, t.permission),
            _limits(t),
            ON_OFF_NAMES[t.read_replicas],
        )
    return table


def _limits(topic: api.TopicInfo) -> str:
    """The retention limits beside retention_ms that are set (0 is none)."""
    limits = [
        f"{what} {text(value)}"
        for what, value, text in (
            ("bytes", topic.retention_bytes, size_text),
            ("local", topic.local_retention_ms, duration_text),
            ("local bytes", topic.local_retention_bytes, size_text),
        )
        if value
    ]
    return " ".join(limits) or "-"


_RETENTION_LIMITS = (
    ("--retention-bytes", "most bytes a queue keeps, the tier's too (0: no limit)"),
    (
        "--local-retention-ms",
        "how long messages stay on the storage nodes' disks once in the tier "
        "(0: as --retention-ms)",
    ),
    (
        "--local-retention-bytes",
        "most bytes a queue keeps on the storage nodes' disks once in the tier "
        "(0: as --retention-bytes)",
    ),
)


ON_OFF = {"on": True, "off": False}
ON_OFF_NAMES = {value: name for name, value in ON_OFF.items()}
READ_REPLICAS_HELP = (
    "spread the topic's offset reads (pull consumers) over the replicas of each queue's "
    "raft group, the leader included, instead of all to the leader (docs/scale.md)"
)


def retention_options(command: Callable[..., None]) -> Callable[..., None]:
    """The retention limits beside ``--retention-ms`` (0 means none)."""
    for flag, help_text in reversed(_RETENTION_LIMITS):
        command = click.option(flag, type=click.IntRange(0), default=None, help=help_text)(command)
    return command


def groups_table(groups: list[api.ConsumerGroupInfo], title: str = "consumer groups") -> Table:
    """Consumer groups as a table."""
    table = Table(title=title)
    for column in ("name", "cluster", "fifo", "max_attempts", "retry"):
        table.add_column(column)
    for g in groups:
        retry = (
            f"levels {len(g.retry.backoff_ms)} ({g.retry.backoff_ms[0]} ms ..)"
            if g.retry.backoff_ms
            else f"exp {g.retry.initial_backoff_ms}..{g.retry.max_backoff_ms} ms "
            f"x{g.retry.multiplier:g}"
        )
        table.add_row(g.name, g.cluster, str(g.fifo).lower(), str(g.max_delivery_attempts), retry)
    return table


nameserver_option = click.option(
    "--nameserver",
    default="127.0.0.1:9876",
    show_default=True,
    envvar="RIP5_NAMESERVER",
    help="host:port of the nameserver (comma-separated for several replicas)",
)
cluster_option = click.option(
    "--cluster", default=DEFAULT_CLUSTER, show_default=True, help="the storage cluster"
)
json_option = click.option("--json", "as_json", is_flag=True, help="print JSON for machines")


@click.group()
def topic() -> None:
    """create | update | delete | list | describe topics."""


@topic.command("create")
@click.argument("name", required=False)
@nameserver_option
@cluster_option
@click.option("--queues", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option(
    "--type",
    "message_type",
    type=MESSAGE_TYPE_CHOICE,
    default="normal",
    show_default=True,
    help="what the topic carries, in any case (NORMAL, FIFO, DELAY, TRANSACTION)",
)
@click.option("--retention-ms", type=click.IntRange(1), default=None, help="default: 3 days")
@retention_options
@click.option("--perm", type=click.Choice(sorted(PERMISSIONS)), default="rw", show_default=True)
@click.option(
    "--read-replicas",
    type=click.Choice(sorted(ON_OFF)),
    default="off",
    show_default=True,
    help=READ_REPLICAS_HELP,
)
@click.option(
    "--from-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="create every topic of FILE instead of NAME: lines name[,queues[,type]] (CSV), "
    "or [[topic]] tables if FILE ends in .toml; --queues and --type fill what a line "
    "leaves out; sent in batches of 1,000, each all or nothing",
)
@click.option(
    "--skip-existing",
    is_flag=True,
    help="with --from-file: leave topics that exist already as they are (a rerun carries on)",
)
@click.option(
    "--json", "as_json", is_flag=True, help="with --from-file: print a JSON summary, no progress"
)
def topic_create(
    name: str | None,
    nameserver: str,
    cluster: str,
    queues: int,
    message_type: str,
    retention_ms: int | None,
    retention_bytes: int | None,
    local_retention_ms: int | None,
    local_retention_bytes: int | None,
    perm: str,
    read_replicas: str,
    from_file: Path | None,
    skip_existing: bool,
    as_json: bool,
) -> None:
    """Create topic NAME, or every topic of a file (--from-file FILE)."""
    request = api.CreateTopicRequest(
        name or "",
        cluster,
        queues,
        MESSAGE_TYPES[message_type],
        retention_ms or 0,
        PERMISSIONS[perm],
        retention_bytes or 0,
        local_retention_ms or 0,
        local_retention_bytes or 0,
        read_replicas=ON_OFF[read_replicas],
    )
    if from_file is not None:
        if name:
            fail("give NAME or --from-file FILE, not both", EXIT_USAGE)
        _create_from_file(nameserver, from_file, request, skip_existing, as_json)
        return
    if name is None:
        fail("give the topic's NAME, or --from-file FILE", EXIT_USAGE)
    check_name(names.validate_topic, name)
    request = replace(request, signed=signed_from_environment())
    response = run(nameserver, lambda ns: ns.create_topic(request, timeout_ms=CALL_TIMEOUT_MS))
    _print(topics_table([response.topic], f"created (revision {response.revision})"))


def _create_from_file(
    nameserver: str,
    path: Path,
    template: api.CreateTopicRequest,
    skip_existing: bool,
    as_json: bool,
) -> None:
    try:
        topics = topic_file.parse_topic_file(
            path.read_text(encoding="utf-8"), path.suffix.lower() == ".toml", template
        )
    except (topic_file.TopicFileError, UnicodeDecodeError) as error:
        fail(f"{path}: {error}", EXIT_USAGE)
    if not topics:
        fail(f"{path}: no topics in it", EXIT_USAGE)
    started = time.monotonic()
    with Progress(
        *Progress.get_default_columns(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        disable=as_json,
    ) as progress:
        task = progress.add_task("creating topics", total=len(topics))
        done = run_with_client(
            nameserver,
            lambda client: topic_file.create_topics(
                client,
                topics,
                skip_existing=skip_existing,
                signed=signed_from_environment,
                on_batch=lambda sent: progress.update(task, completed=sent),
            ),
        )
    seconds = time.monotonic() - started
    summary = {
        "file": str(path),
        "topics": done.sent,
        "created": done.created,
        "skipped": done.sent - done.created,
        "revision": done.revision,
        "seconds": round(seconds, 3),
    }
    if as_json:
        click.echo(json.dumps(summary))
    else:
        click.echo(
            f"created {done.created:,} of {done.sent:,} topics "
            f"({done.sent - done.created:,} existed) in {seconds:.1f} s, "
            f"revision {done.revision}"
        )


@topic.command("update")
@click.argument("name")
@nameserver_option
@click.option("--queues", type=click.IntRange(1, 1024), default=None, help="may only grow")
@click.option(
    "--type",
    "message_type",
    type=MESSAGE_TYPE_CHOICE,
    default=None,
    help="what the topic carries, in any case (NORMAL, FIFO, DELAY, TRANSACTION)",
)
@click.option("--retention-ms", type=click.IntRange(1), default=None)
@retention_options
@click.option("--perm", type=click.Choice(sorted(PERMISSIONS)), default=None)
@click.option(
    "--read-replicas", type=click.Choice(sorted(ON_OFF)), default=None, help=READ_REPLICAS_HELP
)
def topic_update(
    name: str,
    nameserver: str,
    queues: int | None,
    message_type: str | None,
    retention_ms: int | None,
    retention_bytes: int | None,
    local_retention_ms: int | None,
    local_retention_bytes: int | None,
    perm: str | None,
    read_replicas: str | None,
) -> None:
    """Change topic NAME (only the options given)."""
    check_name(names.validate_topic, name)
    request = api.UpdateTopicRequest(
        name,
        queues,
        None if message_type is None else MESSAGE_TYPES[message_type],
        retention_ms,
        None if perm is None else PERMISSIONS[perm],
        retention_bytes,
        local_retention_ms,
        local_retention_bytes,
        signed_from_environment(),
        None if read_replicas is None else ON_OFF[read_replicas],
    )
    response = run(nameserver, lambda ns: ns.update_topic(request, timeout_ms=CALL_TIMEOUT_MS))
    _print(topics_table([response.topic], f"updated (revision {response.revision})"))


@topic.command("delete")
@click.argument("name")
@nameserver_option
@cluster_option
@click.option(
    "--wait-ms",
    type=click.IntRange(0),
    default=60_000,
    show_default=True,
    help="wait at most this long until the storage groups dropped the topic's data "
    "(0: do not wait)",
)
def topic_delete(name: str, nameserver: str, cluster: str, wait_ms: int) -> None:
    """Delete topic NAME: its metadata at once; the leaders of the storage groups then drop
    its messages, offsets and consumer state in their next retention round (``rip5 storage
    --retention-check-ms``), which this waits for. A topic created again with the same name
    after that starts empty (one created again sooner keeps the old messages)."""
    check_name(names.validate_topic, name)
    addresses = parse_nameservers(nameserver)
    try:
        revision, dropped = uvloop.run(
            ClusterAdmin.using(
                addresses,
                cluster,
                lambda a: a.delete_topic(name, wait_ms, signed_from_environment()),
            )
        )
    except AngeliaError as exc:
        if exc.code in (errors.UNAVAILABLE, errors.DEADLINE_EXCEEDED):
            fail(f"cannot reach the cluster: {exc.message}", EXIT_REFUSED)
        fail(f"the cluster refused: {exc.code.name}: {exc.message}", EXIT_REFUSED)
    click.echo(f"deleted topic {name} (revision {revision})")
    if wait_ms and not dropped:
        fail(f"topic {name}'s data was not seen dropped within {wait_ms} ms", EXIT_REFUSED)
    if dropped:
        click.echo("its data is dropped from every queue it had")


@topic.command("list")
@nameserver_option
@click.option("--cluster", default="", help="only this cluster's topics")
@json_option
def topic_list(nameserver: str, cluster: str, as_json: bool) -> None:
    """List topics."""
    request = api.ListRequest(cluster)
    response = run(nameserver, lambda ns: ns.list_topics(request, timeout_ms=CALL_TIMEOUT_MS))
    if as_json:
        document = {"topics": [asdict(t) for t in response.topics], "revision": response.revision}
        click.echo(json.dumps(document, indent=2, sort_keys=True))
        return
    _print(topics_table(response.topics, f"topics (revision {response.revision})"))


@topic.command("describe")
@click.argument("name")
@nameserver_option
@json_option
def topic_describe(name: str, nameserver: str, as_json: bool) -> None:
    """Show topic NAME and where each of its queues is served."""
    check_name(names.validate_topic, name)
    request = api.NameRequest(name)
    route = run(nameserver, lambda ns: ns.route(request, timeout_ms=CALL_TIMEOUT_MS))
    if as_json:
        click.echo(json.dumps(asdict(route), indent=2, sort_keys=True))
        return
    _print(topics_table([route.topic], f"topic {name} (revision {route.revision})"))
    table = Table(title="queues")
    for column in ("queue", "group", "term", "leader", "followers"):
        table.add_column(column)
    for q in route.queues:
        leader = "-" if q.leader is None else f"{q.leader.node_id}@{q.leader.address}"
        followers = ", ".join(f"{f.node_id}@{f.address}" for f in q.followers) or "-"
        table.add_row(str(q.queue_id), str(q.group_id), str(q.term), leader, followers)
    _print(table)


@click.group()
def group() -> None:
    """create | delete | list | describe consumer groups; lag | reset-offset (admin_consumers)."""


@group.command("create")
@click.argument("name")
@nameserver_option
@cluster_option
@click.option("--fifo", is_flag=True, help="deliver each queue's messages in order")
@click.option("--max-attempts", type=click.IntRange(1, 1000), default=17, show_default=True)
def group_create(name: str, nameserver: str, cluster: str, fifo: bool, max_attempts: int) -> None:
    """Create consumer group NAME (RocketMQ's retry levels)."""
    check_name(names.validate_consumer_group, name)
    request = api.CreateConsumerGroupRequest(
        name, cluster, fifo, max_attempts, signed=signed_from_environment()
    )
    response = run(
        nameserver, lambda ns: ns.create_consumer_group(request, timeout_ms=CALL_TIMEOUT_MS)
    )
    _print(groups_table([response.group], f"created (revision {response.revision})"))


@group.command("delete")
@click.argument("name")
@nameserver_option
def group_delete(name: str, nameserver: str) -> None:
    """Delete consumer group NAME."""
    check_name(names.validate_consumer_group, name)
    request = api.NameRequest(name, signed_from_environment())
    response = run(
        nameserver, lambda ns: ns.delete_consumer_group(request, timeout_ms=CALL_TIMEOUT_MS)
    )
    click.echo(f"deleted consumer group {name} (revision {response.revision})")


@group.command("list")
@nameserver_option
@click.option("--cluster", default="", help="only this cluster's groups")
def group_list(nameserver: str, cluster: str) -> None:
    """List consumer groups."""
    request = api.ListRequest(cluster)
    response = run(
        nameserver, lambda ns: ns.list_consumer_groups(request, timeout_ms=CALL_TIMEOUT_MS)
    )
    _print(groups_table(response.groups, f"consumer groups (revision {response.revision})"))


@group.command("describe")
@click.argument("name")
@nameserver_option
def group_describe(name: str, nameserver: str) -> None:
    """Show consumer group NAME."""
    check_name(names.validate_consumer_group, name)
    request = api.NameRequest(name)
    response = run(
        nameserver, lambda ns: ns.get_consumer_group(request, timeout_ms=CALL_TIMEOUT_MS)
    )
    _print(groups_table([response.group], f"consumer group {name} (revision {response.revision})"))
    retry = response.group.retry
    if retry.backoff_ms:
        click.echo("retry backoff_ms: " + ", ".join(str(b) for b in retry.backoff_ms))


@click.group()
def cluster() -> None:
    """status: nodes (health, load), brokers, groups (replicas, leaders)."""


@cluster.command("status")
@nameserver_option
@click.option("--cluster", "name", default=DEFAULT_CLUSTER, show_default=True)
def cluster_status(nameserver: str, name: str) -> None:
    """Storage nodes, brokers and raft groups of a cluster."""
    request = api.NameRequest(name)
    status = run(nameserver, lambda ns: ns.cluster_status(request, timeout_ms=CALL_TIMEOUT_MS))
    c = status.cluster
    click.echo(
        f"cluster {c.name}: {c.group_count} raft groups (ids {c.first_group_id}.."
        f"{c.first_group_id + c.group_count - 1}), replication {c.replication_factor}, "
        f"{status.topic_count:,} topics, {status.consumer_group_count:,} consumer groups, "
        f"revision {status.revision}"
    )
    now_ms = int(time.time() * 1000)
    _print(storage_nodes_table(status.storage_nodes, now_ms))
    brokers = Table(title="brokers")
    for column in ("id", "address", "alive", "last_heartbeat"):
        brokers.add_column(column)
    for b in status.brokers:
        heartbeat = ago(b.last_heartbeat_ms, now_ms) if b.last_heartbeat_ms else "never"
        brokers.add_row(b.broker_id, b.address, str(b.alive).lower(), heartbeat)
    _print(brokers)
    _print(raft_groups_table(status.groups, {n.node_id: n for n in status.storage_nodes}))
    leaderless = [g.group_id for g in status.groups if g.leader == 0]
    placed = sum(1 for g in status.groups if g.replicas)
    click.echo(
        f"raft groups: {placed} of {len(status.groups)} placed, "
        f"{len(status.groups) - len(leaderless)} with a known leader"
    )
    ids = {g.group_id for g in status.groups}
    records = run_service(
        nameserver,
        ControlService,
        lambda s: s.replica_sets(ctl.ReplicaSetsRequest(), timeout_ms=CALL_TIMEOUT_MS),
    )
    ours = [r for r in records.groups if r.group_id in ids]
    if not ours:
        click.echo("replication: raft (each group elects its leader by majority)")
        return
    click.echo(
        "replication: controller (RIP-44: the nameserver names each group's master; "
        "a write is acknowledged once every SyncStateSet member holds it)"
    )
    _print(replica_sets_table(ours))


def replica_sets_table(records: list[ctl.ReplicaSetInfo]) -> Table:
    """Controller-mode groups: master and its epoch, SyncStateSet and its epoch."""
    table = Table(title="controller groups")
    for column in ("group", "replicas", "master", "epoch", "sync_state_set", "set_epoch"):
        table.add_column(column)
    for r in records:
        table.add_row(
            str(r.group_id),
            ",".join(map(str, r.replicas)),
            str(r.master) if r.master else "-",
            str(r.epoch),
            ",".join(map(str, r.sync_state_set)) or "-",
            str(r.sync_state_set_epoch),
        )
    return table


def storage_nodes_table(nodes: list[api.StorageNodeInfo], now_ms: int) -> Table:
    """Storage nodes: health (DOWN; DEGRADED: its fsync latency is an outlier among its
    peers, so it leads nothing; DRAINING: its replicas are moving off), the groups
    they host and lead, and their load (the p99 of their WAL syncs and of their
    appends over their last heartbeat's interval)."""
    table = Table(title="storage nodes")
    for column in (
        "id",
        "address",
        "health",
        "groups",
        "leaders",
        "bytes",
        "msgs/s",
        "fsync_p99",
        "append_p99",
        "disk_free",
        "last_heartbeat",
    ):
        table.add_column(column)
    for n in nodes:
        table.add_row(
            str(n.node_id),
            n.address,
            _health(n),
            str(n.groups),
            str(n.leaders),
            size_text(n.bytes),
            str(n.msgs_per_s),
            _latency(n.fsync_p99_us),
            _latency(n.append_p99_us),
            size_text(n.disk_free_bytes),
            ago(n.last_heartbeat_ms, now_ms) if n.last_heartbeat_ms else "never",
        )
    return table


def _latency(us: int) -> str:
    """A reported p99 for people ("-": none reported)."""
    return f"{us / 1000:.1f} ms" if us else "-"


def _health(node: api.StorageNodeInfo) -> str:
    marks = [m for m, on in (("DEGRADED", node.degraded), ("DRAINING", node.draining)) if on]
    return ", ".join(["up" if node.alive else "DOWN", *marks])


def raft_groups_table(
    groups: list[api.RaftGroupInfo], nodes: dict[int, api.StorageNodeInfo]
) -> Table:
    """Raft groups: replicas (a down one marked; +joining, -leaving during a move),
    leader and term."""
    table = Table(title="raft groups")
    for column in ("group", "replicas", "leader", "term"):
        table.add_column(column)

    def name(node_id: int, group: api.RaftGroupInfo | None = None) -> str:
        node = nodes.get(node_id)
        text = str(node_id) if node is not None and node.alive else f"{node_id}(down)"
        if group is not None and node_id in group.joining:
            return f"+{text}"  # being added (a replica move)
        if group is not None and node_id in group.leaving:
            return f"-{text}"  # being removed
        return text

    for g in groups:
        table.add_row(
            str(g.group_id),
            ",".join(name(n, g) for n in g.replicas) or "-",
            name(g.leader) if g.leader else "-",
            str(g.term),
        )
    return table
