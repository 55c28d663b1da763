"""Reconcile: which local replicas a storage node starts, from the nameserver's assignment.

:func:`plan_reconcile` compares the replicas a node hosts (group -> voters of
its raft configuration) with what the nameserver assigns to it (group ->
replicas) and says what to do:

- ``start``: assigned groups not hosted yet, with the members to bootstrap
  them with (the assignment's replicas; a replica whose WAL already holds
  the group keeps the configuration recorded there). Starting is
  idempotent: a group is started at most once per process, and a group
  already hosted is never started again.
- ``membership_differs``: hosted groups assigned with other replicas. Only a
  raft membership change can follow such an assignment; the raft driver
  does not carry those out yet, so the replica runs on with its recorded
  members.
- ``unassigned``: hosted groups no longer assigned here. They are kept
  (stopping a replica without a membership change would cost the group a
  voter); the same missing membership change applies.
- ``refused``: assignments that cannot be served (group ids outside the
  cluster's range, or replicas that do not include this node), with the
  reason, so the shell can log them: bad input is named, never fatal.
- ``unknown_nodes``: replica nodes of groups to start whose address this node
  does not know yet (the shell reads the nameserver's node list first).

PURE.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReconcilePlan:
    """What a node does to match an assignment (see the module docstring)."""

    start: tuple[tuple[int, tuple[int, ...]], ...] = ()
    membership_differs: tuple[int, ...] = ()
    unassigned: tuple[int, ...] = ()
    refused: tuple[tuple[int, str], ...] = ()
    unknown_nodes: tuple[int, ...] = ()

    def is_empty(self) -> bool:
        """Whether the node already matches the assignment (nothing to start or note)."""
        return not (self.start or self.membership_differs or self.unassigned or self.refused)


def plan_reconcile(
    node_id: int,
    hosted: Mapping[int, Collection[int]],
    assigned: Mapping[int, Collection[int]],
    groups: range,
    known_nodes: Collection[int],
) -> ReconcilePlan:
    """What ``node_id`` does to host ``assigned`` (group -> replicas) given ``hosted``
    (group -> current voters); ``groups`` is the cluster's group id range and
    ``known_nodes`` the nodes whose address is known."""
    start: list[tuple[int, tuple[int, ...]]] = []
    differs: list[int] = []
    refused: list[tuple[int, str]] = []
    unknown: set[int] = set()
    valid: set[int] = set()
    for group_id in sorted(assigned):
        replicas = tuple(sorted(set(assigned[group_id])))
        if group_id not in groups:
            refused.append(
                (group_id, f"group {group_id} is outside the cluster's ids {_span(groups)}")
            )
            continue
        if node_id not in replicas:
            refused.append(
                (group_id, f"group {group_id} is assigned to {list(replicas)}, not to {node_id}")
            )
            continue
        valid.add(group_id)
        voters = hosted.get(group_id)
        if voters is None:
            start.append((group_id, replicas))
            unknown.update(n for n in replicas if n != node_id and n not in known_nodes)
        elif set(voters) != set(replicas):
            differs.append(group_id)
    unassigned = tuple(g for g in sorted(hosted) if g not in valid)
    return ReconcilePlan(
        tuple(start), tuple(differs), unassigned, tuple(refused), tuple(sorted(unknown))
    )


def _span(groups: range) -> str:
    return f"{groups.start}..{groups.stop - 1}" if groups else "(none)"
