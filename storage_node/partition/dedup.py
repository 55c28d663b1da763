"""The append dedup window of a partition state machine.

The window remembers, by (topic, message id), what recent appends did with
their records, so a retried append (a broker retrying after NOT_LEADER or a
timeout, a client resending) is answered with the original outcome instead of
queueing the message twice.

It is kept by run: the messages remembered together (one queue, consecutive
offsets, one store time: a queued run of an append, joined with the run before
it when it continues that one) share a run, and each message id maps to its
run's number, a plain int shared by the run's ids. That is one dict insert per
message and nothing else built for it, and the maps hold no object the cyclic
GC tracks. The runs are kept by column (:class:`_Runs`), so a run builds no
object either: what the window lets go is its ids and their numbers, not objects
mixed in the allocator's pools among the queues' long-lived ones.

Its snapshot form is by run too (:meth:`DedupWindow.to_wire`, partition
snapshot version 2): a run packs as one array of its fields and its ids (in C,
a string copy per entry), and the window keeps the packed runs by chunk, so a
snapshot packs only the runs added since the last one. Version 1 held one
array per entry, built in Python; it is still read
(:meth:`DedupWindow.load_entries_wire`).

PURE.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice, pairwise, repeat

from protocol.vocabulary import Placement
from storage_node.errors import SnapshotCorrupted
from storage_node.partition.chunks import PackedChunks
from storage_node.partition.queues import RecordOutcome
from storage_node.partition.wire import array_header, as_int, as_list, as_str, pack, pack_items

_Remembered = tuple[int, int, int, int]
"""What the window knows of one (topic, message id): (queue id, placement as an int,
queue offset, store time)."""

_Item = tuple[tuple[str, str], _Remembered]
"""One entry of the window: its key and what is remembered of it."""

_Wire = list[object]
"""One entry in the version-1 snapshot form: ``[RecordOutcome.to_wire(), store time]``,
i.e. ``[[topic, queue id, message id, placement, queue offset], store time]``."""

_Run = tuple[str, int, int, int, int, tuple[str, ...]]
"""(topic, queue id, placement as an int, first queue offset, store time, message ids):
entries remembered together. Id ``i`` of a run has queue offset ``first + i``; a run
that is not QUEUED has one id, with its own offset (-1). msgpack packs it as the
array of its fields, the ids an array of strings: its snapshot form."""

_Changed = tuple[str, str, int, int, int, int]
"""A changed outcome in the snapshot form: (topic, message id) and its :data:`_Remembered`."""

_QUEUED = int(Placement.QUEUED)
_PLACEMENTS = frozenset(int(placement) for placement in Placement)

RUNS_PER_CHUNK = 64
"""Runs per chunk of the snapshot memo (read when a window is made: tests change it).
A snapshot repacks the chunk the front has moved into, so a chunk is small: 64
runs of a broker's 64-message batches are about 140 KB packed."""


