"""The asyncio shell that drives every raft group of one node.

One task runs rounds (see :mod:`raft.host.multiraft` for the round itself): take
the Readys of all groups with work, encode their entries and hard states
into the shared WAL with one flush (pwritev), make them durable with ONE
fdatasync (in a worker thread, while the loop goes on receiving and queueing
proposals), send one batch per peer node, apply committed entries, advance. A second
task ticks every ``tick_ms`` and sends each peer an (often empty) batch,
which is the node-level liveness signal that lets idle groups quiesce.

SHELL: the only place in raft/ with a clock, randomness, threads and the
event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from raft.core.confchange import decode_entry
from raft.core.config import Config
from raft.core.node import RawNode
from raft.errors import ProposalDropped, RaftError, RaftNotLeader, StorageFailed
from raft.host import wire
from raft.host.collaborators import GroupNode, StateMachine
from raft.host.compaction import CompactionStep
from raft.host.multiraft import MultiRaft
from raft.host.sync_thread import SyncThread
from raft.host.transport import RaftTransport
from raft.types import ConfChange, ConfChangeV2, ConfState, Entry
from raft.wal import format as wal_format
from raft.wal.logstore import LogStore
from raft.wal.snapshot_packs import SnapshotPack

_log = logging.getLogger(__name__)


class RoundObserver(Protocol):
    """What a driver reports as it works (metrics); called on the event loop."""

    def synced(self, seconds: float) -> None:
        """One WAL fdatasync took ``seconds``."""

    def committed(self, seconds: float) -> None:
        """One proposal was applied (or failed) ``seconds`` after it was submitted."""


@dataclass(frozen=True, slots=True)
class DriverOptions:
    """Timing and batching of one node's driver.

    With the defaults an election starts 0.5-1 s after a leader goes silent.
    """

    tick_ms: int = 50
    election_tick: int = 10
    heartbeat_tick: int = 2
    # A leader idle this many ticks (every voter matched, all applied) quiesces
    # its group. An awake idle group costs a tick per replica and a heartbeat
    # round every ``heartbeat_tick``: with many groups each proposed to now and
    # then (1024 groups, a proposal per group every ~1.5 s) that idle tail was
    # a sixth of a node's CPU at 6 ticks. 3 ticks still let one heartbeat go
    # out after the last append.
    quiesce_after_ticks: int = 3
    # Bounds what one follower can be sent per round while catching up
    # (max_size_per_msg_bytes x max_inflight_msgs per group).
    max_size_per_msg_bytes: int = 512 << 10
    max_inflight_msgs: int = 64
    # Snapshot a group every this many applied entries (0: never), then
    # compact its log to ``keep_entries`` below the snapshot.
    snapshot_entries: int = 0
    keep_entries: int = 1000
    # Compaction by retained WAL bytes (0: off). When the live segments hold
    # more than this, the groups pinning all but the newest
    # ``wal_keep_segments`` segments are snapshotted (one snapshot pack written
    # in a worker thread) and compacted up to their entries in those segments,
    # never past a group's truncate floor (Driver.set_truncate_floor), so
    # the segments are recycled as spares instead of new ones being zero-filled.
    wal_retain_bytes: int = 0
    wal_keep_segments: int = 2
    # fdatasync in a worker thread (the loop goes on receiving meanwhile) or
    # inline (no thread hand-off; cheaper when syncs are short and CPU is scarce).
    sync_in_thread: bool = True
    # A leader sends its appends while its own fdatasync runs (see
    # MultiRaft.outgoing); followers still acknowledge only durable entries.
    # OFF by default: no gain measured where an fdatasync takes ~0.4 ms (one
    # official producer: 158/126/132 msgs/s with it, 133/121/183 without).
    # The simulation's election-safety failure with it (seed 6125) is fixed
    # in the core (Raft._counts_as_voter); 8,000 seeds pass either way.
    send_before_sync: bool = False
    # Followers learn a new commit index from the next append or heartbeat
    # instead of from an empty append sent at once (Config.eager_commit_news).
    # OFF (lazy) by default: one message and its answer fewer per entry and
    # follower; 100,000 queues of one message each (`rip5 bench queues`, two
    # interleaved pairs): storage CPU 285-303 vs 333-340 us a message, the
    # 8-queue baseline 124-138 vs 165-178 us. A follower read sees an entry
    # up to a heartbeat (tick_ms x heartbeat_tick) later when nothing follows it.
    eager_commit_news: bool = False
    seed: int | None = None


def _apply_conf_change(node: GroupNode, entry: Entry) -> ConfState:
    assert isinstance(node, RawNode)
    return node.apply_conf_change(decode_entry(entry))


class Driver:
    """Hosts many raft groups of one node over one WAL and one transport."""

    def __init__(
        self,
        node_id: int,
        store: LogStore,
        transport: RaftTransport,
        options: DriverOptions | None = None,
    ) -> None:
        """Call :meth:`add_group` for each replica, then :meth:`start`."""
        self.node_id = node_id
        self.store = store
        self.transport = transport
        self.options = options or DriverOptions()
        self._rng = random.Random(self.options.seed)
        self.host = MultiRaft(
            node_id,
            quiesce_after_ticks=self.options.quiesce_after_ticks,
            liveness_timeout_ms=self.options.election_tick * self.options.tick_ms,
            conf_change_applier=_apply_conf_change,
            entry_bytes_max=store.segment_bytes - wal_format.SEGMENT_OVERHEAD_BYTES,
        )
        self._work = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # Every WAL fdatasync, in order, off the loop (a dedicated thread: cheaper per
        # round than an executor's hand-off).
        self._sync_thread = SyncThread(f"wal-sync-{node_id}")
        # Zero-filling a spare segment takes long: never let a sync wait behind it.
        self._spare_thread = ThreadPoolExecutor(1, thread_name_prefix=f"wal-spare-{node_id}")
        # Nor a spare behind a compaction's snapshot pack (a large one may take
        # long enough that the WAL ran out of spares and the loop zero-filled a
        # 64 MiB segment itself, in LogStore._start_segment).
        self._snapshot_thread = ThreadPoolExecutor(1, thread_name_prefix=f"wal-snap-{node_id}")
        self._failed: BaseException | None = None
        self._failed_event = asyncio.Event()
        # Held by each round (collect .. advance) and by remove_group.
        self._round_lock = asyncio.Lock()
        self._waiting: set[asyncio.Future[object]] = set()
        # Called at the start of every round, before its proposals are collected.
        self._round_hooks: list[Callable[[], None]] = []
        self._preparing_spare = False
        self._before_spare_fill: Callable[[list[int]], object] | None = None
        # Compaction by WAL bytes: at most one snapshot pack in flight.
        self._compacting = False
        # The steps of a compaction whose pack is durable, waiting to be recorded.
        self._compacted: tuple[list[CompactionStep], SnapshotPack] | None = None
        self._planned_at_segments = 0
        self.compactions = 0
        self.rounds = 0
        self.syncs = 0
        self.sync_s = 0.0
        # Told of every fdatasync and proposal when set (rip5's metrics); None: no cost.
        self.observer: RoundObserver | None = None

    # ---------------------------------------------------------------- setup
    def add_group(
        self,
        group_id: int,
        peers: Sequence[int],
        state_machine: StateMachine,
        node_class: type[RawNode] = RawNode,
        data_lost: bool = False,
    ) -> None:
        """Host this node's replica of ``group_id``; a new group is bootstrapped with ``peers``.

        ``node_class``: the replica's core, a :class:`RawNode` or a subclass that drives
        it differently (controller mode: ``storage_node.controlled_node``).
        ``data_lost``: this node lost its durable state; the replica neither votes nor
        campaigns until :meth:`lift_data_lost` (``raft.core.config.Config.data_lost``).

        Recovery: the state machine is restored from the group's snapshot (if
        any) and every committed entry after it is applied again.
        """
        log = self.store.group(group_id)
        _hard_state, conf_state = log.initial_state()
        if not conf_state.voters and log.last_index() == 0:
            self.store.set_conf_state(group_id, 0, ConfState(voters=frozenset(peers)))
            self.store.flush()
        snapshot = log.snapshot()
        applied = 0
        if not snapshot.is_empty():
            state_machine.restore(snapshot)
            applied = snapshot.metadata.index
        opts = self.options
        config = Config(
            id=self.node_id,
            election_tick=opts.election_tick,
            heartbeat_tick=opts.heartbeat_tick,
            applied=applied,
            max_size_per_msg_bytes=opts.max_size_per_msg_bytes,
            max_inflight_msgs=opts.max_inflight_msgs,
            data_lost=data_lost,
            eager_commit_news=opts.eager_commit_news,
        )
        node = node_class(config, log, self._rng.randrange)
        self.host.add_group(group_id, node, state_machine, peers)
        self.host.set_applied(group_id, applied)
        self._work.set()

    def lift_data_lost(self, group_id: int) -> None:
        """The replica of ``group_id`` may vote and campaign again (its group re-admitted
        this node after its data was lost)."""
        node = self.host.node(group_id)
        assert isinstance(node, RawNode)
        node.lift_data_lost()
        self.host.touch(group_id)
        self._work.set()

    async def remove_group(self, group_id: int) -> None:
        """Stop hosting ``group_id`` and delete its replica from the WAL (term and
        vote kept: see ``LogStore.drop_group``); no-op if it is not hosted.

        Call it once this node is no longer a member (its proposals fail with
        RaftNotLeader). It waits for the round under way, so the group is never
        removed between a round's collect and advance.
        """
        async with self._round_lock:
            for outcome in self.host.remove_group(group_id):
                future = outcome.token
                assert isinstance(future, asyncio.Future)
                self._waiting.discard(future)
                if not future.done() and outcome.error is not None:
                    future.set_exception(outcome.error)
            if self._failed is None:
                self.store.drop_group(group_id)
                self.store.flush()
                await self._sync_thread.run(self.store.sync)
                self.store.maybe_collect_garbage()

    async def start(self) -> None:
        """Start receiving, ticking and running rounds."""
        await self.transport.start(self._on_batch)
        self._tasks = [
            asyncio.create_task(self._run_rounds(), name=f"raft-rounds-{self.node_id}"),
            asyncio.create_task(self._run_ticks(), name=f"raft-ticks-{self.node_id}"),
        ]

    async def stop(self) -> None:
        """Stop the tasks and the transport; close the WAL. Waiting proposals fail."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.transport.close()
        self._fail_waiting(RaftNotLeader("the node is stopping"))
        self._sync_thread.shutdown()
        self._spare_thread.shutdown(wait=True)
        self._snapshot_thread.shutdown(wait=True)
        self.store.close()

    # ------------------------------------------------------------ proposals
    def propose_nowait(self, group_id: int, data: bytes) -> asyncio.Future[object]:
        """Queue a proposal; the future ends when it is applied here (or fails).

        Failures: ``RaftNotLeader`` (with the leader hint) if this replica does not
        lead the group, ``ProposalDropped`` if it was not appended or was
        overwritten, ``StorageFailed`` if the WAL failed.
        """
        return self._submit(lambda future: self.host.propose(group_id, data, future))

    def propose_many_nowait(self, group_id: int, payloads: list[bytes]) -> asyncio.Future[object]:
        """Queue entries proposed together; the future's result is the list of their results.

        Cheaper than one future per entry; fails as a whole like :meth:`propose_nowait`.
        """
        return self._submit(lambda future: self.host.propose_many(group_id, payloads, future))

    def propose_conf_change_nowait(
        self, group_id: int, change: ConfChange | ConfChangeV2
    ) -> asyncio.Future[object]:
        """Queue a membership change of ``group_id``; the future ends once it is applied here.

        Add a member as a learner first (the new node hosts the group with
        no peers: ``add_group(group_id, (), machine)``), then promote it;
        remove one voter at a time, or use a ConfChangeV2 (joint consensus).
        Failures as :meth:`propose_nowait`, plus ``InvalidConfChange``, and
        ``ProposalDropped`` while another change is in progress.
        """
        return self._submit(lambda future: self.host.propose_conf_change(group_id, change, future))

    def _submit(
        self, hand_over: Callable[[asyncio.Future[object]], None]
    ) -> asyncio.Future[object]:
        """A new future handed to the host by ``hand_over``; it fails at once when the
        driver stopped or the host refuses, else the next round takes it up."""
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if self._failed is not None:
            future.set_exception(self._failure())
            return future
        try:
            hand_over(future)
        except RaftError as exc:
            future.set_exception(exc)
            return future
        self._waiting.add(future)
        self._work.set()
        observer = self.observer
        if observer is not None:
            submitted = time.perf_counter()
            future.add_done_callback(
                lambda _done: observer.committed(time.perf_counter() - submitted)
            )
        return future

    def before_each_round(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` at the start of every round, before the round collects proposals.

        What the hook proposes goes into that round: a host that holds work
        back while a round runs (e.g. to join small proposals into one entry)
        proposes it there, and calls :meth:`wake` when it starts holding some,
        so that a round comes.
        """
        self._round_hooks.append(hook)

    def wake(self) -> None:
        """Make a round run soon (its ``before_each_round`` hooks with it)."""
        self._work.set()

    @property
    def stopped(self) -> bool:
        """Whether rounds stopped for good (the WAL failed); proposals fail at once."""
        return self._failed is not None

    def raise_if_failed(self) -> None:
        """Raise ``StorageFailed`` naming the cause if the WAL failed (rounds stopped)."""
        if self._failed is not None:
            raise self._failure()

    def _failure(self) -> StorageFailed:
        return StorageFailed(
            f"the driver stopped (node {self.node_id}'s WAL failed; it serves no group): "
            f"{self._failed}"
        )

    def set_truncate_floor(self, group_id: int, index: int | None) -> None:
        """Compaction never discards the group's entries above ``index`` (None: no limit).

        The state machine's host owns this floor (e.g. message retention:
        the oldest entry whose bytes it still reads from the WAL).
        """
        self.host.set_truncate_floor(group_id, index)

    async def propose(self, group_id: int, data: bytes) -> object:
        """Propose ``data`` and return the state machine's result once applied."""
        return await self.propose_nowait(group_id, data)

    async def read_index(self, group_id: int, timeout_ms: int) -> int:
        """Wait until a linearizable read of ``group_id`` may be served here.

        Returns the read index once this node (the leader) confirmed it still
        leads and applied up to it: state machine reads made right after see
        every write committed before the call. Raises ``RaftNotLeader`` (with the
        leader hint) on a follower, ``ProposalDropped`` if leadership could
        not be confirmed within ``timeout_ms``.
        """
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self.raise_if_failed()
        self.host.read_index(group_id, future)
        self._waiting.add(future)
        self._work.set()
        try:
            index = await asyncio.wait_for(future, timeout_ms / 1000)
        except TimeoutError:
            raise ProposalDropped(
                f"group {group_id}: leadership not confirmed within {timeout_ms} ms"
            ) from None
        finally:
            self._waiting.discard(future)
        assert isinstance(index, int)
        return index

    def leader_of(self, group_id: int) -> int:
        """The leader this node knows for ``group_id``, or 0."""
        return self.host.leader_of(group_id)

    def campaign(self, group_id: int) -> None:
        """Make this replica start an election for ``group_id`` now."""
        node = self.host.node(group_id)
        assert isinstance(node, RawNode)
        node.campaign()
        self.host._dirty.add(group_id)
        self._work.set()

    def transfer_leader(self, group_id: int, to_node: int) -> None:
        """Make this replica, the leader of ``group_id``, hand leadership to ``to_node``.

        Call it on the leader (on a follower the request is not guaranteed to
        reach the leader). The leader stops taking proposals until ``to_node``
        takes over or an election timeout passes.
        """
        node = self.host.node(group_id)
        assert isinstance(node, RawNode)
        node.transfer_leader(to_node)
        self.host._dirty.add(group_id)
        self._work.set()

    # ----------------------------------------------------------------- loops
    def _on_batch(self, from_node: int, data: bytes) -> None:
        try:
            batch = wire.decode_batch(data)
        except wire.WireError as exc:
            _log.warning("dropping a bad raft batch from node %d: %s", from_node, exc)
            return
        if batch.to_node != self.node_id or batch.from_node != from_node:
            _log.warning("dropping a misaddressed raft batch from node %d", from_node)
            return
        self.host.receive(batch, _now_ms())
        if self.host.has_work():
            self._work.set()

    async def _run_ticks(self) -> None:
        interval_s = self.options.tick_ms / 1000
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            # A tick late because the loop was busy is not made up for: catching
            # up would fire an election timeout without a chance to hear the leader.
            next_at = max(next_at + interval_s, loop.time())
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            self.host.tick(_now_ms())
            for peer in self.host.peer_nodes():
                self.transport.send(peer, wire.encode_batch(self.node_id, peer, ()))
            self._work.set()

    async def _run_rounds(self) -> None:
        loop = asyncio.get_running_loop()
        host = self.host
        store = self.store
        while True:
            await self._work.wait()
            self._work.clear()
            if self._compacted is not None:
                try:
                    async with self._round_lock:
                        await self._finish_compaction()
                except StorageFailed as exc:
                    self._stop_for_good(exc)
                    return
            for hook in self._round_hooks:
                hook()
            if not host.has_work():
                continue
            await self._round_lock.acquire()
            try:
                rnd = host.collect()
                if rnd.is_empty():
                    continue
                host.persist(rnd, store)
                early = self.options.send_before_sync and rnd.must_sync
                if early:
                    for to_node, data in host.outgoing(rnd, part="early"):
                        self.transport.send(to_node, data)
                t0 = time.perf_counter()
                if rnd.must_sync:
                    if self.options.sync_in_thread:
                        await self._sync_thread.run(store.sync)
                    else:
                        store.sync()
                    self.syncs += 1
                    if self.observer is not None:
                        self.observer.synced(time.perf_counter() - t0)
                    store.maybe_collect_garbage()
                self.sync_s += time.perf_counter() - t0
                for to_node, data in host.outgoing(rnd, part="late" if early else "all"):
                    self.transport.send(to_node, data)
                outcomes = host.apply(rnd, store)
                if self.options.snapshot_entries:
                    host.maybe_snapshot(
                        rnd, store, self.options.snapshot_entries, self.options.keep_entries
                    )
                self._maybe_start_compaction(loop)
                host.advance(rnd)
            except StorageFailed as exc:
                self._stop_for_good(exc)
                return
            finally:
                self._round_lock.release()
            self.rounds += 1
            for outcome in outcomes:
                future = outcome.token
                assert isinstance(future, asyncio.Future)
                self._waiting.discard(future)
                if future.done():
                    continue
                if outcome.error is None:
                    future.set_result(outcome.result)
                else:
                    future.set_exception(outcome.error)
            self._maybe_prepare_spare(loop)
            if host.has_work():
                self._work.set()

    def _maybe_start_compaction(self, loop: asyncio.AbstractEventLoop) -> None:
        """If the WAL retains more than its budget, snapshot (off the loop) what pins it."""
        budget = self.options.wal_retain_bytes
        store = self.store
        if not budget or self._compacting or store.retained_bytes() <= budget:
            return
        segments = len(store.segment_seqs())
        if segments == self._planned_at_segments:
            return  # planned at this size already (groups held by floors, or unapplied)
        self._planned_at_segments = segments
        steps = self.host.plan_compaction(
            store.compaction_targets(max(1, self.options.wal_keep_segments)),
            unpins=store.compaction_unpins,
        )
        if not steps:
            return
        self._compacting = True
        snapshots = [(s.group_id, s.snapshot) for s in steps if s.snapshot is not None]
        pack = store.begin_snapshot_pack()  # one file for every snapshot of this compaction

        def done(future: asyncio.Future[None]) -> None:
            exc = future.exception()
            if exc is not None:
                _log.error("node %d: writing snapshots failed: %s", self.node_id, exc)
                store.end_snapshot_pack(pack)
                self._compacting = False  # planned again when the WAL grows by a segment
                return
            self._compacted = (steps, pack)
            self._work.set()

        write = pack.write_durably
        loop.run_in_executor(self._snapshot_thread, write, snapshots).add_done_callback(done)

    async def _finish_compaction(self) -> None:
        """Record the durable snapshots and compact; sync, then recycle freed segments."""
        assert self._compacted is not None
        steps, pack = self._compacted
        self._compacted = None
        self._compacting = False
        self.host.finish_compaction(steps, self.store)
        self.store.end_snapshot_pack(pack)
        self.store.flush()
        await self._sync_thread.run(self.store.sync)
        self.store.maybe_collect_garbage()
        self.compactions += 1

    def before_spare_fill(self, hook: Callable[[list[int]], object]) -> None:
        """Run ``hook`` in the spare thread right before each spare segment is zero-filled,
        with the live segments (oldest first) as the loop saw them when it asked for it.

        For the page cache (``storage_node.store.segment_files.uncache_segments``):
        pages let go of there are the ones the fill takes next, while the host still
        backs them. An OSError of the hook is logged and the fill goes on.
        """
        self._before_spare_fill = hook

    def _maybe_prepare_spare(self, loop: asyncio.AbstractEventLoop) -> None:
        store = self.store
        if self._preparing_spare or store.has_spare():
            return
        self._preparing_spare = True
        hook = self._before_spare_fill
        live = store.segment_seqs() if hook is not None else []

        def prepare() -> bool:
            if hook is not None and not store.has_spare():
                try:
                    hook(live)
                except OSError as exc:
                    _log.warning("node %d: before filling a spare segment: %s", self.node_id, exc)
            return store.maybe_prepare_spare()

        def done(_future: asyncio.Future[bool]) -> None:
            self._preparing_spare = False

        loop.run_in_executor(self._spare_thread, prepare).add_done_callback(done)

    def _stop_for_good(self, error: StorageFailed) -> None:
        """The WAL failed: no more rounds; waiting proposals and :meth:`wait_failed` learn why."""
        _log.error("node %d: the WAL failed; raft stops: %s", self.node_id, error)
        self._failed = error
        self._failed_event.set()
        self._fail_waiting(error)

    async def wait_failed(self) -> BaseException:
        """Wait until rounds stop for good (the WAL failed); the failure. The node's
        shell watches this: a node whose WAL failed must stop serving, not look healthy."""
        await self._failed_event.wait()
        assert self._failed is not None
        return self._failed

    def _fail_waiting(self, error: RaftError) -> None:
        for future in self._waiting:
            if not future.done():
                future.set_exception(error)
        self._waiting.clear()


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def group_peers(group_id: int, nodes: Sequence[int], replicas: int = 3) -> list[int]:
    """A simple placement: ``replicas`` consecutive nodes starting at group_id mod N."""
    count = len(nodes)
    start = group_id % count
    return [nodes[(start + i) % count] for i in range(min(replicas, count))]
