"""Compaction of hosted groups: snapshots of their state machines, then their logs cut.

Two triggers: by bytes (the driver plans steps toward the WAL's targets so old
segments can go: :func:`plan_compaction`, then :func:`finish_compaction` once
the steps' snapshot pack is durable), and by entries (a group that applied
enough since its last snapshot: :func:`snapshot_by_entries`). A group is
never compacted past what it applied or its truncate floor.

PURE.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from raft.host.collaborators import LogWriter, SnapshotRecorder
from raft.host.group_state import HostedGroup
from raft.types import Snapshot, SnapshotMetadata


@dataclass(frozen=True, slots=True)
class CompactionStep:
    """Compact ``group_id`` up to ``index``, after recording ``snapshot`` if there is one.

    The snapshot's file must be made durable between
    :func:`plan_compaction` and :func:`finish_compaction`.
    """

    group_id: int
    index: int
    snapshot: Snapshot | None


def plan_compaction(
    groups: Mapping[int, HostedGroup],
    targets: Mapping[int, int],
    unpins: Callable[[int, int], bool] | None,
) -> list[CompactionStep]:
    """Steps that compact each group toward ``targets`` (group -> index).

    A group is compacted no further than what it applied and its truncate
    floor; when its snapshot does not cover that far, the step carries a
    new snapshot of its state machine as of now (its applied index).
    ``unpins(group, index)``: whether compacting the group up to ``index``
    would release a WAL segment it holds now. A group held back (by its
    floor) so far that it would release none gets no step, so no snapshot
    is taken for it: a state machine's snapshot may be costly (it stalls
    the round), and one that frees nothing is wasted.
    """
    steps: list[CompactionStep] = []
    for group_id, target in targets.items():
        g = groups.get(group_id)
        if g is None:
            continue
        index = min(target, g.applied)
        if g.truncate_floor is not None:
            index = min(index, g.truncate_floor)
        if index <= 0 or (unpins is not None and not unpins(group_id, index)):
            continue
        snapshot = None
        if g.snapshot_index < index:
            conf_state = g.node.status().conf_state
            metadata = SnapshotMetadata(index=g.applied, term=g.applied_term, conf_state=conf_state)
            snapshot = Snapshot(metadata, g.state_machine.snapshot_data())
        steps.append(CompactionStep(group_id, index, snapshot))
    return steps


def finish_compaction(
    groups: Mapping[int, HostedGroup], steps: Sequence[CompactionStep], writer: SnapshotRecorder
) -> None:
    """Record the steps' snapshots (their files are durable) and compact."""
    for step in steps:
        g = groups.get(step.group_id)
        if g is None:
            continue
        if step.snapshot is not None:
            if not writer.note_local_snapshot(step.group_id, step.snapshot):
                continue  # overtaken (e.g. by a snapshot from the leader)
            g.snapshot_index = max(g.snapshot_index, step.snapshot.metadata.index)
        writer.compact(step.group_id, step.index)


def snapshot_by_entries(
    groups: Sequence[HostedGroup], writer: LogWriter, every_entries: int, keep_entries: int
) -> None:
    """Snapshot the ``groups`` that applied ``every_entries`` since their last one.

    The log is then compacted up to ``keep_entries`` below the snapshot, so
    slightly lagging followers still catch up from entries.
    """
    for g in groups:
        if g.applied - g.snapshot_index < every_entries:
            continue
        conf_state = g.node.status().conf_state
        metadata = SnapshotMetadata(index=g.applied, term=g.applied_term, conf_state=conf_state)
        writer.save_local_snapshot(g.group_id, Snapshot(metadata, g.state_machine.snapshot_data()))
        g.snapshot_index = g.applied
        index = g.applied - keep_entries
        if g.truncate_floor is not None:
            index = min(index, g.truncate_floor)
        if index > 0:
            writer.compact(g.group_id, index)