class _Runs:
    """The window's runs in store order, kept by column: one deque per field of
    :data:`_Run`, so a run adds no object of its own (its fields are the append's:
    the interned topic, small ints, the shared store time, the ids' tuple; a run of
    one message keeps its id alone, not a tuple of one).

    Held as a tuple each (88 bytes, a block of 96), a run was one more small
    object per message remembered, made among the queues' long-lived ones and
    freed two minutes later: its freed blocks stayed in the allocator's pools and
    arenas as long as those held the queues'. A deque keeps its items in blocks of
    64 (528 bytes, outside those pools), freed whole as the window moves on.

    Reads give runs as tuples, their ids as a tuple (made for the read, not kept)."""

    __slots__ = ("first_offsets", "ids", "placements", "queue_ids", "stored", "topics")

    def __init__(self, runs: Iterable[_Run] = ()) -> None:
        self.topics: deque[str] = deque()
        self.queue_ids: deque[int] = deque()
        self.placements: deque[int] = deque()
        self.first_offsets: deque[int] = deque()
        self.stored: deque[int] = deque()
        # A run's ids: a tuple of two or more, or a lone id (a str).
        self.ids: deque[str | tuple[str, ...]] = deque()
        for run in runs:
            self.append(run)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, number: int) -> _Run:
        """The run at ``number`` from the front (negative: from the back)."""
        return (
            self.topics[number],
            self.queue_ids[number],
            self.placements[number],
            self.first_offsets[number],
            self.stored[number],
            self.ids_at(number),
        )

    def ids_at(self, number: int) -> tuple[str, ...]:
        """The ids of the run at ``number`` (as :meth:`__getitem__`)."""
        return _id_tuple(self.ids[number])

    def count_at(self, number: int) -> int:
        """How many ids the run at ``number`` has."""
        found = self.ids[number]
        return 1 if type(found) is str else len(found)

    def __iter__(self) -> Iterator[_Run]:
        return zip(
            self.topics,
            self.queue_ids,
            self.placements,
            self.first_offsets,
            self.stored,
            map(_id_tuple, self.ids),
            strict=True,
        )

    def __reversed__(self) -> Iterator[_Run]:
        return zip(
            reversed(self.topics),
            reversed(self.queue_ids),
            reversed(self.placements),
            reversed(self.first_offsets),
            reversed(self.stored),
            map(_id_tuple, reversed(self.ids)),
            strict=True,
        )

    def append(self, run: _Run) -> None:
        """Add ``run`` at the back."""
        topic, queue_id, placement, first, stored, run_ids = run
        self.topics.append(topic)
        self.queue_ids.append(queue_id)
        self.placements.append(placement)
        self.first_offsets.append(first)
        self.stored.append(stored)
        self.ids.append(run_ids[0] if len(run_ids) == 1 else run_ids)

    def popleft(self) -> None:
        """Drop the front run."""
        self.topics.popleft()
        self.queue_ids.popleft()
        self.placements.popleft()
        self.first_offsets.popleft()
        self.stored.popleft()
        self.ids.popleft()

    def last_continued_by(self, run: _Run) -> bool:
        """Whether ``run`` holds the entries right after the back run's (:func:`_continues`)."""
        # A run of another queue or store time (with many queues: nearly every run)
        # cannot continue the back one; only a run that may is built and checked.
        return (
            bool(self.ids)
            and self.queue_ids[-1] == run[1]
            and self.stored[-1] == run[4]
            and _continues(self[-1], run)
        )

    def join_last(self, run_ids: tuple[str, ...]) -> None:
        """Add ``run_ids`` to the back run's ids (the run they continue)."""
        self.ids[-1] = self.ids_at(-1) + run_ids


