"""``rip5 admin snapshot create|list|describe|delete``: topics' messages at rest.

``create --to ROOT`` makes the snapshot ``ROOT/NAME``: the leader of every
raft group of the cluster writes the messages of the chosen topics' queues
it serves, each group as of one applied index taken when its export starts
(``storage.export_snapshot``), as message objects
(``protocol.message_objects``) under the snapshot's folder. Once every
group answered, this command writes ``manifest.json`` there, LAST and
whole (a temporary name, then a rename): a snapshot interrupted before has
no manifest, so readers never see half of one. ROOT is a folder or any
fsspec URL (``file://``, ``s3://`` through s3fs); ``--fs-option KEY=VALUE``
passes storage options (an endpoint, credentials) to fsspec here and on
the storage nodes.

Exit codes as ``rip5 admin``: 0 done; 1 the cluster or the destination
refused; 2 bad usage.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Sequence
from typing import Any

import click
import uvloop
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from angelia_rpc import AngeliaError
from angelia_rpc.channel import Peers
from angelia_rpc.cluster_services import StorageService
from angelia_rpc.config import RpcConfig
from angelia_rpc.nameserver_client import NameserverClient
from nameserver import names
from protocol import errors
from protocol import nameserver_api as api
from protocol import storage_api as st
from protocol.message_objects import (
    MANIFEST_NAME,
    GroupPoint,
    Manifest,
    ObjectCorrupted,
    QueueManifest,
    decode_manifest,
    encode_manifest,
)
from protocol.object_store import LocationUnavailable, open_location
from rip5.admin import (
    CALL_TIMEOUT_MS,
    EXIT_REFUSED,
    EXIT_USAGE,
    check_name,
    cluster_option,
    console,
    fail,
    nameserver_option,
    parse_nameservers,
)

EXPORT_TIMEOUT_MS = 3_600_000
"""How long one group's export may take."""
BLOCKS_PER_OBJECT_MIN = 4
BLOCK_BYTES_MAX = 1 << 20
BLOCK_BYTES_MIN = 1024
LEADER_ATTEMPTS = 8
LEADER_RETRY_S = 0.2


