"""What one round sends: its messages and quiesce notices, one batch per node.

Early sends: a settled leader's appends and heartbeats may go before the
round's fdatasync (see :func:`encode_outgoing`); everything else waits for it.

PURE.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

from raft.host import wire
from raft.host.collaborators import StateMachine
from raft.host.group_state import Round
from raft.types import ConfState, Message, MsgType, Ready, Snapshot

_EARLY = frozenset({MsgType.APP, MsgType.HEARTBEAT})


def needs_a_follower(conf: ConfState) -> bool:
    """Whether every configuration has two voters or more (joint: both halves)."""
    return len(conf.voters) >= 2 and (not conf.voters_outgoing or len(conf.voters_outgoing) >= 2)


def split_early(rd: Ready, early_send: bool) -> tuple[Sequence[Message], Sequence[Message]]:
    """A Ready's messages as (may go before its fsync, must wait for it).

    Early are the appends and heartbeats of a leader that led at its previous
    Ready already (so its term and vote are durable), when ``early_send``:
    every configuration of the group has two voters or more
    (:func:`needs_a_follower`). See :func:`encode_outgoing` for why.
    """
    if not early_send or rd.soft_state is not None:
        return (), rd.messages
    early = [m for m in rd.messages if m.type in _EARLY]
    if not early:
        return (), rd.messages
    return early, [m for m in rd.messages if m.type not in _EARLY]


def encode_outgoing(
    node_id: int, rnd: Round, batch_bytes_max: int, part: str
) -> Iterator[tuple[int, bytes]]:
    """The round's messages and notices from ``node_id``, encoded per destination node.

    Usually one batch per node per round; a node's messages are split into
    several batches when their entries exceed ``batch_bytes_max`` (a
    catching-up follower), so no batch outgrows the transport's frame limit.

    ``part``: "all"; or "early", the messages that may go before the
    round's fdatasync, then "late", the rest (and the notices). Early are
    the appends and heartbeats of a leader that was leader at its previous
    Ready already (its term and vote are durable) in a group where every
    configuration has two voters or more (Raft thesis 10.2.1: the leader
    writes its log in parallel with replicating it). Safe because the core
    counts the leader's own write when it appends, yet an entry of this
    round cannot commit before a follower acknowledges it, which it cannot
    do before receiving it, and whatever commits becomes visible (applied,
    or sent as the commit index) only in a later round, after this sync.
    Everything a follower or candidate sends waits for the sync.

    With early sends the simulation once broke election safety (seed 6125):
    a follower removed by a joint change kept the leave-joint entry but
    lost, to a torn write, the hard state saying the joint entry
    committed, so it campaigned in its old configuration (configurations
    take effect on apply, as in etcd/raft) while the new one elected
    another leader in the same term. No early send is in that chain; the
    core now refuses votes to a voter its applied configuration took out
    (``Raft._counts_as_voter``), and the seed passes.
    """
    per_node: dict[int, list[list[tuple[int, Message]]]] = {}
    sizes: dict[int, int] = {}
    for g, rd in zip(rnd.groups, rnd.readies, strict=True):
        chosen: Sequence[Message] = rd.messages
        if part == "early":
            chosen = split_early(rd, g.early_send)[0]
        elif part == "late":
            chosen = split_early(rd, g.early_send)[1]
        for chosen_message in chosen:
            message = chosen_message
            to = message.to
            if to == node_id:
                continue
            size = 64 + sum(len(e.data) + 16 for e in message.entries)
            if message.snapshot is not None:
                message = complete_snapshot(g.state_machine, message)
                assert message.snapshot is not None
                size += len(message.snapshot.data)
            batches = per_node.get(to)
            if batches is None:
                batches = per_node[to] = [[]]
                sizes[to] = 0
            elif sizes[to] + size > batch_bytes_max and batches[-1]:
                batches.append([])
                sizes[to] = 0
            batches[-1].append((g.group_id, message))
            sizes[to] += size
    notices_to = rnd.notices.keys() if part != "early" else set()
    for to in sorted(per_node.keys() | notices_to):
        batches = per_node.get(to) or [[]]
        for index, messages in enumerate(batches):
            last = index == len(batches) - 1
            notices = rnd.notices.get(to, ()) if last and part != "early" else ()
            yield to, wire.encode_batch(node_id, to, messages, notices)


def complete_snapshot(machine: StateMachine, message: Message) -> Message:
    """``message`` with its snapshot completed by the machine's ``snapshot_for_peer`` hook.

    The hook is optional (:class:`raft.host.collaborators.RetainingStateMachine`);
    without it the snapshot is sent as taken.
    """
    export: Callable[[Snapshot], bytes] | None = getattr(machine, "snapshot_for_peer", None)
    snapshot = message.snapshot
    if export is None or snapshot is None:
        return message
    return dataclasses.replace(
        message, snapshot=dataclasses.replace(snapshot, data=export(snapshot))
    )
