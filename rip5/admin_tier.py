"""``rip5 admin tier status|verify``: what the storage groups put in the tier.

The tier's layout (``storage_node/tier_store.py``): per raft group a folder
``groups/<g>/`` with the group's ``manifest.json`` (its recorded objects, as its
leader last wrote them from the group's raft state) and the objects below
``objects/``.

- ``verify`` walks every group's manifest and objects: the objects of each
  queue cover its offsets with no gap and no overlap; each object exists,
  has the recorded size and CRC32C, and its footer and blocks decode with
  their checksums and cover the recorded offsets. Objects no manifest names
  are listed as unrecorded (a deposed leader's, or an upload whose record
  failed or is not in a manifest yet): readers ignore them, they are not
  errors. Exit 1 if anything is wrong.
- ``status`` shows per group and queue the upload point and, from the
  group's leader (``storage.queue_info``), the queue's end offset, the lag in
  messages, in bytes of log entries and in seconds (the age of the oldest
  message not uploaded), the uploader's last error for the group ("" since its
  last success), and how old the newest uploaded message is.

The tier URL is read the way the storage nodes read it: credentials and
endpoints from the environment (``AWS_ENDPOINT_URL`` ...), never from flags.

SHELL.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import click
import crc32c
import uvloop
from rich.table import Table

from angelia_rpc import AngeliaError
from protocol.message_objects import (
    MANIFEST_NAME,
    TIER_GROUPS,
    Manifest,
    ObjectCorrupted,
    ObjectEntry,
    QueueManifest,
    check_queue,
    decode_block,
    decode_footer,
    decode_manifest,
)
from rip5.admin import (
    EXIT_REFUSED,
    EXIT_USAGE,
    cluster_option,
    console,
    fail,
    nameserver_option,
    parse_nameservers,
)
from rip5.admin_storage import ClusterAdmin, queue_info_call


@dataclass
class TierReport:
    """What ``verify`` found: counts, problems (each names its object or queue) and the
    objects no manifest names."""

    groups: int = 0
    queues: int = 0
    objects: int = 0
    messages: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Whether nothing is wrong."""
        return not self.problems


def open_tier(url: str) -> tuple[Any, str]:
    """The fsspec filesystem and root of a tier URL; exit 2 if none takes it."""
    try:
        import fsspec  # noqa: PLC0415 - optional (the tiered extra): only tier commands need it
    except ImportError:
        fail("the tier commands need fsspec (pip install 'rip5[tiered]')", EXIT_USAGE)
    try:
        fs, root = fsspec.core.url_to_fs(url)
    except (ValueError, ImportError, TypeError) as exc:
        fail(f"cannot open {url!r}: {exc}", EXIT_USAGE)
    return fs, str(root).rstrip("/")


def group_manifests(fs: Any, root: str) -> dict[int, Manifest]:
    """Every group's manifest in the tier at ``root`` (a damaged one raises
    ``ObjectCorrupted``)."""
    manifests = {}
    fs.invalidate_cache()  # listings cached by an earlier call in this process are stale
    base = f"{root}/{TIER_GROUPS}"
    if not fs.exists(base):
        return {}
    for folder in sorted(fs.ls(base, detail=False)):
        name = folder.rstrip("/").rpartition("/")[2]
        path = f"{folder.rstrip('/')}/{MANIFEST_NAME}"
        if name.isdigit() and fs.exists(path):
            manifests[int(name)] = decode_manifest(fs.cat_file(path), path)
    return manifests


def verify_tier(fs: Any, root: str) -> TierReport:
    """Check the whole tier at ``root`` (see the module docstring)."""
    report = TierReport()
    try:
        manifests = group_manifests(fs, root)
    except ObjectCorrupted as exc:
        report.problems.append(str(exc))
        return report
    for group_id, manifest in manifests.items():
        report.groups += 1
        folder = f"{root}/{TIER_GROUPS}/{group_id:05d}"
        named: set[str] = set()
        for queue in manifest.queues:
            report.queues += 1
            try:
                check_queue(queue, f"group {group_id}")
            except ObjectCorrupted as exc:
                report.problems.append(str(exc))
            for entry in queue.objects:
                named.add(entry.name)
                report.objects += 1
                report.messages += entry.end_offset - entry.first_offset
                report.bytes += entry.size_bytes
                problem = _check_object(fs, f"{folder}/{entry.name}", entry, queue)
                if problem:
                    report.problems.append(problem)
        objects = f"{folder}/objects"
        if fs.exists(objects):
            for path in sorted(fs.find(objects)):
                name = path[len(folder.rstrip("/")) + 1 :]
                relative = name[name.index("objects/") :] if "objects/" in name else name
                if relative not in named:
                    report.unrecorded.append(f"{TIER_GROUPS}/{group_id:05d}/{relative}")
    return report