def block_bytes_max(object_bytes_max: int) -> int:
    """About the size of a block: 1 MiB, or less so an object holds a few blocks (a
    read of part of an object skips the rest)."""
    return max(BLOCK_BYTES_MIN, min(BLOCK_BYTES_MAX, object_bytes_max // BLOCKS_PER_OBJECT_MIN))


def parse_fs_options(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs as fsspec storage options; exit 2 on a malformed one."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--fs-option {pair!r} is not KEY=VALUE", EXIT_USAGE)
        options[key] = value
    return options


def _filesystem(url: str, options: dict[str, str]) -> tuple[Any, str]:
    try:
        return open_location(url, options)
    except LocationUnavailable as exc:
        fail(str(exc), EXIT_USAGE)


def read_manifest(fs: Any, folder: str, where: str) -> Manifest:
    """The manifest in ``folder`` of ``fs``; exit 1 if it is missing or not intact."""
    path = f"{folder}/{MANIFEST_NAME}"
    try:
        data = fs.cat_file(path)
    except FileNotFoundError:
        fail(f"{where} is not a snapshot (no {MANIFEST_NAME})", EXIT_REFUSED)
    try:
        return decode_manifest(data, where)
    except ObjectCorrupted as exc:
        fail(str(exc), EXIT_REFUSED)


def write_manifest(fs: Any, folder: str, manifest: Manifest) -> None:
    """Publish ``manifest`` in ``folder``: written whole under a temporary name, then
    renamed, so the manifest is either absent or complete."""
    temporary = f"{folder}/.{MANIFEST_NAME}.partial"
    fs.pipe_file(temporary, encode_manifest(manifest))
    fs.mv(temporary, f"{folder}/{MANIFEST_NAME}")


async def _export_group(
    peers: Peers,
    group: api.RaftGroupInfo,
    nodes: dict[int, str],
    request: st.ExportSnapshotRequest,
) -> st.ExportSnapshotResponse:
    """The export of one group by its leader (NOT_LEADER hints followed)."""
    candidates = [nodes[n] for n in ([group.leader] if group.leader else []) + group.replicas]
    address = candidates[0] if candidates else ""
    if not address:
        raise AngeliaError(errors.UNAVAILABLE, f"group {group.group_id} has no replica")
    last: AngeliaError | None = None
    for attempt in range(LEADER_ATTEMPTS):
        try:
            stub = peers.stub(StorageService, address)
            return await stub.export_snapshot(request, timeout_ms=EXPORT_TIMEOUT_MS)
        except AngeliaError as exc:
            last = exc
            # Only a wrong address is retried: an export that failed on the leader is
            # not repeated here (the operator runs create again).
            if exc.code is errors.NOT_LEADER:
                address = exc.leader_hint or candidates[(attempt + 1) % len(candidates)]
            elif exc.code is errors.GROUP_NOT_HOSTED:
                address = candidates[(attempt + 1) % len(candidates)]
            else:
                raise
        await asyncio.sleep(LEADER_RETRY_S)
    assert last is not None
    raise last


async def create_snapshot(
    nameserver: Sequence[str],
    cluster: str,
    url: str,
    topics: Sequence[str],
    object_bytes_max: int,
    storage_options: dict[str, str],
    progress: Progress | None = None,
) -> tuple[list[GroupPoint], list[QueueManifest]]:
    """Ask every group's leader to export ``topics`` (all when empty) under ``url``; the
    groups' points and the queues' manifests, once every group answered."""
    client = NameserverClient(nameserver)
    peers = Peers(RpcConfig())
    try:
        for topic in topics:
            request = api.NameRequest(topic)
            await client.call(
                lambda ns, r=request: ns.get_topic(r, timeout_ms=CALL_TIMEOUT_MS)  # type: ignore[misc]
            )
        status = await client.call(
            lambda ns: ns.cluster_status(api.NameRequest(cluster), timeout_ms=CALL_TIMEOUT_MS)
        )
        nodes = {n.node_id: n.address for n in status.storage_nodes}
        groups = [g for g in status.groups if g.replicas]
        task = None
        if progress is not None:
            task = progress.add_task("groups exported", total=len(groups), messages=0, size=0)
        exported = {"messages": 0, "bytes": 0}

        async def one(group: api.RaftGroupInfo) -> st.ExportSnapshotResponse:
            request = st.ExportSnapshotRequest(
                group.group_id,
                url,
                list(topics),
                object_bytes_max,
                block_bytes_max(object_bytes_max),
                storage_options,
            )
            response = await _export_group(peers, group, nodes, request)
            exported["messages"] += sum(q.message_count for q in response.queues)
            exported["bytes"] += sum(q.size_bytes for q in response.queues)
            if progress is not None and task is not None:
                progress.update(
                    task,
                    advance=1,
                    messages=exported["messages"],
                    size=f"{exported['bytes'] / 1e6:.1f} MB",
                )
            return response

        # Every export runs to its end before a failure is reported: nothing is
        # still being written when the command returns.
        answers = await asyncio.gather(*(one(g) for g in groups), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        responses = [a for a in answers if isinstance(a, st.ExportSnapshotResponse)]
    finally:
        await peers.close()
        await client.close()
    points = [GroupPoint(r.group_id, r.applied_index) for r in responses]
    queues = sorted((q for r in responses for q in r.queues), key=lambda q: (q.topic, q.queue_id))
    return points, queues


def _utc(ms: int) -> str:
    if ms < 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds")


fs_option = click.option(
    "--fs-option",
    "fs_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="an fsspec storage option (endpoint_url, key, secret ...); repeatable",
)


@click.group()
def snapshot() -> None:
    """create | list | describe | delete snapshots of topics' messages."""


@snapshot.command("create")
@click.option("--to", "root", required=True, help="folder or fsspec URL holding snapshots")
@click.option("--topic", "topics", multiple=True, help="a topic to include (default: all)")
@click.option("--name", default="", help="the snapshot's name (default: snapshot-<UTC time>)")
@click.option(
    "--object-mb",
    type=click.FloatRange(0.01),
    default=64.0,
    show_default=True,
    help="about the size of one object",
)
@nameserver_option
@cluster_option
@fs_option
def snapshot_create(
    root: str,
    topics: tuple[str, ...],
    name: str,
    object_mb: float,
    nameserver: str,
    cluster: str,
    fs_options: tuple[str, ...],
) -> None:
    """Write the committed messages of TOPICS (all) under ROOT/NAME, manifest last."""
    for topic in topics:
        check_name(names.validate_topic, topic)
    name = name or "snapshot-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    if "/" in name or name.startswith("."):
        fail(f"--name {name!r} must be a plain name (no '/', not starting with '.')", EXIT_USAGE)
    options = parse_fs_options(fs_options)
    url = f"{root.rstrip('/')}/{name}"
    fs, folder = _filesystem(url, options)
    if fs.exists(f"{folder}/{MANIFEST_NAME}"):
        fail(f"snapshot {url} exists already", EXIT_USAGE)
    addresses = parse_nameservers(nameserver)
    started = time.time()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[messages]} messages, {task.fields[size]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        try:
            points, queues = uvloop.run(
                create_snapshot(
                    addresses,
                    cluster,
                    url,
                    topics,
                    int(object_mb * 1e6),
                    options,
                    progress,
                )
            )
        except AngeliaError as exc:
            fail(f"the snapshot failed: {exc.code.name}: {exc.message}", EXIT_REFUSED)
    manifest = Manifest(name, int(started * 1000), queues, points)
    try:
        write_manifest(fs, folder, manifest)
    except OSError as exc:
        fail(f"cannot write the manifest of {url}: {exc}", EXIT_REFUSED)
    elapsed = time.time() - started
    messages = sum(q.message_count for q in queues)
    size = sum(q.size_bytes for q in queues)
    click.echo(
        f"snapshot {url}: {len(queues)} queues, {messages} messages, "
        f"{size / 1e6:.1f} MB in {elapsed:.1f} s ({size / 1e6 / max(elapsed, 1e-9):.1f} MB/s)"
    )


@snapshot.command("list")
@click.argument("root")
@fs_option
def snapshot_list(root: str, fs_options: tuple[str, ...]) -> None:
    """List the snapshots under ROOT (folders holding a manifest)."""
    fs, folder = _filesystem(root, parse_fs_options(fs_options))
    table = Table(title=f"snapshots in {root}")
    for column in ("name", "created (UTC)", "queues", "messages", "MB"):
        table.add_column(column)
    try:
        children = sorted(str(child).rstrip("/") for child in fs.ls(folder, detail=False))
    except FileNotFoundError:
        fail(f"{root} does not exist", EXIT_REFUSED)
    for child in children:
        if not fs.exists(f"{child}/{MANIFEST_NAME}"):
            continue
        manifest = read_manifest(fs, child, child)
        table.add_row(
            manifest.name,
            _utc(manifest.created_ms),
            str(len(manifest.queues)),
            str(sum(q.message_count for q in manifest.queues)),
            f"{sum(q.size_bytes for q in manifest.queues) / 1e6:.1f}",
        )
    console.print(table)


@snapshot.command("describe")
@click.argument("url")
@fs_option
def snapshot_describe(url: str, fs_options: tuple[str, ...]) -> None:
    """Show snapshot URL: each queue's offsets, store times and objects."""
    fs, folder = _filesystem(url, parse_fs_options(fs_options))
    manifest = read_manifest(fs, folder, url)
    click.echo(
        f"snapshot {manifest.name}, created {_utc(manifest.created_ms)}, "
        f"{len(manifest.groups)} raft groups, format version {manifest.format_version}"
    )
    table = Table(title="queues")
    for column in ("topic", "queue", "group", "offsets", "messages", "stored", "objects", "MB"):
        table.add_column(column)
    for q in manifest.queues:
        table.add_row(
            q.topic,
            str(q.queue_id),
            str(q.group_id),
            f"[{q.first_offset}, {q.end_offset})",
            str(q.message_count),
            f"{_utc(q.min_store_timestamp_ms)} .. {_utc(q.max_store_timestamp_ms)}",
            str(len(q.objects)),
            f"{q.size_bytes / 1e6:.1f}",
        )
    console.print(table)


@snapshot.command("delete")
@click.argument("url")
@fs_option
def snapshot_delete(url: str, fs_options: tuple[str, ...]) -> None:
    """Delete snapshot URL: its manifest first (readers stop seeing it), then its objects.

    Also removes what an interrupted ``create`` left (objects without a manifest).
    """
    fs, folder = _filesystem(url, parse_fs_options(fs_options))
    if not fs.exists(folder):
        fail(f"{url} does not exist", EXIT_REFUSED)
    manifest = f"{folder}/{MANIFEST_NAME}"
    if fs.exists(manifest):
        fs.rm_file(manifest)
    fs.rm(folder, recursive=True)
    click.echo(f"deleted {url}")
