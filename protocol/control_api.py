"""The nameserver's control API: its own membership and the RIP-44 controller
(``angelia_rpc.cluster_services.ControlService``, wire names ``control.*``).

Served by every nameserver; like the metadata API, only the leader answers
(a follower answers NOT_LEADER with the leader's address as the hint).

- Membership: list the nameserver group's members, add one (it must already
  run, started with ``--join``), remove one. Each change is a raft
  membership change of the nameserver's group.
- Controller: the controller-mode groups' masters, epochs and SyncStateSets;
  a master asks to change its SyncStateSet with its epoch (an older epoch is
  refused NOT_LEADER: that master is fenced).

Evolution: fields are only added at the end, with a default.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROLE_VOTER = "voter"
ROLE_LEARNER = "learner"


@dataclass(frozen=True, slots=True)
class NameserverMemberInfo:
    """One member of the nameserver group: ``role`` is ``voter`` or ``learner``."""

    node_id: int
    address: str
    role: str
    leader: bool = False


@dataclass(frozen=True, slots=True)
class MembersRequest:
    """List the nameserver group's members."""


@dataclass(frozen=True, slots=True)
class AddMemberRequest:
    """Add nameserver ``node_id``, serving at ``address`` (started with ``--join``)."""

    node_id: int
    address: str


@dataclass(frozen=True, slots=True)
class RemoveMemberRequest:
    """Remove nameserver ``node_id`` from the group."""

    node_id: int


@dataclass(frozen=True, slots=True)
class MembersResponse:
    """The group's members after the call, by node id."""

    members: list[NameserverMemberInfo] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReplicaSetInfo:
    """A controller-mode group: its replicas, master (0: none yet) at ``epoch``, and
    SyncStateSet at ``sync_state_set_epoch``."""

    group_id: int
    replicas: list[int]
    master: int
    epoch: int
    sync_state_set: list[int]
    sync_state_set_epoch: int


@dataclass(frozen=True, slots=True)
class ReplicaSetsRequest:
    """The controller's groups (all of them when ``group_ids`` is empty). A storage
    node names itself (``node_id``): its reads are its heartbeats to the controller."""

    group_ids: list[int] = field(default_factory=list)
    node_id: int = 0


@dataclass(frozen=True, slots=True)
class ReplicaSetsResponse:
    """The controller's groups asked for, by group id."""

    groups: list[ReplicaSetInfo] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetRequest:
    """The master of ``group_id`` at ``epoch`` asks for ``sync_state_set`` in place of
    the set it knows at ``sync_state_set_epoch``."""

    group_id: int
    master: int
    epoch: int
    sync_state_set_epoch: int
    sync_state_set: list[int]


@dataclass(frozen=True, slots=True)
class ReplicaSetResponse:
    """One group after the call."""

    group: ReplicaSetInfo
