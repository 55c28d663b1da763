"""A storage node whose WAL is damaged: it sets the WAL aside and is re-admitted by its groups.

The WAL is shared by every group hosted here, so a damaged segment (one that
is not the last: ``raft.wal.recovery`` refuses it, naming the segment and the
offset) loses a suffix of every group, term and vote records included.
Cutting the WAL at the damage would let this node vote twice in a term or help
form a majority that lacks an entry it once acknowledged. So, instead:

1. :func:`open_wal` catches the refusal, writes the durable marker
   ``DATA_LOST.json`` in the data directory (fsynced) *before* it moves the
   whole WAL directory (segments and snapshot packs) into
   ``quarantine/wal-<n>``, logs one error naming the segment, the offset and
   the quarantine path, and opens an empty WAL. A crash at any point is safe:
   with the marker present the node starts as data-lost whatever its WAL holds.
2. While the marker stands, the node asks the leader of each assigned group
   that has not re-admitted it yet to re-admit it (``storage.readmit_replica``).
   The leader removes it from the group by a membership change the other
   replicas commit (so the leader forgets what the node acknowledged before)
   and answers once that is applied.
3. Only then does the node host the group: empty, as a replica joining its
   group, with the raft core's ``data_lost`` flag set (it neither votes nor
   campaigns). Hosted earlier, it would take the leader's appends from entry 1
   as the voter the leader still took it for, in a configuration it never
   had. The leader adds it back as a learner, which catches up from a
   snapshot and the log tail, and promotes it: the same steps as a replica
   move (``storage_node.reconcile.plan_membership_step``).
4. Once the node's replica applied a membership that makes it a voter again,
   at an index past the one at which the leader reported it removed (after
   one naming it a learner), the group is re-admitted: the raft flag is
   lifted (recording a vote for the term's leader), and once the WAL holds
   that vote the group is recorded in the marker (fsynced). When every
   assigned group is recorded the marker is deleted.
   Until then the node reports itself degraded (it leads nothing meanwhile).

SHELL: reads and writes files.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from raft.errors import StorageFailed
from raft.wal.logstore import LogStore
from raft.wal.spares import fsync_dir

_log = logging.getLogger(__name__)

MARKER_NAME = "DATA_LOST.json"
"""The durable marker of a node whose WAL was set aside, in its data directory."""
QUARANTINE_DIR = "quarantine"
"""Where damaged WALs are moved, in the data directory (never deleted by the node)."""


@dataclass
class DataLoss:
    """What the marker records: why the WAL was set aside, where it went, and the
    groups re-admitted since."""

    cause: str
    quarantined: str
    readmitted: set[int] = field(default_factory=set)

    def to_json(self) -> str:
        """The marker's content."""
        return json.dumps(
            {
                "cause": self.cause,
                "quarantined": self.quarantined,
                "readmitted": sorted(self.readmitted),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> DataLoss:
        """The marker read back; StorageFailed naming the damage if it is unreadable."""
        try:
            raw = json.loads(text)
            return cls(str(raw["cause"]), str(raw["quarantined"]), set(raw["readmitted"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageFailed(f"the data-lost marker {MARKER_NAME} is unreadable: {exc}") from exc


def read_marker(data_dir: Path) -> DataLoss | None:
    """The node's data-lost marker, or None when it has none."""
    try:
        text = (data_dir / MARKER_NAME).read_text()
    except FileNotFoundError:
        return None
    return DataLoss.from_json(text)


def write_marker(data_dir: Path, loss: DataLoss) -> None:
    """Write the marker durably (a temporary file fsynced, renamed, the directory fsynced)."""
    path = data_dir / MARKER_NAME
    temporary = path.with_suffix(".tmp")
    with temporary.open("w") as out:
        out.write(loss.to_json())
        out.flush()
        os.fsync(out.fileno())
    temporary.replace(path)
    fsync_dir(data_dir)


def clear_marker(data_dir: Path) -> None:
    """Delete the marker durably: every group re-admitted this node."""
    (data_dir / MARKER_NAME).unlink(missing_ok=True)
    fsync_dir(data_dir)


def open_wal(data_dir: Path, segment_bytes: int) -> tuple[LogStore, DataLoss | None]:
    """Open the WAL at ``data_dir/wal``; a WAL its recovery refuses is set aside (see
    the module docstring). Returns the store and the node's data loss, if any."""
    wal_dir = data_dir / "wal"
    loss = read_marker(data_dir)
    try:
        return LogStore.open(wal_dir, segment_bytes=segment_bytes), loss
    except StorageFailed as exc:
        cause = str(exc)
    quarantine = data_dir / QUARANTINE_DIR
    quarantine.mkdir(exist_ok=True)
    taken = {p.name for p in quarantine.iterdir()}
    target = quarantine / next(
        f"wal-{n}" for n in range(1, len(taken) + 2) if f"wal-{n}" not in taken
    )
    # The marker first: a crash after it and before the move starts data-lost again.
    loss = DataLoss(cause, str(target))
    write_marker(data_dir, loss)
    wal_dir.replace(target)
    fsync_dir(quarantine)
    fsync_dir(data_dir)
    _log.error(
        "the WAL is damaged: %s; it was moved to %s and this node starts empty, marked "
        "data-lost: its replicas neither vote nor campaign until their groups re-admit it",
        cause,
        target,
    )
    return LogStore.open(wal_dir, segment_bytes=segment_bytes), loss