def _check_object(fs: Any, path: str, entry: ObjectEntry, queue: QueueManifest) -> str:
    """What is wrong with one recorded object ("" if nothing)."""
    where = f"{queue.topic}:{queue.queue_id} object {entry.name}"
    if not fs.exists(path):
        return f"{where}: missing"
    data = fs.cat_file(path)
    if len(data) != entry.size_bytes:
        return f"{where}: {len(data)} bytes, recorded {entry.size_bytes}"
    if crc32c.crc32c(data) != entry.crc32c:
        return f"{where}: checksum mismatch"
    try:
        footer = decode_footer(data, entry.name, len(data))
        if (footer.first_offset, footer.end_offset) != (entry.first_offset, entry.end_offset):
            return (
                f"{where}: holds [{footer.first_offset}, {footer.end_offset}), recorded "
                f"[{entry.first_offset}, {entry.end_offset})"
            )
        if (footer.topic, footer.queue_id) != (queue.topic, queue.queue_id):
            return f"{where}: holds queue {footer.topic}:{footer.queue_id}"
        for block in footer.blocks:
            decode_block(data[block.position : block.position + block.length], block, entry.name)
    except ObjectCorrupted as exc:
        return f"{where}: {exc}"
    return ""


@click.group()
def tier() -> None:
    """status | verify: the tier the storage groups upload to."""


tier_url_option = click.option(
    "--tier-url",
    required=True,
    envvar="RIP5_STORAGE_TIER_URL",
    help="the storage nodes' --tier-url (credentials from the environment)",
)


@tier.command("verify")
@tier_url_option
@click.option("--json", "as_json", is_flag=True, help="print JSON for machines")
def tier_verify(tier_url: str, as_json: bool) -> None:
    """Walk the tier: no gap, no overlap, every object intact (exit 1 if not)."""
    fs, root = open_tier(tier_url)
    report = verify_tier(fs, root)
    if as_json:
        click.echo(json.dumps({**asdict(report), "clean": report.clean}))
    else:
        click.echo(
            f"{report.groups} groups, {report.queues} queues, {report.objects} objects, "
            f"{report.messages} messages, {report.bytes} bytes; "
            f"{len(report.unrecorded)} unrecorded objects (ignored by readers)"
        )
        for problem in report.problems:
            click.echo(f"PROBLEM {problem}")
        click.echo("clean" if report.clean else f"{len(report.problems)} problems")
    if not report.clean:
        raise SystemExit(EXIT_REFUSED)


@tier.command("status")
@tier_url_option
@nameserver_option
@cluster_option
@click.option("--json", "as_json", is_flag=True, help="print JSON for machines")
def tier_status(tier_url: str, nameserver: str, cluster: str, as_json: bool) -> None:
    """Per group and queue: the upload point, the queue's end, the lag (messages, log
    bytes, age of the oldest not uploaded) and the leader's last upload error."""
    fs, root = open_tier(tier_url)
    try:
        manifests = group_manifests(fs, root)
    except ObjectCorrupted as exc:
        fail(str(exc), EXIT_REFUSED)
    addresses = parse_nameservers(nameserver)
    try:
        rows = uvloop.run(
            ClusterAdmin.using(addresses, cluster, lambda admin: status_rows(admin, manifests))
        )
    except AngeliaError as exc:
        fail(f"the cluster refused: {exc.code.name}: {exc.message}", EXIT_REFUSED)
    if as_json:
        click.echo(json.dumps(rows))
        return
    table = Table(title=f"tier {tier_url}")
    columns = ("group", "queue", "applied", "upload point", "end", "lag", "lag bytes", "lag s")
    for column in (*columns, "newest age s", "last error"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            str(row["group"]),
            f"{row['topic']}:{row['queue_id']}",
            str(row["applied_index"]),
            str(row["upload_point"]),
            str(row["end_offset"]),
            str(row["lag_messages"]),
            str(row["lag_bytes"]),
            f"{row['lag_ms'] / 1000:.1f}",
            f"{row['newest_age_ms'] / 1000:.1f}",
            row["last_error"],
        )
    console.print(table)


async def status_rows(admin: ClusterAdmin, manifests: dict[int, Manifest]) -> list[dict[str, Any]]:
    """Per group and queue of ``manifests``: the upload point, the queue's end offset
    from the group's leader (-1 if it did not answer), the lag and the newest uploaded
    message's age (``tier status``, and the dashboard's tier page)."""
    rows = []
    now_ms = int(time.time() * 1000)
    for group_id, manifest in manifests.items():
        applied = manifest.groups[0].applied_index if manifest.groups else -1
        for queue in manifest.queues:
            try:
                info = await admin.call_group(
                    group_id, queue_info_call(queue.topic, queue.queue_id)
                )
                end = info.end_offset
                lag = (info.tier_lag_bytes, info.tier_lag_ms, info.tier_last_error)
            except AngeliaError as exc:
                end = -1
                lag = (-1, -1, f"the group's leader did not answer: {exc.code.name}")
            rows.append(
                {
                    "group": group_id,
                    "topic": queue.topic,
                    "queue_id": queue.queue_id,
                    "applied_index": applied,
                    "upload_point": queue.end_offset,
                    "end_offset": end,
                    "lag_messages": -1 if end < 0 else max(0, end - queue.end_offset),
                    "newest_age_ms": now_ms - queue.max_store_timestamp_ms,
                    "lag_bytes": lag[0],
                    "lag_ms": lag[1],
                    "last_error": lag[2],
                }
            )
    return rows
