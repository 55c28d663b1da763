"""Joins the appends to one raft group that arrive between two rounds into one log entry.

Much of an append's cost does not depend on how many messages it carries:
the raft entry (proposal tracking, WAL record, replication to every
follower, the apply on every replica). While the driver runs a round
(mostly waiting for its fdatasync), the appends that arrive for a group
wait in an open batch; the driver's ``before_each_round`` hook proposes
each batch as ONE ``Append`` command, and every caller gets the outcomes of
its own records back. No append waits longer than it would have: the batch
goes into the very round that would have taken its first append.

Contracts:

- Only appends whose records are canonical (``protocol.records.is_canonical``)
  and pass ``check_record`` join a batch, so the state machine applies the
  joined command record by record exactly as it would apply each append on
  its own, in arrival order (the dedup window sees a message id repeated
  across two joined appends as it would across two entries).
- When every append of a batch brought its records packed (an append request's
  ``records`` bytes, accepted by ``protocol.records.unpack_records`` as
  current-version arrays), the entry is those bytes joined under one batch
  header: they decode to the joined records, so nothing is encoded again.
- A batch carries at most ``body_bytes_max`` body bytes; an append that
  would exceed it opens the group's next batch.
- A failure of the proposal (not the leader, dropped, storage failed) fails
  every append of the batch with that error; each keeps its own outcomes
  otherwise. Every append of a batch has the same store time.
- A batch the command encoding refuses (a value it cannot hold) is split:
  each append is proposed alone, and only the ones that cannot be encoded
  fail (BadCommand).

SHELL: event loop futures and the raft driver.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from protocol.records import MessageRecord
from raft.host.driver import Driver
from storage_node.errors import BadCommand, StorageError
from storage_node.partition.commands import Append, encode, encode_packed
from storage_node.partition.results import AppendResult


class Expecting(Protocol):
    """A group's replica that may apply a command it was told about without decoding
    it (``storage_node.replica.GroupReplica``)."""

    def expect(self, data: bytes, command: Append) -> None:
        """``data`` is ``command`` encoded (and decodes back to it exactly)."""
        ...

    def forget(self, data: bytes) -> None:
        """Undo :meth:`expect` (the proposal of ``data`` ended)."""
        ...


Joined = tuple[AppendResult, int]
"""What one append gets back: the result of its own records, and the store time."""


LATENCY_SAMPLES_MAX = 4096
"""Append latencies kept between two heartbeats at most (the newest)."""


@dataclass(slots=True)
class _Batch:
    records: list[MessageRecord] = field(default_factory=list)
    body_bytes: int = 0
    # The packed arrays of every append's records, while each append brought them
    # (``protocol.records.unpack_records``); None once one did not.
    items: list[bytes] | None = field(default_factory=list)
    # (first record, record count, the caller's future)
    callers: list[tuple[int, int, asyncio.Future[Joined]]] = field(default_factory=list)
    # When the batch opened (its first append arrived): its appends' latency starts here.
    opened_ns: int = field(default_factory=time.perf_counter_ns)


class AppendBatcher:
    """The open batches of every group, proposed by the driver's round hook."""

    def __init__(
        self,
        driver: Driver,
        now_ms: Callable[[], int],
        replicas: Mapping[int, Expecting],
        body_bytes_max: int,
    ) -> None:
        """Register with ``driver``; ``now_ms`` stamps each proposed batch; ``replicas``
        (live: groups come and go) are told what they will apply."""
        self._driver = driver
        self._now_ms = now_ms
        self._replicas = replicas
        self._body_bytes_max = body_bytes_max
        self._open: dict[int, list[_Batch]] = {}
        self.batches = 0
        self.appends = 0
        self.stored_batches = 0
        """Batches (log entries) proposed here that were committed and applied."""
        # Per committed batch, from its first append's arrival to its commit (ns); the
        # node's heartbeats drain it (their append p99). Bounded: the newest are kept.
        self.latencies_ns: collections.deque[int] = collections.deque(maxlen=LATENCY_SAMPLES_MAX)
        driver.before_each_round(self._propose_all)

    def add(
        self,
        group_id: int,
        records: list[MessageRecord],
        body_bytes: int,
        items: bytes | None = None,
    ) -> asyncio.Future[Joined]:
        """Hold ``records`` (one append) for the group's next entry; the future ends with
        their outcomes and store time, or with the proposal's error.

        ``items``: the records' arrays packed back to back, exactly as
        ``protocol.records.unpack_records`` gave them with ``records``. When every
        append of a batch brings them, the entry is these bytes joined, not an
        encoding of the records.
        """
        future: asyncio.Future[Joined] = asyncio.get_running_loop().create_future()
        self.appends += 1
        if self._driver.stopped:  # no round will come: fail now, as a proposal would
            alone = _Batch(records, body_bytes, None if items is None else [items])
            alone.callers.append((0, len(records), future))
            self._propose(group_id, alone)
            return future
        batches = self._open.get(group_id)
        if batches is None:
            batches = self._open[group_id] = [_Batch()]
            self._driver.wake()
        batch = batches[-1]
        if batch.callers and batch.body_bytes + body_bytes > self._body_bytes_max:
            batch = _Batch()
            batches.append(batch)
        batch.callers.append((len(batch.records), len(records), future))
        batch.records += records
        batch.body_bytes += body_bytes
        if batch.items is not None:
            if items is None:
                batch.items = None
            else:
                batch.items.append(items)
        return future

    def _propose_all(self) -> None:
        """The round hook: propose every open batch (one entry each)."""
        if not self._open:
            return
        opened, self._open = self._open, {}
        for group_id, batches in opened.items():
            for batch in batches:
                self._propose(group_id, batch)

    def _propose(self, group_id: int, batch: _Batch) -> None:
        now_ms = self._now_ms()
        command = Append(now_ms, tuple(batch.records))
        try:
            items = batch.items
            data = encode(command) if items is None else encode_packed(command, items)
        except (OverflowError, TypeError, ValueError) as exc:
            # A value the encoding cannot hold (an int beyond 64 bits passes
            # is_canonical): the appends go alone, so only the bad one fails.
            if len(batch.callers) == 1:
                batch.callers[0][2].set_exception(BadCommand(f"an append cannot be stored: {exc}"))
                return
            for first, count, future in batch.callers:
                alone = _Batch(batch.records[first : first + count], 0, None)
                alone.callers.append((0, count, future))
                self._propose(group_id, alone)
            return
        replica = self._replicas.get(group_id)
        if replica is not None:
            replica.expect(data, command)
        proposal = self._driver.propose_nowait(group_id, data)
        self.batches += 1

        def settle(done: asyncio.Future[object]) -> None:
            if replica is not None:
                replica.forget(data)
            callers = batch.callers
            error = done.exception()
            if error is None:
                result = done.result()
                if isinstance(result, StorageError):
                    error = result
                else:
                    assert isinstance(result, AppendResult)
                    self.stored_batches += 1
                    self.latencies_ns.append(time.perf_counter_ns() - batch.opened_ns)
                    for first, count, future in callers:
                        if not future.done():
                            future.set_result((result.part(first, count), now_ms))
                    return
            for _first, _count, future in callers:
                if not future.done():
                    future.set_exception(error)

        proposal.add_done_callback(settle)


__all__ = ["AppendBatcher", "Joined"]
