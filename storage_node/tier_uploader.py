"""The uploader: on the groups this node leads, committed messages go to the tier.

Every ``interval_ms``, for each group this node leads whose state covers its
term (it applied an entry of its current term, so it knows every upload an
earlier leader recorded):

1. plan (``storage_node.tier_plan.plan_uploads``: from the recorded upload
   point, only applied = committed messages, bounded objects);
2. write each object under ``<tier>/groups/<g>/`` with the leader's term in
   its name, in a worker thread, a slice at a time (``snapshot_export``:
   memory is a slice and a block);
3. propose ``RecordUpload``: the raft log decides. A refused record (another
   leader recorded those offsets first) or a lost one (this node was deposed)
   leaves the object unrecorded: it is deleted at once when possible, and is
   garbage to every reader otherwise;
4. write the group's manifest when the recorded objects differ from the last
   manifest this node wrote (its own records, a previous leader's, or
   retention's expiry), at most once every ``MANIFEST_INTERVAL_MS``: it is a
   copy for readers outside the cluster, the raft state is the truth, and
   rewriting it after every round cost as much as building the objects.

A failed write (tier outage) is retried with exponential backoff per group
(``RETRY_MS_MIN`` doubling up to ``RETRY_MS_MAX``); appends and reads of local
data go on meanwhile, and local data is not trimmed past the upload point, so
nothing is lost: the uploads catch up when the tier is back.

SHELL.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass, field
from typing import cast

from protocol.message_objects import (
    GroupPoint,
    Manifest,
    ObjectEntry,
    QueueManifest,
    tier_object_name,
)
from raft.core.node import RawNode
from raft.errors import RaftError
from storage_node.housekeeping import entry_bytes_of
from storage_node.partition.commands import RecordUpload, encode
from storage_node.partition.queues import QueueId
from storage_node.partition.results import RecordUploadResult
from storage_node.replica import GroupReplica
from storage_node.service import StorageNode
from storage_node.snapshot_export import SLICE_MESSAGES, QueueObjectSink, add_slice, slice_of
from storage_node.tier_plan import Upload, UploadLag, UploadPolicy, plan_uploads, upload_lag
from storage_node.tier_store import Tier

_log = logging.getLogger(__name__)

RETRY_MS_MIN = 500
RETRY_MS_MAX = 30_000
BLOCK_BYTES = 256 << 10
"""About the bytes of one block of an uploaded object."""
MANIFEST_INTERVAL_MS = 1000
"""The least time between two manifest writes of a group (a changed manifest is written
at the first round after it)."""


@dataclass
class GroupUploads:
    """What this node's uploader did for one group (for ``tier status``)."""

    recorded_objects: int = 0
    recorded_bytes: int = 0
    refused: int = 0
    last_error: str = ""
    last_upload_ms: int = 0
    retry_at_ms: int = 0
    retry_ms: int = 0
    manifest_of: tuple[tuple[str, int, int | None, int | None], ...] | None = None
    """What the manifest this node last wrote held (None: none written)."""
    manifest_at_ms: int | None = None
    """When this node last wrote the group's manifest (None: never)."""


