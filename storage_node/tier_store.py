"""The tier: object storage behind an fsspec URL (``file://``, ``s3://`` through s3fs,
``gs://``, ``hdfs://``), where group leaders put their queues' committed messages.

Layout under the URL (``protocol.message_objects``)::

    groups/<group id:05d>/objects/<topic>/<queue id>/<first offset:020d>-t<term>.r5mo
    groups/<group id:05d>/manifest.json

A group's ``manifest.json`` is the group's recorded objects (its raft state's
``partition.tier``) as a message-objects manifest, written by the leader after
each upload it recorded, so Spark and ``rip5 admin tier verify`` read the tier
in place. The raft state is the truth: an object no manifest names is either
not recorded yet or garbage (a deposed leader's, an upload whose record failed).

Credentials and endpoints come the way each fsspec driver takes them from the
environment or its config files (for S3: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``~/.aws``), never from the
command line. Every method blocks: callers run them in a worker thread.

SHELL (file and network I/O).
"""

from __future__ import annotations

from typing import Any

from protocol.message_objects import (
    MANIFEST_NAME,
    Manifest,
    ObjectEntry,
    encode_manifest,
    tier_group_folder,
)
from storage_node.snapshot_export import open_filesystem


class Tier:
    """One tier URL, opened once (see the module docstring)."""

    def __init__(self, url: str) -> None:
        """Open ``url``; raises ``BadCommand`` if no fsspec driver takes it."""
        self.url = url
        self.fs: Any
        self.fs, self.root = open_filesystem(url, {})

    def group_root(self, group_id: int) -> str:
        """The path of a group's folder (objects and manifest below it)."""
        return f"{self.root}/{tier_group_folder(group_id)}"

    def delete_objects(self, group_id: int, names: list[str]) -> None:
        """Remove objects of the group (a missing one is not an error)."""
        for name in names:
            path = f"{self.group_root(group_id)}/{name}"
            if self.fs.exists(path):
                self.fs.rm(path)

    def write_manifest(self, manifest: Manifest, group_id: int) -> None:
        """Replace the group's manifest (written whole: a temp file, then moved over)."""
        path = f"{self.group_root(group_id)}/{MANIFEST_NAME}"
        temporary = f"{path}.writing"
        self.fs.makedirs(self.group_root(group_id), exist_ok=True)
        self.fs.pipe_file(temporary, encode_manifest(manifest))
        self.fs.mv(temporary, path)

    def read_range(self, group_id: int, entry: ObjectEntry, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a recorded object of the group."""
        path = f"{self.group_root(group_id)}/{entry.name}"
        data: bytes = self.fs.cat_file(path, start=start, end=end)
        return data
