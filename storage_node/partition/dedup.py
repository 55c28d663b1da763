"""The append dedup window of a partition state machine.

The window remembers, by (topic, message id), what recent appends did with
their records, so a retried append (a broker retrying after NOT_LEADER or a
timeout, a client resending) is answered with the original outcome instead of
queueing the message twice.

It is kept by run: the messages of one queued run of an append (one queue,
consecutive offsets, one store time) are remembered together, and each message
id maps to its run's number, a plain int shared by the run's ids. That is one
dict insert per message and nothing else built for it, and the maps hold no
object the cyclic GC tracks.

PURE.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from typing import cast

from protocol.vocabulary import Placement
from storage_node.partition.chunks import PackedChunks
from storage_node.partition.queues import RecordOutcome
from storage_node.partition.wire import array_header, as_int, as_list, pack_items

_Remembered = tuple[int, int, int, int]
"""What the window knows of one (topic, message id): (queue id, placement as an int,
queue offset, store time)."""

_Item = tuple[tuple[str, str], _Remembered]
"""One entry of the window: its key and what is remembered of it."""

_Wire = list[object]
"""One entry in its snapshot form: ``[RecordOutcome.to_wire(), store time]``, i.e.
``[[topic, queue id, message id, placement, queue offset], store time]`` (lists: msgpack
packs them faster than tuples)."""

_Run = tuple[str, int, int, int, int, tuple[str, ...]]
"""(topic, queue id, placement as an int, first queue offset, store time, message ids):
entries remembered together. Id ``i`` of a run has queue offset ``first + i``; a run
that is not QUEUED has one id, with its own offset (-1)."""

_QUEUED = int(Placement.QUEUED)


class DedupWindow:
    """Outcomes of recent appends by (topic, message id), for idempotent retries.

    An entry lives while its store time is within ``window_ms`` of the state
    clock and among the newest ``entries_max``. Entries are kept in store
    order (the clock is monotonic), so eviction is from the front.

    Representation: runs in store order (:data:`_Run`), the front one possibly
    cut (its first ``_skip`` ids have left); per topic, a map from each
    remembered id to its run's number (the front run's number is
    ``_first_run``, the next ones count up). An outcome changed after its
    append (:meth:`update`) is kept aside in ``_changed``.

    Invariants: store times never decrease from the front run to the back;
    every id of a run, past the front's cut, maps to that run and no other id
    is mapped; ``_count`` is how many that is; ``_changed`` holds only
    remembered keys.

    The snapshot encoding is kept by chunk of sequence numbers (the entry at
    the front has number ``_dropped``, the next ones count up), with each
    chunk's first and last store time: :meth:`update` finds the chunk of the
    entry it replaces by store time (the invariant above) and forgets it.
    """

    def __init__(self, window_ms: int, entries_max: int) -> None:
        self.window_ms = window_ms
        self.entries_max = entries_max
        self._ids: dict[str, dict[str, int]] = {}
        self._runs: deque[_Run] = deque()
        self._first_run = 0
        self._skip = 0
        self._count = 0
        self._changed: dict[tuple[str, str], _Remembered] = {}
        # How many entries ever left the front: the front entry's sequence number.
        self._dropped = 0
        self._memo: PackedChunks[tuple[int, int]] = PackedChunks(_span)
        # (first store time, last store time, chunk) of each piece of the memo,
        # ascending, as of the last packed() (pieces only go in between).
        self._spans: list[tuple[int, int, int]] = []

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: object) -> bool:
        """Whether the (topic, message id) ``key`` is remembered now."""
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        ids = self._ids.get(key[0])
        return ids is not None and key[1] in ids

    def __iter__(self) -> Iterator[tuple[str, str]]:
        """The remembered (topic, message id) pairs, in store order."""
        return (key for key, _remembered in self._items())

    def lookup(self, topic: str, message_id: str) -> RecordOutcome | None:
        """The original outcome of a record stored in the window, if any."""
        ids = self._ids.get(topic)
        number = None if ids is None else ids.get(message_id)
        if number is None:
            return None
        key = (topic, message_id)
        found = self._changed.get(key)
        if found is None:
            queue_id, placement, first, stored, run_ids = self._runs[number - self._first_run][1:]
            found = (queue_id, placement, first + run_ids.index(message_id), stored)
        return _outcome(key, found)

    def knows_any(self, keys: Iterable[tuple[str, str]]) -> bool:
        """Whether any of the (topic, message id) ``keys`` is remembered now."""
        return any(map(self.__contains__, keys))

    def knows_any_of(self, topic: str, message_ids: Iterable[str]) -> bool:
        """Whether any of ``message_ids`` of ``topic`` is remembered now."""
        ids = self._ids.get(topic)
        return ids is not None and not ids.keys().isdisjoint(message_ids)

    def remember(self, outcome: RecordOutcome, stored_ms: int) -> None:
        """Record the outcome of a first append (evicting the oldest when full).

        ``stored_ms`` is the state clock. The message id is not remembered
        already (the caller looked it up); if it were, it would keep its place
        with the new outcome, as in a map.
        """
        self._add(
            (
                outcome.topic,
                outcome.queue_id,
                int(outcome.placement),
                outcome.queue_offset,
                stored_ms,
                (outcome.message_id,),
            )
        )

    def remember_queued(
        self,
        topic: str,
        queue_id: int,
        message_ids: Sequence[str],
        first_offset: int,
        stored_ms: int,
    ) -> None:
        """:meth:`remember` the outcomes of ``message_ids`` queued in order at consecutive
        offsets from ``first_offset``, as one call per id would (none is remembered)."""
        if message_ids:
            self._add((topic, queue_id, _QUEUED, first_offset, stored_ms, tuple(message_ids)))

    def _add(self, run: _Run) -> None:
        """Remember ``run`` at the back (ids remembered already keep their place)."""
        topic, run_ids = run[0], run[5]
        ids = self._ids.get(topic)
        if ids is None:
            ids = self._ids[topic] = {}
        before = len(ids)
        ids.update(dict.fromkeys(run_ids, self._first_run + len(self._runs)))
        if len(ids) - before == len(run_ids):
            self._runs.append(run)
            self._count += len(run_ids)
        else:
            self._readd(run)  # an id was remembered already (callers exclude it)
        self._evict_front(self._count - self.entries_max)

    def _readd(self, run: _Run) -> None:
        """:meth:`_add` of a run some of whose ids are remembered already (the map
        points them at the run by now): as in a map, they keep their place and take
        their new outcome; the others go to the back."""
        topic, queue_id, placement, first, stored, run_ids = run
        fresh = {
            (topic, message_id): (queue_id, placement, first + i, stored)
            for i, message_id in enumerate(run_ids)
        }
        entries = {key: fresh.pop(key, remembered) for key, remembered in self._items()}
        entries.update(fresh)
        self._load(entries.items())
        self._memo = PackedChunks(_span)  # entries changed in place: pack them all again
        self._spans = []

    def _evict_front(self, excess: int) -> None:
        """Drop the ``excess`` oldest entries (nothing if ``excess`` is not positive)."""
        runs = self._runs
        while excess > 0:
            topic, run_ids = runs[0][0], runs[0][5]
            skip = self._skip
            gone = run_ids[skip : skip + excess]
            ids = self._ids[topic]
            deque(map(ids.__delitem__, gone), maxlen=0)
            if self._changed:
                for message_id in gone:
                    self._changed.pop((topic, message_id), None)
            if not ids:
                del self._ids[topic]
            if skip + len(gone) == len(run_ids):
                runs.popleft()
                self._first_run += 1
                self._skip = 0
            else:
                self._skip += len(gone)
            excess -= len(gone)
            self._count -= len(gone)
            self._dropped += len(gone)

    def update(self, outcome: RecordOutcome) -> None:
        """Replace a remembered outcome (a timer fired, a half message committed)."""
        ids = self._ids.get(outcome.topic)
        number = None if ids is None else ids.get(outcome.message_id)
        if number is not None:
            stored = self._runs[number - self._first_run][4]
            self._changed[(outcome.topic, outcome.message_id)] = _remembered(outcome, stored)
            self._forget_stored_at(stored)

    def _forget_stored_at(self, stored_ms: int) -> None:
        """Forget the memo's pieces whose store times span ``stored_ms``.

        By the store order invariant, they include the piece of any entry
        stored then. Spans ascend at both ends, so they are the ones just
        before the first span that starts later.
        """
        spans = self._spans
        later = bisect.bisect_left(spans, (stored_ms + 1,))
        while later > 0 and spans[later - 1][1] >= stored_ms:
            later -= 1
            self._memo.forget(spans[later][2])

    def maybe_evict(self, clock_ms: int) -> int:
        """Drop entries stored before ``clock_ms - window_ms``; returns how many."""
        horizon = clock_ms - self.window_ms
        runs = self._runs
        evicted = 0
        while runs and runs[0][4] < horizon:
            live = len(runs[0][5]) - self._skip
            self._evict_front(live)
            evicted += live
        return evicted

    def _items(
        self, runs: Iterable[_Run] | None = None, skip: int | None = None
    ) -> Iterator[_Item]:
        """The entries of ``runs`` (default: every run) in store order, the first
        run's first ``skip`` ids left out (default: the front's cut)."""
        changed = self._changed
        cut = self._skip if skip is None else skip
        for topic, queue_id, placement, first, stored, run_ids in (
            self._runs if runs is None else runs
        ):
            for i in range(cut, len(run_ids)):
                key = (topic, run_ids[i])
                yield key, changed.get(key) or (queue_id, placement, first + i, stored)
            cut = 0

    def to_wire(self) -> list[_Wire]:
        """Snapshot form, in store order."""
        return self._wire_of(self._runs, self._skip)

    def packed(self) -> bytes:
        """The msgpack of :meth:`to_wire`.

        Packs only the entries no earlier call packed, those of a chunk an
        update touched, and those of the chunk eviction cut into. Each is
        built in its wire form a run at a time (:meth:`_wire_of`): this runs
        in every raft snapshot of the group, so on every replica for every
        message once the log is compacted (a tier's local trims).
        """
        memo = self._memo
        first = self._dropped
        wanted = memo.missing(first, first + self._count)
        for (chunk, lo, hi), wire in zip(wanted, self._wire_at(wanted), strict=True):
            stored = (cast(int, wire[0][1]), cast(int, wire[-1][1]))
            memo.add(chunk, lo, hi, pack_items(wire), stored)
        pieces = memo.pieces()
        self._spans = [(*piece.meta, piece.lo // memo.size) for piece in pieces]
        return b"".join([array_header(self._count), *(piece.packed for piece in pieces)])

    def _wire_of(self, runs: Iterable[_Run], skip: int, limit: int | None = None) -> list[_Wire]:
        """The snapshot form (:data:`_Wire`) of the entries of ``runs`` in
        store order, the first run's first ``skip`` ids left out; the first ``limit``
        of them only (None: all)."""
        changed = self._changed
        wire: list[_Wire] = []
        cut = skip
        for topic, queue_id, placement, first, stored, run_ids in runs:
            ids = run_ids[cut:] if cut else run_ids
            if changed:
                wire += [
                    _changed_wire(topic, message_id, found)
                    if (found := changed.get((topic, message_id))) is not None
                    else [[topic, queue_id, message_id, placement, offset], stored]
                    for offset, message_id in enumerate(ids, first + cut)
                ]
            else:
                wire += [
                    [[topic, queue_id, message_id, placement, offset], stored]
                    for offset, message_id in enumerate(ids, first + cut)
                ]
            cut = 0
            if limit is not None and len(wire) >= limit:
                del wire[limit:]
                break
        return wire

    def _wire_at(self, ranges: list[tuple[int, int, int]]) -> list[list[_Wire]]:
        """The snapshot form of the entries at each ``(chunk, lo, hi)`` of ``ranges``
        (ascending sequence numbers).

        Reads each from the nearer end of the window, walking only up to the
        ranges farthest in: what changes is mostly at the ends (the newest
        entries, the chunk eviction cut).
        """
        first = self._dropped
        count = self._count
        middle = first + count // 2
        front = [item for item in ranges if item[1] < middle]
        back = ranges[len(front) :]
        found: list[list[_Wire]] = []
        if front:
            head = self._wire_of(self._runs, self._skip, front[-1][2] - first)
            found += [head[lo - first : hi - first] for _chunk, lo, hi in front]
        if back:
            start = back[0][1]
            wanted = first + count - start  # entries from the back
            tail_runs: list[_Run] = []
            held = 0
            for run in reversed(self._runs):
                tail_runs.append(run)
                held += len(run[5])
                if held >= wanted:
                    break
            tail_runs.reverse()
            skip = self._skip if len(tail_runs) == len(self._runs) else 0
            held -= skip
            tail = self._wire_of(tail_runs, skip)[held - wanted :]
            found += [tail[lo - start : hi - start] for _chunk, lo, hi in back]
        return found

    def check_invariants(self) -> None:
        """Raise AssertionError if store times decrease along the window, or the
        maps disagree with the runs (tests)."""
        stored = [run[4] for run in self._runs]
        if stored != sorted(stored):
            raise AssertionError("dedup window entries out of store order")
        mapped: dict[tuple[str, str], int] = {}
        cut = self._skip
        for number, run in enumerate(self._runs, self._first_run):
            if not run[5] or (len(run[5]) > 1 and run[2] != _QUEUED):
                raise AssertionError(f"dedup window run {run!r} is malformed")
            mapped.update(dict.fromkeys(zip(repeat(run[0]), run[5][cut:]), number))
            cut = 0
        held = {(topic, m): n for topic, ids in self._ids.items() for m, n in ids.items()}
        if mapped != held or len(mapped) != self._count or not all(self._ids.values()):
            raise AssertionError("dedup window ids do not map to their runs")
        if not self._changed.keys() <= held.keys():
            raise AssertionError("dedup window keeps a changed outcome it does not remember")

    def load_wire(self, data: list[object]) -> None:
        """Restore from :meth:`to_wire` (replacing any entries)."""
        entries: dict[tuple[str, str], _Remembered] = {}
        for item in data:
            wire, stored = as_list(item, "dedup entry", 2)
            outcome = RecordOutcome.from_wire(as_list(wire, "record outcome"))
            entries[(outcome.topic, outcome.message_id)] = _remembered(outcome, as_int(stored))
        self._load(entries.items())
        self._dropped = 0
        self._memo = PackedChunks(_span)
        self._spans = []

    def _load(self, items: Iterable[_Item]) -> None:
        """Replace the runs by ``items`` (distinct keys, in store order), joining the
        entries a queued run would hold; the sequence numbers go on."""
        runs: list[_Run] = []
        run_ids: list[str] = []
        for (topic, message_id), (queue_id, placement, offset, stored) in items:
            if run_ids:
                last = runs[-1]
                if (
                    placement == _QUEUED
                    and last[2] == _QUEUED
                    and (last[0], last[1], last[4]) == (topic, queue_id, stored)
                    and last[3] + len(run_ids) == offset
                ):
                    run_ids.append(message_id)
                    continue
                runs[-1] = (*last[:5], tuple(run_ids))
            runs.append((topic, queue_id, placement, offset, stored, ()))
            run_ids = [message_id]
        if run_ids:
            runs[-1] = (*runs[-1][:5], tuple(run_ids))
        self._ids = {}
        self._runs = deque(runs)
        self._first_run = 0
        self._skip = 0
        self._count = 0
        self._changed = {}
        for number, run in enumerate(runs):
            self._ids.setdefault(run[0], {}).update(dict.fromkeys(run[5], number))
            self._count += len(run[5])


def _remembered(outcome: RecordOutcome, stored_ms: int) -> _Remembered:
    """What the window keeps of ``outcome`` stored at ``stored_ms`` (its key aside)."""
    return (outcome.queue_id, int(outcome.placement), outcome.queue_offset, stored_ms)


def _outcome(key: tuple[str, str], found: _Remembered) -> RecordOutcome:
    """The outcome remembered as ``found`` under ``key``."""
    return RecordOutcome(key[0], found[0], key[1], Placement(found[1]), found[2])


def _changed_wire(topic: str, message_id: str, found: _Remembered) -> _Wire:
    """The snapshot form of a changed entry, from what ``_changed`` holds for it."""
    queue_id, placement, offset, stored = found
    return [[topic, queue_id, message_id, placement, offset], stored]


def _span(one: tuple[int, int], other: tuple[int, int]) -> tuple[int, int]:
    """The store times of two adjacent runs of entries, as one run's."""
    return one[0], other[1]
