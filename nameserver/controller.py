"""The RIP-44 controller's decisions: who masters a controller-mode group, which
replicas are in sync, and who is fenced.

A controller-mode group (``--replication controller``) has a master and
slaves instead of a raft group. The controller lives in the nameserver's raft
state (:mod:`nameserver.control_state`) and keeps, per group, a
:class:`ReplicaSet`: the master, its epoch, and the SyncStateSet (the
replicas that hold every write the master acknowledged).

Invariants, which together mean no acknowledged write is lost:

- The master acknowledges a write only once every member of the
  SyncStateSet it knows has it (``storage_node.master_slave``), and only
  while that set is the controller's (the set it knows at
  ``sync_state_set_epoch``).
- A set shrinks only by the master's request at its current epoch, so the
  master stops waiting for a slave only after the controller recorded that
  the slave no longer counts (an elected slave is never one that missed an
  acknowledged write).
- A new master is elected only from the SyncStateSet, and every election
  bumps ``epoch``. Every request carries the sender's epoch; an older one is
  refused (:class:`Fenced`), by the controller here and by slaves, so an old
  master paused through an election can neither change the set nor get a
  slave to take its writes.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nameserver.errors import BadRequest, NameserverError
from protocol import errors

NO_MASTER = 0
REPLICAS_MAX = 3
"""Most replicas of a controller-mode group (``storage_node.controlled_node`` commits
on every member of a SyncStateSet of at most three)."""


class Fenced(NameserverError):
    """The sender's master epoch (or SyncStateSet epoch) is older than the
    controller's: it no longer masters the group. ``master`` and ``epoch`` are
    the current ones. NOT_LEADER: retriable once the sender follows the new master."""

    code = errors.NOT_LEADER

    def __init__(self, message: str, master: int, epoch: int) -> None:
        super().__init__(message)
        self.master = master
        self.epoch = epoch


class NoEligibleMaster(NameserverError):
    """No live replica may become master (none of the SyncStateSet is alive): the
    group waits, rather than elect a replica that may miss acknowledged writes."""

    code = errors.UNAVAILABLE


@dataclass(frozen=True, slots=True)
class ReplicaSet:
    """One controller-mode group as the controller records it.

    ``epoch`` grows by one at every election; ``sync_state_set_epoch`` at every
    change of ``sync_state_set`` (an election included). ``master`` is
    ``NO_MASTER`` until the first election.
    """

    group_id: int
    replicas: tuple[int, ...]
    master: int = NO_MASTER
    epoch: int = 0
    sync_state_set: tuple[int, ...] = ()
    sync_state_set_epoch: int = 0


def place(group_id: int, replicas: tuple[int, ...]) -> ReplicaSet:
    """A new group on ``replicas`` (distinct node ids), with no master yet."""
    if not replicas or len(set(replicas)) != len(replicas) or min(replicas) <= 0:
        raise BadRequest(
            f"group {group_id}: replicas must be distinct positive node ids, got {list(replicas)}"
        )
    return ReplicaSet(group_id, tuple(sorted(replicas)))


def alive(
    replicas: tuple[int, ...],
    heard_ms: dict[int, int],
    heard_at_least_ms: int,
    now_ms: int,
    dead_after_ms: int,
) -> frozenset[int]:
    """The replicas heard within ``dead_after_ms`` of ``now_ms``; each counts as heard at
    ``heard_at_least_ms`` at the latest (a controller that just began to lead has heard
    nobody yet, or only long ago: it gives every node until then to be heard)."""
    return frozenset(
        n for n in replicas if now_ms - max(heard_ms.get(n, 0), heard_at_least_ms) < dead_after_ms
    )


def eligible(group: ReplicaSet, alive: frozenset[int]) -> tuple[int, ...]:
    """The replicas that may become master now: live members of the SyncStateSet
    (any live replica before the first election, when no write exists yet)."""
    pool = group.sync_state_set if group.epoch > 0 else group.replicas
    return tuple(n for n in pool if n in alive)


def needs_election(group: ReplicaSet, alive: frozenset[int]) -> bool:
    """Whether the controller should elect: no master, or the master is not alive,
    and some replica is eligible."""
    if group.master != NO_MASTER and group.master in alive:
        return False
    return bool(eligible(group, alive))


def elect_master(group: ReplicaSet, alive: frozenset[int]) -> ReplicaSet:
    """The group after an election among ``alive``.

    A live master stays (nothing changes). Otherwise an eligible node becomes
    master at ``epoch + 1`` with a SyncStateSet of itself alone: the slaves
    rejoin it once they hold its log (the master expands the set). Which one
    rotates with the group id, so a cluster's masters spread over its nodes.
    Raises :class:`NoEligibleMaster` when no member of the SyncStateSet is alive.
    """
    if group.master != NO_MASTER and group.master in alive:
        return group
    candidates = eligible(group, alive)
    if not candidates:
        raise NoEligibleMaster(
            f"group {group.group_id}: no live replica of the SyncStateSet "
            f"{list(group.sync_state_set)} may become master (alive: {sorted(alive)})"
        )
    master = candidates[group.group_id % len(candidates)]
    return replace(
        group,
        master=master,
        epoch=group.epoch + 1,
        sync_state_set=(master,),
        sync_state_set_epoch=group.sync_state_set_epoch + 1,
    )


def check_master(group: ReplicaSet, master: int, epoch: int) -> None:
    """Raise :class:`Fenced` unless ``master`` at ``epoch`` is the group's master now."""
    if master != group.master or epoch != group.epoch:
        raise Fenced(
            f"group {group.group_id}: node {master} at epoch {epoch} is not the master "
            f"(the master is node {group.master} at epoch {group.epoch})",
            group.master,
            group.epoch,
        )


def alter_sync_state_set(
    group: ReplicaSet,
    master: int,
    epoch: int,
    sync_state_set_epoch: int,
    sync_state_set: tuple[int, ...],
) -> ReplicaSet:
    """The group after its master asked for a new SyncStateSet.

    Refused (:class:`Fenced`) unless ``master`` is the master at ``epoch`` and knows
    the current set (``sync_state_set_epoch``); refused (:class:`BadRequest`) unless
    the new set holds the master and only replicas of the group.
    """
    check_master(group, master, epoch)
    if sync_state_set_epoch != group.sync_state_set_epoch:
        raise Fenced(
            f"group {group.group_id}: SyncStateSet epoch {sync_state_set_epoch} is stale "
            f"(the set is {list(group.sync_state_set)} at {group.sync_state_set_epoch})",
            group.master,
            group.epoch,
        )
    members = tuple(sorted(set(sync_state_set)))
    if master not in members:
        raise BadRequest(
            f"group {group.group_id}: the SyncStateSet {list(members)} must hold the master"
        )
    strangers = [n for n in members if n not in group.replicas]
    if strangers:
        raise BadRequest(
            f"group {group.group_id}: nodes {strangers} are not replicas ({list(group.replicas)})"
        )
    if members == group.sync_state_set:
        return group
    return replace(
        group, sync_state_set=members, sync_state_set_epoch=group.sync_state_set_epoch + 1
    )
