"""One replica of a controller-mode group (RIP-44): the master/slave log shipper's
decisions, beside the raft core that replicates groups in raft mode.

The controller (:mod:`nameserver.controller`, in the nameserver's raft state)
names each group's master, its epoch and its SyncStateSet; this core does the
rest, on values only (the shell moves the messages, persists the log and
asks the controller):

- **Master.** Appends client commands at its epoch. An entry is committed
  (acknowledged, applied) once every member of the *commit set* holds it,
  and only while that set has at least ``min_in_sync`` members. The commit
  set is the SyncStateSet the controller confirmed, joined with the set a
  change under way asks for: a shrink stops counting a slave only once the
  controller recorded it, an expand counts the new member from the moment
  it is asked for. So every member of the controller's set holds every
  committed entry, which is what makes an elected member safe.
- **SyncStateSet changes** (:meth:`MasterSlaveReplica.sync_state_request`): a
  member silent, or not caught up with the master's log, for ``lag_ms`` is
  dropped (:class:`PeerSync`); a slave whose log reaches
  the commit index is added. One change at a time; the controller answers
  with the group's record, or refuses a fenced master.
- **Slaves** take a master's appends only at an epoch at least their own
  (:meth:`MasterSlaveReplica.on_append`): a master paused through an
  election is refused with the newer epoch and stops (it is *fenced*); its
  entries past the new master's log were never committed, and a slave
  drops such a divergent suffix when the new master's log says so (an entry
  is named by its index and epoch: one master per epoch).

Logs are 1-based. The core keeps the entries (the shell may keep the data
elsewhere and put placeholders here: only ``epoch`` is read).

PURE.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from protocol.control_api import AlterSyncStateSetRequest as AlterRequest
from protocol.control_api import ReplicaSetInfo as ControllerView
from storage_node.errors import BadCommand, StorageNotLeader

MIN_IN_SYNC_DEFAULT = 1
LAG_MS_DEFAULT = 1_000
APPEND_ENTRIES_MAX = 256


class Role(enum.Enum):
    """What this replica does now."""

    NONE = "none"  # no controller record seen yet
    MASTER = "master"
    SLAVE = "slave"
    FENCED = "fenced"  # was master; a newer epoch exists (it waits for the controller)


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One command in a group's log, written by the master of ``epoch``."""

    epoch: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Append:
    """Master -> slave: ``entries`` follow the entry at ``prev_index`` (of ``prev_epoch``)."""

    group_id: int
    master: int
    epoch: int
    prev_index: int
    prev_epoch: int
    entries: tuple[LogEntry, ...]
    commit: int


@dataclass(frozen=True, slots=True)
class AppendReply:
    """Slave -> master. Accepted: the slave's log matches the master's up to ``match``.
    Refused: ``epoch`` is newer than the master's (it is fenced), or the logs differ
    at ``prev_index`` and the master should retry from ``hint`` (<= the slave's last)."""

    group_id: int
    node: int
    epoch: int
    accepted: bool
    match: int
    hint: int = 0


@dataclass(slots=True)
class PeerSync:
    """What a master knows of one slave's sync: its match, when it last answered,
    and when it last held the whole log.

    Behind is measured the way Kafka measures a follower's lag: ``caught_up_ms``
    is the latest moment the slave is known to have held every entry the
    master had then (a *mark*, the master's last index at one observation, is
    reached by a later one). A slave that keeps up with a steady stream is
    never exactly at the log's end when sampled, yet it keeps reaching the
    marks, so it stays in sync; one that stops reaching them lags."""

    next_index: int = 1
    match: int = 0
    heard_ms: int = 0  # when it last answered (accepted), or this master took over
    answered: bool = False  # it accepted an append of this master
    caught_up_ms: int = 0  # it held the master's whole log then (or this master took over)
    mark_index: int | None = None  # the master's last index at ``mark_ms``, not reached yet
    mark_ms: int = 0

    def observe(self, match: int, last_index: int, now_ms: int) -> None:
        """The slave holds the master's log up to ``match`` (an accepted append)."""
        self.heard_ms = now_ms
        self.answered = True
        self.match = max(self.match, match)
        self.next_index = max(self.next_index, self.match + 1)
        self.track(last_index, now_ms)

    def track(self, last_index: int, now_ms: int) -> None:
        """Compare the slave's match with the master's log (``last_index``) at ``now_ms``:
        at the end, it is caught up now; past the pending mark, it was caught up at
        the mark's time. A new mark is set at ``last_index`` when none is pending."""
        if self.match >= last_index:
            self.caught_up_ms = now_ms
            self.mark_index = None
            return
        if self.mark_index is not None and self.match >= self.mark_index:
            self.caught_up_ms = max(self.caught_up_ms, self.mark_ms)
            self.mark_index = None
        if self.mark_index is None:
            self.mark_index, self.mark_ms = last_index, now_ms

    def lags(self, now_ms: int, lag_ms: int) -> bool:
        """Silent, or not caught up with the master's log, for ``lag_ms`` or longer."""
        return now_ms - self.heard_ms >= lag_ms or now_ms - self.caught_up_ms >= lag_ms

    def caught_up(self, commit: int, last_index: int, now_ms: int, lag_ms: int) -> bool:
        """Holds every committed entry, is close to the log's end, and answers."""
        return (
            self.answered
            and self.match >= commit
            and self.match >= last_index - APPEND_ENTRIES_MAX
            and now_ms - self.heard_ms < lag_ms
        )