class DedupWindow:
    """Outcomes of recent appends by (topic, message id), for idempotent retries.

    An entry lives while its store time is within ``window_ms`` of the state
    clock and among the newest ``entries_max``. Entries are kept in store
    order (the clock is monotonic), so eviction is from the front.

    Representation: runs in store order (:data:`_Run`, kept by column:
    :class:`_Runs`), the front one possibly cut (its first ``_skip`` ids have
    left); per topic, a map from each
    remembered id to its run's number (the front run's number is
    ``_first_run``, the next ones count up). An outcome changed after its
    append (:meth:`update`) is kept aside in ``_changed`` (in the order the
    changes came: the log's), its run as it was.

    Invariants: store times never decrease from the front run to the back;
    no run continues the one before it (:func:`_continues`: they would be
    one); every id of a run, past the front's cut, maps to that run and no
    other id is mapped; ``_count`` is how many that is; ``_changed`` holds
    only remembered keys. So the runs depend only on the outcomes remembered,
    in order, not on how appends grouped them: equal windows snapshot alike.

    The snapshot encoding of the runs past the front one (which eviction cuts
    into, so it is packed afresh each time) is kept by chunk of
    ``RUNS_PER_CHUNK`` run numbers; a run changes in place only when one
    joins it at the back, which forgets its chunk.
    """

    def __init__(self, window_ms: int, entries_max: int) -> None:
        self.window_ms = window_ms
        self.entries_max = entries_max
        self._replace_runs([])

    def _replace_runs(self, runs: list[_Run]) -> None:
        """Hold ``runs`` (in store order, distinct ids), none changed, numbered from 0;
        the snapshot memo starts empty."""
        self._ids: dict[str, dict[str, int]] = {}
        self._runs = _Runs(runs)
        self._first_run = 0
        self._skip = 0
        self._count = 0
        self._changed: dict[tuple[str, str], _Remembered] = {}
        self._memo: PackedChunks[None] = PackedChunks(_no_summary, RUNS_PER_CHUNK)
        for number, run in enumerate(runs):
            self._ids.setdefault(run[0], {}).update(dict.fromkeys(run[5], number))
            self._count += len(run[5])

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
        """Remember ``run`` at the back, as part of the last run if it continues it
        (ids remembered already keep their place)."""
        topic, run_ids = run[0], run[5]
        ids = self._ids.get(topic)
        if ids is None:
            ids = self._ids[topic] = {}
        runs = self._runs
        joins = runs.last_continued_by(run)
        number = self._first_run + len(runs) - (1 if joins else 0)
        before = len(ids)
        ids.update(dict.fromkeys(run_ids, number))
        if len(ids) - before != len(run_ids):
            self._readd(run)  # an id was remembered already (callers exclude it)
        elif joins:
            runs.join_last(run_ids)
            self._count += len(run_ids)
            self._memo.forget(number // self._memo.size)
        else:
            runs.append(run)
            self._count += len(run_ids)
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

    def _evict_front(self, excess: int) -> None:
        """Drop the ``excess`` oldest entries (nothing if ``excess`` is not positive)."""
        runs = self._runs
        while excess > 0:
            topic, run_ids = runs.topics[0], runs.ids_at(0)
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

    def update(self, outcome: RecordOutcome) -> None:
        """Replace a remembered outcome (a timer fired, a half message committed)."""
        ids = self._ids.get(outcome.topic)
        number = None if ids is None else ids.get(outcome.message_id)
        if number is not None:
            stored = self._runs.stored[number - self._first_run]
            self._changed[(outcome.topic, outcome.message_id)] = _remembered(outcome, stored)

    def maybe_evict(self, clock_ms: int) -> int:
        """Drop entries stored before ``clock_ms - window_ms``; returns how many."""
        horizon = clock_ms - self.window_ms
        runs = self._runs
        evicted = 0
        stored = runs.stored
        while stored and stored[0] < horizon:
            live = runs.count_at(0) - self._skip
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

    def to_wire(self) -> list[object]:
        """Snapshot form (version 2): ``[runs, changed]``, the runs in store order
        (:data:`_Run`, the front run's cut ids left out) and the changed outcomes
        in the order they changed (:data:`_Changed`). A restore holds the runs
        as they are (:meth:`load_wire`), so it snapshots as the original does,
        now and after any later change."""
        runs = list(self._runs)
        if runs:
            runs[0] = self._front()
        return [runs, self._changed_wire()]

    def packed(self) -> bytes:
        """The msgpack of :meth:`to_wire`."""
        return b"".join(self.packed_parts())

    def packed_parts(self) -> list[bytes]:
        """:meth:`packed` in pieces (for a snapshot to join once with the rest).

        Packs the front run, the changed outcomes, and of the other runs only
        those no earlier call packed, and those of the chunk the front moved
        into or a run joined. A run is packed as it is held (msgpack packs its
        tuple and its ids in C), so the cost per entry is about a string's
        copy. This runs in every raft snapshot of the group, so on every
        replica for every message once the log is compacted (a tier's local
        trims).
        """
        runs = self._runs
        parts = [array_header(2), array_header(len(runs))]
        if runs:
            parts.append(pack(self._front()))
            memo = self._memo
            for chunk, lo, hi in memo.missing(self._first_run + 1, self._first_run + len(runs)):
                memo.add(chunk, lo, hi, pack_items(self._runs_between(lo, hi)), None)
            parts += (piece.packed for piece in memo.pieces())
        parts.append(pack(self._changed_wire()))
        return parts

    def _front(self) -> _Run:
        """The front run, its first ``_skip`` ids left out."""
        run = self._runs[0]
        skip = self._skip
        if not skip:
            return run
        topic, queue_id, placement, first, stored, run_ids = run
        return (topic, queue_id, placement, first + skip, stored, run_ids[skip:])

    def _changed_wire(self) -> list[_Changed]:
        """The changed outcomes in their snapshot form, in the order they changed."""
        return [
            (topic, message_id, queue_id, placement, offset, stored)
            for (topic, message_id), (queue_id, placement, offset, stored) in self._changed.items()
        ]

    def _runs_between(self, lo: int, hi: int) -> list[_Run]:
        """The runs numbered ``[lo, hi)``, walked to from the nearer end: what a
        snapshot packs is mostly at the ends (the newest runs, the front's chunk)."""
        runs = self._runs
        start, stop = lo - self._first_run, hi - self._first_run
        if start <= len(runs) - stop:
            return list(islice(runs, start, stop))
        found = list(islice(reversed(runs), len(runs) - stop, len(runs) - start))
        found.reverse()
        return found

    def to_entries_wire(self) -> list[_Wire]:
        """The version-1 snapshot form: one :data:`_Wire` per entry, in store order
        (what older snapshots hold; :meth:`load_entries_wire` reads it)."""
        return [
            [[topic, queue_id, message_id, placement, offset], stored]
            for (topic, message_id), (queue_id, placement, offset, stored) in self._items()
        ]

    def check_invariants(self) -> None:
        """Raise AssertionError if store times decrease along the window, or the
        maps disagree with the runs (tests)."""
        stored = list(self._runs.stored)
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
        for before, run in pairwise(self._runs):
            if _continues(before, run):
                raise AssertionError(f"dedup window run {run!r} continues the one before")

    def load_wire(self, data: list[object]) -> None:
        """Restore from :meth:`to_wire` (replacing any entries).

        Raises ``SnapshotCorrupted`` naming what is wrong (the window is then
        unusable: the restore fails as a whole)."""
        runs_wire, changed_wire = as_list(data, "dedup", 2)
        runs: list[_Run] = []
        for item in as_list(runs_wire, "dedup runs"):
            topic, queue_id, placement, first, stored, ids = as_list(item, "dedup run", 6)
            run_ids = tuple(as_list(ids, "dedup run ids"))
            if not run_ids or not all(type(message_id) is str for message_id in run_ids):
                raise SnapshotCorrupted(f"dedup run: expected message ids, got {run_ids!r:.80}")
            kind = _placement(placement)
            if len(run_ids) > 1 and kind != _QUEUED:
                raise SnapshotCorrupted(f"dedup run: placement {kind} with {len(run_ids)} ids")
            stored_ms = as_int(stored, "dedup run store time")
            if runs and stored_ms < runs[-1][4]:
                raise SnapshotCorrupted("dedup runs: store times go back")
            runs.append(
                (
                    sys.intern(as_str(topic, "dedup run topic")),
                    as_int(queue_id, "dedup run queue id"),
                    kind,
                    as_int(first, "dedup run queue offset"),
                    stored_ms,
                    run_ids,  # type: ignore[arg-type]  # checked: all str
                )
            )
        self._replace_runs(runs)
        if sum(map(len, self._ids.values())) != self._count:
            raise SnapshotCorrupted("dedup runs: a message id is remembered twice")
        for item in as_list(changed_wire, "dedup changed outcomes"):
            topic, message_id, queue_id, placement, offset, stored = as_list(
                item, "dedup changed outcome", 6
            )
            key = (as_str(topic, "topic"), as_str(message_id, "message id"))
            if key not in self:
                raise SnapshotCorrupted(f"dedup: a changed outcome of {key!r}, not remembered")
            self._changed[key] = (
                as_int(queue_id, "queue id"),
                _placement(placement),
                as_int(offset, "queue offset"),
                as_int(stored, "store time"),
            )

    def load_entries_wire(self, data: list[object]) -> None:
        """Restore from :meth:`to_entries_wire` (a version-1 snapshot; replacing any
        entries); the runs are the longest a queued append could have made."""
        entries: dict[tuple[str, str], _Remembered] = {}
        for item in data:
            wire, stored = as_list(item, "dedup entry", 2)
            outcome = RecordOutcome.from_wire(as_list(wire, "record outcome"))
            entries[(outcome.topic, outcome.message_id)] = _remembered(outcome, as_int(stored))
        self._load(entries.items())

    def _load(self, items: Iterable[_Item]) -> None:
        """Replace the runs by ``items`` (distinct keys, in store order), joining the
        entries a queued run would hold (the runs are numbered from 0 again)."""
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
        self._replace_runs(runs)


def _id_tuple(ids: str | tuple[str, ...]) -> tuple[str, ...]:
    """A run's ids as :class:`_Runs` keeps them (a lone id alone), as a tuple."""
    return (ids,) if type(ids) is str else ids  # type: ignore[return-value]


def _continues(run: _Run, after: _Run) -> bool:
    """Whether ``after`` holds the entries right after ``run``'s, as one queued run would."""
    return (
        run[2] == _QUEUED
        and after[2] == _QUEUED
        and run[4] == after[4]
        and run[3] + len(run[5]) == after[3]
        and run[1] == after[1]
        and run[0] == after[0]
    )


def _placement(value: object) -> int:
    """A placement read from a snapshot, as an int."""
    placement = as_int(value, "placement")
    if placement not in _PLACEMENTS:
        raise SnapshotCorrupted(f"unknown placement {placement}")
    return placement


def _no_summary(_one: None, _other: None) -> None:
    """The memo keeps no summary of its pieces."""


def _remembered(outcome: RecordOutcome, stored_ms: int) -> _Remembered:
    """What the window keeps of ``outcome`` stored at ``stored_ms`` (its key aside)."""
    return (outcome.queue_id, int(outcome.placement), outcome.queue_offset, stored_ms)


def _outcome(key: tuple[str, str], found: _Remembered) -> RecordOutcome:
    """The outcome remembered as ``found`` under ``key``."""
    return RecordOutcome(key[0], found[0], key[1], Placement(found[1]), found[2])
