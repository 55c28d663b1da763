"""The commands of the control state (:mod:`nameserver.control_state`): the
nameserver ensemble's member addresses and the RIP-44 controller's groups.

They share the nameserver's raft log with the metadata commands
(:mod:`nameserver.commands`) but are told apart by their first element: a
metadata entry is ``[op code, fields]``, a control entry is
``[CONTROL_TAG, op code, fields]``, so the two op code spaces never collide.

Like every command, they carry everything apply needs: the leader stamps
decisions (who is alive) into them, so every replica applies the same log to
the same state.

Evolution rules: op codes are ONLY ADDED AT THE END of ``ControlOp`` and never
reused; a command's fields are only added at the end, with a default.

PURE.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from nameserver.codec import from_wire, pack, unpack_raw
from nameserver.errors import DecodeFailed

CONTROL_TAG = "control"
"""First element of a control entry (a metadata entry starts with an int op code)."""


class ControlOp(enum.IntEnum):
    """One number naming a control command. ONLY ADD TO THE END; never reuse a number."""

    SET_NAMESERVER_ADDRESS = 1
    FORGET_NAMESERVER = 2
    PLACE_REPLICA_SET = 3
    ELECT_MASTER = 4
    ALTER_SYNC_STATE_SET = 5


@dataclass(frozen=True, slots=True)
class SetNameserverAddress:
    """Nameserver ``node_id`` listens at ``address`` (proposed before it joins the group)."""

    op: ClassVar[ControlOp] = ControlOp.SET_NAMESERVER_ADDRESS
    node_id: int
    address: str


@dataclass(frozen=True, slots=True)
class ForgetNameserver:
    """Nameserver ``node_id`` left the group: forget its address."""

    op: ClassVar[ControlOp] = ControlOp.FORGET_NAMESERVER
    node_id: int


@dataclass(frozen=True, slots=True)
class PlaceReplicaSet:
    """Controller mode: group ``group_id`` is replicated on ``replicas`` (no master yet;
    an :class:`ElectMaster` follows)."""

    op: ClassVar[ControlOp] = ControlOp.PLACE_REPLICA_SET
    group_id: int
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ElectMaster:
    """Elect a master of ``group_id`` among ``alive`` (as the leader saw it when it
    proposed): see :func:`nameserver.controller.elect_master`."""

    op: ClassVar[ControlOp] = ControlOp.ELECT_MASTER
    group_id: int
    alive: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AlterSyncStateSet:
    """The master of ``group_id`` at ``epoch`` asks to change its SyncStateSet, which
    it knows at ``sync_state_set_epoch``, to ``sync_state_set``: see
    :func:`nameserver.controller.alter_sync_state_set`."""

    op: ClassVar[ControlOp] = ControlOp.ALTER_SYNC_STATE_SET
    group_id: int
    master: int
    epoch: int
    sync_state_set_epoch: int
    sync_state_set: tuple[int, ...]


ControlCommand = (
    SetNameserverAddress | ForgetNameserver | PlaceReplicaSet | ElectMaster | AlterSyncStateSet
)

COMMAND_OF_OP: dict[ControlOp, type[ControlCommand]] = {
    command.op: command
    for command in (
        SetNameserverAddress,
        ForgetNameserver,
        PlaceReplicaSet,
        ElectMaster,
        AlterSyncStateSet,
    )
}


def encode(command: ControlCommand) -> bytes:
    """The log entry bytes of ``command``: ``[CONTROL_TAG, op, fields]``."""
    return pack([CONTROL_TAG, int(command.op), command])


def is_control(data: bytes) -> bool:
    """Whether a log entry holds a control command (cheap: looks at the array's head).

    msgpack writes a 3-array as 0x93 and a 7-character str as 0xA7 followed by its
    bytes; a metadata entry is a 2-array (0x92).
    """
    return data[:9] == b"\x93\xa7" + CONTROL_TAG.encode()


def decode(data: bytes) -> ControlCommand:
    """The control command in a log entry; :class:`DecodeFailed` names what is wrong."""
    raw = unpack_raw(data)
    if (
        not isinstance(raw, list)
        or len(raw) != 3
        or raw[0] != CONTROL_TAG
        or not isinstance(raw[1], int)
    ):
        raise DecodeFailed(f"a control command is an array [{CONTROL_TAG!r}, op code, fields]")
    try:
        kind = COMMAND_OF_OP[ControlOp(raw[1])]
    except ValueError:
        raise DecodeFailed(f"unknown control op {raw[1]} (written by a newer version?)") from None
    command: ControlCommand = from_wire(kind, raw[2])
    return command