@dataclass
class Uploader:
    """Uploads of the groups ``node`` leads to ``tier`` (see the module docstring)."""

    node: StorageNode
    tier: Tier
    policy: UploadPolicy = field(default_factory=UploadPolicy)
    groups: dict[int, GroupUploads] = field(default_factory=dict)

    def queue_status(
        self, replica: GroupReplica, queue: QueueId, now_ms: int
    ) -> tuple[UploadLag, str]:
        """The queue's upload lag on ``replica`` and this uploader's last error for its
        group (for ``queue_info``: ``rip5 admin tier status``)."""
        lag = upload_lag(replica.state, queue, now_ms, entry_bytes_of(replica, replica.group_id))
        status = self.groups.get(replica.group_id)
        return lag, "" if status is None else status.last_error

    async def run(self, interval_ms: int) -> None:
        """Forever: an upload round every ``interval_ms``."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            await self.round()

    async def round(self) -> int:
        """One round over the led groups; how many objects were recorded."""
        recorded = 0
        for group_id in list(self.node.replicas):
            replica = self.node.replicas.get(group_id)
            term = self._leading_term(group_id, replica)
            if replica is None or term is None:
                continue
            status = self.groups.setdefault(group_id, GroupUploads())
            now_ms = self.node.now_ms()
            if now_ms < status.retry_at_ms:
                continue
            recorded += await self._upload_group(replica, term, status)
            # Also when another leader recorded objects (or retention expired some) and
            # did not write the manifest: it always follows the raft state.
            due = status.manifest_at_ms is None or (
                self.node.now_ms() >= status.manifest_at_ms + MANIFEST_INTERVAL_MS
            )
            if due and _manifest_key(replica) != status.manifest_of:
                await self._write_manifest(replica, status)
        return recorded

    def _leading_term(self, group_id: int, replica: GroupReplica | None) -> int | None:
        """The term this node leads the group in, once its state covers that term."""
        if replica is None:
            return None
        raft = cast(RawNode, self.node.driver.host.node(group_id))
        if not raft.is_leader():
            return None
        term = raft.hard_state().term
        return term if replica.applied_term >= term else None

    async def _upload_group(self, replica: GroupReplica, term: int, status: GroupUploads) -> int:
        group_id = replica.group_id
        sizes = entry_bytes_of(replica, group_id)
        uploads = plan_uploads(replica.state, self.policy, self.node.now_ms(), sizes)
        recorded = 0
        for upload in uploads:
            try:
                entry = await self._write_object(replica, upload, term)
            except Exception as exc:  # noqa: BLE001 - fsspec drivers raise their own types: any failure is the tier's
                self._failed(group_id, status, "upload", exc)
                return recorded
            status.retry_ms = 0
            status.last_error = ""
            if await self._record(replica, upload, entry, status):
                recorded += 1
        return recorded

    def _failed(self, group_id: int, status: GroupUploads, what: str, exc: Exception) -> None:
        """Note a failed tier call: the group waits (doubling) before trying again."""
        status.last_error = f"{what}: {type(exc).__name__}: {exc}"
        status.retry_ms = min(max(status.retry_ms * 2, RETRY_MS_MIN), RETRY_MS_MAX)
        status.retry_at_ms = self.node.now_ms() + status.retry_ms
        _log.warning(
            "tier %s of group %d failed (retry in %d ms): %s",
            what,
            group_id,
            status.retry_ms,
            status.last_error,
        )

    async def _write_object(self, replica: GroupReplica, upload: Upload, term: int) -> ObjectEntry:
        """Write the object of ``upload`` (in a worker thread, a slice at a time)."""
        topic, queue_id = upload.queue
        sink = QueueObjectSink(
            self.tier.fs,
            self.tier.group_root(replica.group_id),
            replica.group_id,
            upload.queue,
            upload.first_offset,
            1 << 62,  # one object: its size was bounded by the plan
            BLOCK_BYTES,
            functools.partial(tier_object_name, topic, queue_id, term=term),
        )
        try:
            offset = upload.first_offset
            objects: list[ObjectEntry] = []
            while offset < upload.end_offset:
                count = min(upload.end_offset - offset, SLICE_MESSAGES)
                piece = slice_of(replica, replica.state.read(topic, queue_id, offset, count))
                offset += len(piece.entries)
                # The last slice closes the object in the same hop to the thread.
                objects = await add_slice(replica, sink, piece, offset >= upload.end_offset)
            (entry,) = objects
        except BaseException:
            await asyncio.to_thread(sink.abort)
            raise
        return entry

    async def _record(
        self, replica: GroupReplica, upload: Upload, entry: ObjectEntry, status: GroupUploads
    ) -> bool:
        """Propose the object's record; whether the group recorded it."""
        group_id = replica.group_id
        command = RecordUpload(self.node.now_ms(), upload.queue[0], upload.queue[1], entry)
        try:
            result = await self.node.driver.propose(group_id, encode(command))
        except (RaftError, TimeoutError) as exc:
            result = exc
        if isinstance(result, RecordUploadResult) and result.recorded:
            status.recorded_objects += 1
            status.recorded_bytes += entry.size_bytes
            status.last_upload_ms = self.node.now_ms()
            return True
        status.refused += 1
        _log.info("tier object %s of group %d not recorded: %s", entry.name, group_id, result)
        try:
            await asyncio.to_thread(self.tier.delete_objects, group_id, [entry.name])
        except Exception as exc:  # noqa: BLE001 - fsspec drivers raise their own types: any failure is the tier's
            _log.info("unrecorded tier object %s stays (garbage to readers): %s", entry.name, exc)
        return False

    async def _write_manifest(self, replica: GroupReplica, status: GroupUploads) -> None:
        """The group's recorded objects as its manifest in the tier (best effort)."""
        state = replica.state
        queues = []
        for queue in state.tier.queues():
            objects = state.tier.objects(queue)
            if not objects:
                continue
            queues.append(
                QueueManifest(
                    queue[0],
                    queue[1],
                    replica.group_id,
                    objects[0].first_offset,
                    objects[-1].end_offset,
                    min(o.min_store_timestamp_ms for o in objects),
                    max(o.max_store_timestamp_ms for o in objects),
                    objects,
                )
            )
        manifest = Manifest(
            f"tier group {replica.group_id}",
            self.node.now_ms(),
            queues,
            [GroupPoint(replica.group_id, replica.applied_index)],
        )
        key = _manifest_key(replica)
        try:
            await asyncio.to_thread(self.tier.write_manifest, manifest, replica.group_id)
            status.manifest_of = key
            status.manifest_at_ms = self.node.now_ms()
        except Exception as exc:  # noqa: BLE001 - fsspec drivers raise their own types: any failure is the tier's
            self._failed(replica.group_id, status, "manifest write", exc)


def _manifest_key(replica: GroupReplica) -> tuple[tuple[str, int, int | None, int | None], ...]:
    """What a manifest of the group's tier state holds, in short: per queue its first
    offset in the tier and its upload point."""
    tier = replica.state.tier
    return tuple((q[0], q[1], tier.first_offset(q), tier.end_offset(q)) for q in tier.queues())
