"""The control state: what the nameserver's raft group holds beside the metadata.

- The ensemble: the address of every nameserver that joined the group after
  it was bootstrapped (``rip5 admin nameserver add``), so every replica (and
  one restarted with its original ``--peers``) can reach every member.
- The RIP-44 controller: one :class:`nameserver.controller.ReplicaSet` per
  controller-mode group (master, epoch, SyncStateSet).

Changed only by :meth:`ControlState.apply` of a control command
(:mod:`nameserver.control_commands`); a refused command raises a
:class:`NameserverError` and changes nothing, identically on every replica.

PURE.
"""

from __future__ import annotations

from dataclasses import dataclass

from nameserver import control_commands as cc
from nameserver import controller
from nameserver.codec import from_wire, pack, to_wire, unpack_raw
from nameserver.controller import ReplicaSet
from nameserver.errors import BadRequest, DecodeFailed, NotFound
from protocol import control_api as ctl

SNAPSHOT_VERSION = 1


@dataclass(frozen=True, slots=True)
class NameserverMember:
    """A nameserver's id and the address it serves on."""

    node_id: int
    address: str


@dataclass(frozen=True, slots=True)
class _Tables:
    """The snapshot's body, each tuple in key order."""

    members: tuple[NameserverMember, ...]
    replica_sets: tuple[ReplicaSet, ...]


class ControlState:
    """Nameserver addresses and controller-mode groups (see the module docstring)."""

    def __init__(self) -> None:
        """An empty state."""
        self.addresses: dict[int, str] = {}
        self.replica_sets: dict[int, ReplicaSet] = {}

    def is_empty(self) -> bool:
        """Nothing recorded yet (a snapshot then needs no control part)."""
        return not self.addresses and not self.replica_sets

    def replica_set(self, group_id: int) -> ReplicaSet:
        """The controller's record of ``group_id``; :class:`NotFound` if it has none."""
        group = self.replica_sets.get(group_id)
        if group is None:
            raise NotFound(f"group {group_id} is not a controller-mode group")
        return group

    def apply(self, command: cc.ControlCommand) -> object:
        """Apply one committed control command; its answer (the changed
        :class:`ReplicaSet`, or None). Raises without changing anything when refused."""
        if isinstance(command, cc.SetNameserverAddress):
            if command.node_id <= 0 or not command.address:
                raise BadRequest("a nameserver needs a positive node id and an address")
            self.addresses[command.node_id] = command.address
            return None
        if isinstance(command, cc.ForgetNameserver):
            self.addresses.pop(command.node_id, None)
            return None
        if isinstance(command, cc.PlaceReplicaSet):
            if command.group_id in self.replica_sets:
                return self.replica_sets[command.group_id]
            group = controller.place(command.group_id, command.replicas)
        elif isinstance(command, cc.ElectMaster):
            group = controller.elect_master(
                self.replica_set(command.group_id), frozenset(command.alive)
            )
        else:
            group = controller.alter_sync_state_set(
                self.replica_set(command.group_id),
                command.master,
                command.epoch,
                command.sync_state_set_epoch,
                command.sync_state_set,
            )
        self.replica_sets[group.group_id] = group
        return group

    def snapshot(self) -> bytes:
        """Deterministic bytes of the whole state."""
        tables = _Tables(
            tuple(NameserverMember(n, self.addresses[n]) for n in sorted(self.addresses)),
            tuple(self.replica_sets[g] for g in sorted(self.replica_sets)),
        )
        return pack([SNAPSHOT_VERSION, to_wire(tables)])

    @classmethod
    def restore(cls, data: bytes) -> ControlState:
        """The state a :meth:`snapshot` was taken of."""
        raw = unpack_raw(data)
        if not isinstance(raw, list) or len(raw) != 2 or raw[0] != SNAPSHOT_VERSION:
            raise DecodeFailed(f"not a version {SNAPSHOT_VERSION} control snapshot")
        tables: _Tables = from_wire(_Tables, raw[1])
        state = cls()
        state.addresses = {m.node_id: m.address for m in tables.members}
        state.replica_sets = {g.group_id: g for g in tables.replica_sets}
        return state


SNAPSHOT_TAG = "control+metadata"
"""First element of a nameserver snapshot that carries a control state."""


def wrap_snapshot(control: ControlState, metadata: bytes) -> bytes:
    """The nameserver group's snapshot: the metadata snapshot as it is while the control
    state is empty (so older snapshots and newer ones without control data are the
    same bytes), else ``[SNAPSHOT_TAG, control snapshot, metadata snapshot]``."""
    if control.is_empty():
        return metadata
    return pack([SNAPSHOT_TAG, control.snapshot(), metadata])


def unwrap_snapshot(data: bytes) -> tuple[ControlState, bytes]:
    """The control state and the metadata snapshot bytes in a :func:`wrap_snapshot`."""
    # msgpack: 0x93 a 3-array, 0xb0 a 16-byte str; a metadata snapshot starts with an int.
    if not data.startswith(b"\x93\xb0" + SNAPSHOT_TAG.encode()):
        return ControlState(), data
    raw = unpack_raw(data)
    if (
        not isinstance(raw, list)
        or len(raw) != 3
        or not isinstance(raw[1], bytes)
        or not isinstance(raw[2], bytes)
    ):
        raise DecodeFailed(f"a {SNAPSHOT_TAG} snapshot is [tag, control bytes, metadata bytes]")
    return ControlState.restore(raw[1]), raw[2]


def replica_set_info(group: ReplicaSet) -> ctl.ReplicaSetInfo:
    """The wire form of a controller record."""
    return ctl.ReplicaSetInfo(
        group.group_id,
        list(group.replicas),
        group.master,
        group.epoch,
        list(group.sync_state_set),
        group.sync_state_set_epoch,
    )