def commit_set(sync_state_set: Iterable[int], asked: Iterable[int] | None) -> frozenset[int]:
    """Who must hold an entry before the master commits it: the controller's set,
    joined with the set a change under way asks for (see the module docstring)."""
    return frozenset(sync_state_set) | frozenset(asked or ())


def plan_sync_state_set(
    me: int,
    sync_state_set: Iterable[int],
    peers: Mapping[int, PeerSync],
    commit: int,
    last_index: int,
    now_ms: int,
    lag_ms: int,
) -> list[int] | None:
    """The SyncStateSet the master should ask for now, or None: the first member
    that lags is dropped; else the first caught-up replica outside it is added."""
    members = set(sync_state_set)
    for n in sorted(members - {me}):
        peer = peers.get(n)
        if peer is not None and peer.lags(now_ms, lag_ms):
            return sorted(members - {n})
    for n, peer in sorted(peers.items()):
        if n not in members and peer.caught_up(commit, last_index, now_ms, lag_ms):
            return sorted(members | {n})
    return None


@dataclass(slots=True)
class MasterSlaveReplica:
    """This node's replica of one controller-mode group (see the module docstring)."""

    node_id: int
    group_id: int
    replicas: tuple[int, ...]
    min_in_sync: int = MIN_IN_SYNC_DEFAULT
    lag_ms: int = LAG_MS_DEFAULT
    role: Role = Role.NONE
    epoch: int = 0
    master: int = 0
    log: list[LogEntry] = field(default_factory=list)
    commit: int = 0
    sync_state_set: tuple[int, ...] = ()
    sync_state_set_epoch: int = 0
    asked: AlterRequest | None = None  # the change under way
    peers: dict[int, PeerSync] = field(default_factory=dict)

    # -- the log ----------------------------------------------------------------------

    @property
    def last_index(self) -> int:
        """Index of the last entry (0: empty)."""
        return len(self.log)

    def epoch_at(self, index: int) -> int:
        """Epoch of the entry at ``index`` (0 for index 0)."""
        return self.log[index - 1].epoch if index > 0 else 0

    # -- the controller ---------------------------------------------------------------

    def on_controller(self, view: ControllerView, now_ms: int) -> None:
        """The controller's record of the group (``ReplicaSetInfo``: polled, or in an answer).

        A newer epoch makes this replica master (if named) or a slave of the
        named master. At the same epoch, the master takes a newer SyncStateSet
        (a change it asked for, confirmed)."""
        if view.epoch < self.epoch:
            return
        if (
            view.epoch > self.epoch
            or self.role in (Role.NONE, Role.FENCED)
            or view.master != self.master
        ):
            self.epoch = view.epoch
            self.master = view.master
            self.asked = None
            self.sync_state_set = tuple(view.sync_state_set)
            self.sync_state_set_epoch = view.sync_state_set_epoch
            if view.master == self.node_id:
                self.role = Role.MASTER
                self.peers = {
                    n: PeerSync(self.last_index + 1, heard_ms=now_ms, caught_up_ms=now_ms)
                    for n in self.replicas
                    if n != self.node_id
                }
                self._advance_commit()
            else:
                self.role = Role.SLAVE
                self.peers = {}
            return
        if view.sync_state_set_epoch > self.sync_state_set_epoch:
            self.sync_state_set = tuple(view.sync_state_set)
            self.sync_state_set_epoch = view.sync_state_set_epoch
            if (
                self.asked is not None
                and self.asked.sync_state_set_epoch < view.sync_state_set_epoch
            ):
                self.asked = None
            if self.role is Role.MASTER:
                self._advance_commit()

    def on_fenced(self, master: int, epoch: int) -> None:
        """The controller (or a slave) knows a newer epoch: stop mastering."""
        if epoch > self.epoch:
            self.epoch = epoch
            self.master = master
            self.asked = None
            if self.role is Role.MASTER:
                self.role = Role.FENCED

    def on_alter_refused(self) -> None:
        """The controller refused the change under way (not fenced): ask again later."""
        self.asked = None

    def commit_set(self) -> frozenset[int]:
        """Who must hold an entry before it commits (:func:`commit_set`)."""
        return commit_set(
            self.sync_state_set, None if self.asked is None else self.asked.sync_state_set
        )

    def sync_state_request(self, now_ms: int) -> AlterRequest | None:
        """The SyncStateSet change to ask of the controller now, if any (the master
        asks for one at a time; the shell sends it and reports the answer)."""
        if self.role is not Role.MASTER or self.asked is not None:
            return None
        members = plan_sync_state_set(
            self.node_id,
            self.sync_state_set,
            self.peers,
            self.commit,
            self.last_index,
            now_ms,
            self.lag_ms,
        )
        if members is None:
            return None
        self.asked = AlterRequest(
            self.group_id, self.node_id, self.epoch, self.sync_state_set_epoch, members
        )
        self._advance_commit()
        return self.asked

    # -- the master -------------------------------------------------------------------

    def propose(self, data: bytes) -> int:
        """Append a client command (master only); its index. It commits later
        (:attr:`commit`), once the commit set holds it."""
        if self.role is not Role.MASTER:
            raise StorageNotLeader(
                f"node {self.node_id} is not the master of group {self.group_id} "
                f"(role {self.role.value}, epoch {self.epoch}, master {self.master or 'unknown'})",
                "",
            )
        if not data:
            raise BadCommand("an entry needs data")
        self.log.append(LogEntry(self.epoch, data))
        self._advance_commit()
        return self.last_index

    def appends(self, entries_max: int = APPEND_ENTRIES_MAX) -> list[tuple[int, Append]]:
        """What the master sends each slave now, as (slave, append): the entries it
        lacks (from its next index), or none (a heartbeat carrying the commit index)."""
        if self.role is not Role.MASTER:
            return []
        out = []
        for n, peer in sorted(self.peers.items()):
            prev = min(peer.next_index - 1, self.last_index)
            entries = tuple(self.log[prev : prev + entries_max])
            out.append(
                (
                    n,
                    Append(
                        self.group_id,
                        self.node_id,
                        self.epoch,
                        prev,
                        self.epoch_at(prev),
                        entries,
                        self.commit,
                    ),
                )
            )
            peer.next_index = prev + len(entries) + 1
        return out

    def on_reply(self, reply: AppendReply, now_ms: int) -> None:
        """A slave's answer to an append."""
        peer = self.peers.get(reply.node)
        if self.role is not Role.MASTER or peer is None:
            return
        if reply.epoch > self.epoch:
            self.on_fenced(0, reply.epoch)
            return
        if reply.epoch < self.epoch:
            return  # an answer to an older master's append
        if not reply.accepted:
            peer.next_index = max(1, min(reply.hint + 1, peer.next_index - 1))
            return
        peer.observe(reply.match, self.last_index, now_ms)
        self._advance_commit()

    def _advance_commit(self) -> None:
        if self.role is not Role.MASTER:
            return
        members = self.commit_set()
        if len(members) < self.min_in_sync:
            return
        held = [
            self.last_index if n == self.node_id else self.peers[n].match
            for n in members
            if n == self.node_id or n in self.peers
        ]
        if len(held) < len(members):
            return  # a member that is no replica of the group holds nothing
        # Unlike raft, an entry of an older epoch commits by counting too: masters are
        # elected from the SyncStateSet, not by votes, and every member of the commit set
        # holds this master's log up to its match (appends are checked at prev_index).
        point = min(held)
        self.commit = max(self.commit, point)

    # -- the slave --------------------------------------------------------------------

    def on_append(self, append: Append) -> AppendReply:
        """A master's append: taken if its epoch is current and the logs match at
        ``prev_index`` (a conflicting suffix is dropped first)."""
        if append.epoch < self.epoch or (append.epoch == self.epoch and self.role is Role.MASTER):
            return AppendReply(self.group_id, self.node_id, self.epoch, False, 0)
        if append.epoch > self.epoch or self.role in (Role.NONE, Role.FENCED):
            self.epoch = append.epoch
            self.master = append.master
            self.role = Role.SLAVE
            self.asked = None
            self.peers = {}
        if append.prev_index > self.last_index or (
            self.epoch_at(append.prev_index) != append.prev_epoch
        ):
            hint = min(append.prev_index - 1, self.last_index)
            return AppendReply(self.group_id, self.node_id, self.epoch, False, 0, hint)
        index = append.prev_index
        for entry in append.entries:
            index += 1
            if index <= self.last_index:
                if self.log[index - 1].epoch == entry.epoch:
                    continue
                if index <= self.commit:
                    raise AssertionError("a committed entry would be overwritten")
                del self.log[index - 1 :]
            self.log.append(entry)
        match = append.prev_index + len(append.entries)
        self.commit = max(self.commit, min(append.commit, match))
        return AppendReply(self.group_id, self.node_id, self.epoch, True, match)
