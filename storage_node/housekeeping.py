"""The storage node's background work, beside the requests it serves.

Each ``run_*`` runs forever on the node's event loop (the server starts one
task per function): Ticks for due timers on the groups it leads, the groups'
truncate floors, and the indexes of sealed WAL segments.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging

from protocol.segments import SegmentCorrupted
from storage_node.partition.commands import Tick, encode
from storage_node.replica import FLOOR_REFRESH_MS
from storage_node.service import StorageNode
from storage_node.store.segment_files import index_segments

_log = logging.getLogger(__name__)

TIMER_CHECK_MS = 20
"""The longest the leader waits before looking for due timers of the groups it leads
(it wakes at the earliest due time when that comes sooner): a timed message appended
while it sleeps is released at most this late, plus one raft commit."""

TICKS_IN_FLIGHT_MAX = 3
"""Ticks of one group proposed and not yet applied, at most. A Tick releases what is due
at its own time, so while one commits the next one (at least ``TIMER_CHECK_MS`` later)
releases what fell due meanwhile: release lateness is not bounded below by commit latency."""

SEGMENT_INDEX_CHECK_MS = 1_000
"""How often sealed WAL segments without an index are looked for."""


async def run_timers(node: StorageNode) -> None:
    """Forever: on the groups ``node`` leads, propose a Tick once a held message is due.

    Each round also raises the node's clock to the time its groups committed
    (:meth:`storage_node.node_clock.NodeClock.observe`), so a leader never
    stamps a Tick behind what another leader already stamped.

    Ticks of a group are pipelined: another one is proposed ``TIMER_CHECK_MS``
    after the last while messages are still held past their due time, up to
    ``TICKS_IN_FLIGHT_MAX`` in flight (a Tick that finds nothing due releases nothing).
    """
    ticking: dict[int, list[int]] = {}  # group -> times of its Ticks in flight
    wait_ms = TIMER_CHECK_MS
    while True:
        await asyncio.sleep(wait_ms / 1000)
        now_ms = node.observe_committed_time()
        wait_ms = TIMER_CHECK_MS
        for group_id, replica in node.replicas.items():
            due_ms = replica.state.next_timer_due_ms()
            if due_ms is not None and due_ms > now_ms:
                wait_ms = min(wait_ms, due_ms - now_ms)
            if due_ms is None or due_ms > now_ms:
                continue
            in_flight = ticking.get(group_id)
            if in_flight and (
                len(in_flight) >= TICKS_IN_FLIGHT_MAX or now_ms - in_flight[-1] < TIMER_CHECK_MS
            ):
                continue
            if not node.driver.host.node(group_id).is_leader():
                continue
            ticking.setdefault(group_id, []).append(now_ms)
            future = node.driver.propose_nowait(group_id, encode(Tick(now_ms)))
            future.add_done_callback(functools.partial(_ticked, group_id, now_ms, ticking))


async def run_floor_keeper(node: StorageNode) -> None:
    """Forever: bring every group's truncate floor up to its state (raft compacts by it)."""
    while True:
        await asyncio.sleep(FLOOR_REFRESH_MS / 1000)
        for replica in list(node.replicas.values()):
            replica.maybe_refresh_floor()


async def run_segment_indexer(node: StorageNode) -> None:
    """Forever: give every sealed WAL segment its index (in a worker thread)."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(SEGMENT_INDEX_CHECK_MS / 1000)
        try:
            live = node.store.segment_seqs()  # on the loop: the driver changes them
            await loop.run_in_executor(None, index_segments, node.store.directory / "wal", live)
        except (OSError, SegmentCorrupted) as exc:
            _log.error("indexing sealed WAL segments failed: %s", exc)


def _ticked(
    group_id: int, at_ms: int, ticking: dict[int, list[int]], future: asyncio.Future[object]
) -> None:
    in_flight = ticking.get(group_id)
    if in_flight is not None:
        with contextlib.suppress(ValueError):
            in_flight.remove(at_ms)
        if not in_flight:
            del ticking[group_id]
    if not future.cancelled() and future.exception() is not None:
        _log.debug("timer tick of group %d failed: %s", group_id, future.exception())
