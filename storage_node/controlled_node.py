"""A controller-mode replica on the raft log machinery: the controller names the
leader, the SyncStateSet decides commits.

In controller mode (RIP-44) a group has a master and slaves; the master, its
epoch and the SyncStateSet are the controller's (:mod:`nameserver.controller`).
Everything else is what a raft group already does on this node: the same WAL,
rounds, transport, snapshots, state machine and storage API. So a
controller-mode replica is a :class:`raft.core.node.RawNode` driven
differently, and only here:

- **No elections.** Followers do not tick (no election timeout), votes and
  leader transfers are dropped, membership changes are refused. The leader
  ticks only to heartbeat (no quorum check: a master keeps serving while the
  controller, or a slave, is away).
- **Epoch = term.** When the controller names this node master at epoch E it
  becomes leader at term E (an empty entry starts the epoch); named a slave,
  it follows the master at E. Raft's term rules then fence an old master: a
  slave refuses its appends and answers with the newer term, and the old
  master steps down on that answer. A node that restarts as the master of its
  current epoch (it voted for itself in that term) leads it again.
- **Commit = every member of the commit set** (:func:`master_slave.commit_set`:
  the SyncStateSet, joined with a change under way). The leader's raft
  configuration is set to it (voters; the other replicas learners, so they
  keep receiving the log): a majority of two is both, and three members are
  two pairs joined (``voters`` and ``voters_outgoing``), whose joint commit
  is the minimum of all three. Controller mode has at most three replicas.
  A commit set smaller than ``min_in_sync`` counts every replica instead:
  nothing is acknowledged on fewer members than that.
- **SyncStateSet changes** are planned by :func:`master_slave.plan_sync_state_set`
  from the leader's progress (:meth:`ControlledNode.sync_state_request`); the
  shell sends them to the controller and reports the answer.

This configuration lives in memory only: on restart the node starts from its
WAL and waits for the controller's record.

PURE.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from protocol.control_api import AlterSyncStateSetRequest, ReplicaSetInfo
from raft.core.node import Config, RawNode
from raft.core.tracker import MembershipConfig
from raft.errors import InvalidConfChange
from raft.types import NONE, ConfChange, ConfChangeV2, LogReader, Message, MsgType, Role
from storage_node.master_slave import (
    MIN_IN_SYNC_DEFAULT,
    PeerSync,
    commit_set,
    plan_sync_state_set,
)

_DROPPED = frozenset(
    {
        MsgType.VOTE,
        MsgType.VOTE_RESP,
        MsgType.PRE_VOTE,
        MsgType.PRE_VOTE_RESP,
        MsgType.TIMEOUT_NOW,
        MsgType.TRANSFER_LEADER,
    }
)


def commit_config(me: int, members: frozenset[int], replicas: frozenset[int]) -> MembershipConfig:
    """The raft configuration whose commit is "every member holds it" (see the module
    docstring); the other replicas are learners."""
    others = sorted(members - {me})
    learners = frozenset(replicas - members - {me})
    if len(others) <= 1:
        return MembershipConfig(voters=frozenset({me, *others}), learners=learners)
    if len(others) == 2:
        return MembershipConfig(
            voters=frozenset({me, others[0]}),
            voters_outgoing=frozenset({me, others[1]}),
            learners=learners,
        )
    raise ValueError("controller mode holds at most 3 replicas (nameserver.controller)")


class ControlledNode(RawNode):
    """A raft replica led by the controller's choice (see the module docstring)."""

    def __init__(self, config: Config, log: LogReader, rand_int: Callable[[int], int]) -> None:
        """As :class:`RawNode`, without the leader's quorum check."""
        super().__init__(dataclasses.replace(config, check_quorum=False), log, rand_int)
        self.min_in_sync = MIN_IN_SYNC_DEFAULT
        """Below this many members in the commit set, every replica must hold an entry."""
        self.view: ReplicaSetInfo | None = None
        self.asked: AlterSyncStateSetRequest | None = None
        self.peers: dict[int, PeerSync] = {}

    # -- what raft mode does and this one does not ----------------------------------------

    def tick(self) -> None:
        """Heartbeats on the leader; nothing on a follower (it never campaigns)."""
        if self.raft.role == Role.LEADER:
            self.raft.tick()

    def campaign(self) -> None:
        """No elections in controller mode: the controller names the master."""

    def step(self, message: Message) -> None:
        """A peer's message; votes and leader transfers are dropped."""
        if message.type not in _DROPPED:
            super().step(message)

    def transfer_leader(self, to: int) -> None:
        """Ignored: the controller moves mastership, by election only."""

    def propose_conf_change(self, change: ConfChange | ConfChangeV2) -> None:
        """Refused: a controller-mode group's membership is the controller's."""
        raise InvalidConfChange("controller mode: the controller decides the group's members")

    # -- the controller ---------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The master epoch this replica is in (its raft term)."""
        return self.raft.term

    def follow(self, view: ReplicaSetInfo, now_ms: int) -> None:
        """Act on the controller's record of the group (polled, or an answer)."""
        raft = self.raft
        if view.epoch < raft.term or view.master == NONE:
            return  # an older record, or no master elected yet
        if self.view is None or view.epoch > self.view.epoch:
            self.asked = None
        elif self.asked is not None and view.sync_state_set_epoch > self.asked.sync_state_set_epoch:
            self.asked = None  # the change was recorded (or another one: ask anew)
        self.view = view
        if view.master != raft.id:
            if raft.term < view.epoch or raft.role == Role.LEADER or raft.lead != view.master:
                # Same epoch and an unknown leader (restarted): the vote is kept.
                raft.become_follower(view.epoch, view.master)
            return
        if raft.role != Role.LEADER and not self._lead(view.epoch, now_ms):
            return
        self._configure()

    def _lead(self, epoch: int, now_ms: int) -> bool:
        raft = self.raft
        if raft.term < epoch:
            raft.become_follower(epoch - 1, NONE)
            raft.become_candidate()  # term = epoch, voted for itself
        elif raft.vote == raft.id:
            raft.role = Role.CANDIDATE  # master of this epoch before a restart
        else:
            return False
        raft.become_leader()
        self.peers = {
            n: PeerSync(heard_ms=now_ms, caught_up_ms=now_ms)
            for n in self._replicas()
            if n != raft.id
        }
        return True

    def _replicas(self) -> frozenset[int]:
        return frozenset(self.view.replicas) if self.view is not None else frozenset()

    def _configure(self) -> None:
        """Set the leader's raft configuration to the commit set."""
        assert self.view is not None
        members = commit_set(
            self.view.sync_state_set, None if self.asked is None else self.asked.sync_state_set
        )
        if len(members) < self.min_in_sync:
            members = self._replicas() | {self.raft.id}  # nothing commits on fewer
        wanted = commit_config(self.raft.id, members, self._replicas())
        if self.raft.tracker.config != wanted:
            self.raft.switch_to_config(wanted)

    def behind(self) -> bool:
        """As master: some replica lacks part of the log (the host keeps the group
        awake: a quiesced leader sends a restarted slave nothing to catch up with)."""
        raft = self.raft
        if raft.role != Role.LEADER:
            return False
        last = raft.log.last_index()
        return any(p.match < last for p in raft.tracker.progress.values())

    def sync_report(self, now_ms: int) -> str:
        """As master: each slave's match, when it last answered and when it last held
        the whole log (for logs), e.g. ``2: match 41/42, heard 0.1 s ago, caught up 0.6 s ago``."""
        last = self.raft.log.last_index()
        return "; ".join(
            f"{n}: match {peer.match}/{last}, heard {(now_ms - peer.heard_ms) / 1000:.1f} s ago, "
            f"caught up {(now_ms - peer.caught_up_ms) / 1000:.1f} s ago"
            for n, peer in sorted(self.peers.items())
        )

    def on_fenced(self, master: int, epoch: int) -> None:
        """The controller knows a newer epoch: stop leading."""
        if epoch > self.raft.term:
            self.asked = None
            self.raft.become_follower(epoch, master)

    def sync_state_request(self, now_ms: int, lag_ms: int) -> AlterSyncStateSetRequest | None:
        """As master: the SyncStateSet change to ask of the controller now, if any;
        from the moment it is asked, it counts in the commit set. None while a
        change is under way (:attr:`asked`, which the shell may send again)."""
        raft = self.raft
        if raft.role != Role.LEADER or self.view is None or self.view.master != raft.id:
            return None
        last = raft.log.last_index()
        for n, peer in self.peers.items():
            progress = raft.tracker.progress.get(n)
            if progress is not None and (progress.match > peer.match or progress.match >= last):
                peer.observe(progress.match, last, now_ms)
            else:
                peer.track(last, now_ms)
        if self.asked is not None:
            return None
        members = plan_sync_state_set(
            raft.id,
            self.view.sync_state_set,
            self.peers,
            raft.log.committed,
            last,
            now_ms,
            lag_ms,
        )
        if members is None:
            return None
        self.asked = AlterSyncStateSetRequest(
            self.view.group_id,
            raft.id,
            self.view.epoch,
            self.view.sync_state_set_epoch,
            members,
        )
        self._configure()
        return self.asked
