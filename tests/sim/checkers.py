"""Raft safety invariants, checked incrementally after every simulation step.

One ``GroupInvariants`` per raft group sees what the hosts observe (writes
of entries, hard states, role changes, applies) and raises
``InvariantViolation`` the moment a property of the Raft paper (figure 3)
breaks:

* election safety: at most one leader per term;
* log matching: two logs with an entry of the same index and term agree on
  everything up to it. Checked by induction as entries are written: the
  registry maps (index, term) to the entry's content and the term before it,
  and every write of that (index, term) anywhere must agree with it;
* leader completeness: a newly elected leader of term T holds the highest
  entry known to be committed in a term before T (with log matching, that
  implies every such entry), and no replica ever overwrites a committed
  entry. A commit index is known "in term t" when a replica in term t
  reports it; the entry was committed in t or earlier, so this never
  demands more than the paper does (a stale leader of an old term, elected
  late because its vote responses were delayed, need not hold newer
  commits);
* state machine safety: no two replicas apply different entries at one
  index, and each applies indices in order without gaps.

Each hook costs time proportional to what changed, never to the log length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from raft.types import Entry

TermAt = Callable[[int], int | None]
"""A replica's view of its log: the term at an index, -1 if compacted, None if absent."""

COMPACTED = -1


class InvariantViolation(AssertionError):
    """A Raft safety property broke; the message says which, where and how."""


class GroupInvariants:
    """The safety checkers of one raft group."""

    def __init__(self, group: int) -> None:
        self.group = group
        self.leaders: dict[int, int] = {}  # term -> the node that led it
        self._registry: dict[tuple[int, int], tuple[int, int, bytes]] = {}
        self.committed_terms: list[int] = [0]  # [i] = term of committed entry i (index 0: none)
        self._applied: list[tuple[int, int, bytes]] = [(0, 0, b"")]  # [i] = applied entry i
        self._last_applied: dict[int, int] = {}  # node -> last index it applied
        self._commit_by_term: dict[int, int] = {}  # term -> highest commit reported in it

    def _fail(self, what: str) -> None:
        raise InvariantViolation(f"group {self.group}: {what}")

    @property
    def commit_index(self) -> int:
        """The highest index known to be committed."""
        return len(self.committed_terms) - 1

    # -- election safety and leader completeness -----------------------------------

    def became_leader(self, node: int, term: int, term_at: TermAt) -> None:
        """``node`` became leader of ``term`` holding the log ``term_at``."""
        other = self.leaders.setdefault(term, node)
        if other != node:
            self._fail(f"election safety: nodes {other} and {node} both led term {term}")
        index = max((c for t, c in self._commit_by_term.items() if t < term), default=0)
        if index == 0:
            return
        held = term_at(index)
        if held != COMPACTED and held != self.committed_terms[index]:
            self._fail(
                f"leader completeness: leader {node} of term {term} holds term {held} at "
                f"committed index {index} (committed term {self.committed_terms[index]})"
            )

    # -- log matching and no overwrite of committed entries -------------------------

    def entries_written(
        self, node: int, entries: Sequence[Entry], prev_term: int, overwritten: Sequence[Entry]
    ) -> None:
        """``node`` wrote ``entries`` after an entry of ``prev_term``, replacing ``overwritten``.

        ``prev_term`` is the term the node's log holds at ``entries[0].index - 1``
        (0 at index 0, -1 if that index is compacted).
        """
        committed = self.committed_terms
        for old in overwritten:
            if old.index < len(committed) and committed[old.index] == old.term:
                self._fail(
                    f"node {node} overwrote committed entry {old.index} (term {old.term}) "
                    f"with term {_term_of(entries, old.index)}"
                )
        registry = self._registry
        for entry in entries:
            key = (entry.index, entry.term)
            fact = (prev_term, int(entry.type), entry.data)
            known = registry.setdefault(key, fact)
            if known != fact and not (prev_term == COMPACTED and known[1:] == fact[1:]):
                if known[0] == COMPACTED and known[1:] == fact[1:]:
                    registry[key] = fact
                else:
                    self._fail(
                        f"log matching: node {node} holds entry {key} as "
                        f"(prev term, type, data) {fact}, another replica as {known}"
                    )
            prev_term = entry.term

    def commit_advanced(self, node: int, commit: int, term_at: TermAt, term: int) -> None:
        """``node``, in ``term``, claims everything up to ``commit`` is committed.

        ``term_at`` is the node's log.
        """
        if commit > self._commit_by_term.get(term, 0):
            self._commit_by_term[term] = commit
        committed = self.committed_terms
        start = len(committed)
        # Only the part beyond what is already known needs recording; the
        # known part is cross-checked at the claimed index itself.
        if commit < start:
            held = term_at(commit)
            if commit > 0 and held not in (COMPACTED, None) and held != committed[commit]:
                self._fail(
                    f"node {node} commits term {held} at {commit}, but term "
                    f"{committed[commit]} was committed there"
                )
            return
        for index in range(start, commit + 1):
            held = term_at(index)
            if held is None:
                self._fail(f"node {node} commits {commit} beyond its last entry {index - 1}")
            if held == COMPACTED:
                # Covered by this node's snapshot; its terms are known once applied.
                applied = self._applied
                held = applied[index][0] if index < len(applied) else COMPACTED
            committed.append(held if held is not None else COMPACTED)

    # -- state machine safety ------------------------------------------------------

    def restarted(self, node: int) -> None:
        """``node`` restarted: its state machine starts empty again."""
        self._last_applied[node] = 0

    def snapshot_applied(self, node: int, index: int, term: int) -> None:
        """``node`` restored its state machine from a snapshot at ``index``."""
        last = self._last_applied.get(node, 0)
        if index <= last:
            self._fail(f"node {node} restored a snapshot at {index} after applying {last}")
        applied = self._applied
        if index < len(applied) and applied[index][0] != term:
            self._fail(
                f"node {node} restored a snapshot at {index} of term {term}; "
                f"term {applied[index][0]} was applied there"
            )
        if index < len(self.committed_terms) and self.committed_terms[index] not in (
            term,
            COMPACTED,
        ):
            self._fail(f"node {node} restored a snapshot at {index} of uncommitted term {term}")
        self._last_applied[node] = index

    def entry_applied(self, node: int, entry: Entry) -> None:
        """``node`` applied ``entry`` to its state machine."""
        last = self._last_applied.get(node, 0)
        if entry.index != last + 1:
            self._fail(f"node {node} applied {entry.index} after {last}")
        self._last_applied[node] = entry.index
        fact = (entry.term, int(entry.type), entry.data)
        applied = self._applied
        if entry.index < len(applied):
            if applied[entry.index] != fact:
                self._fail(
                    f"state machine safety: node {node} applied {fact} at {entry.index}, "
                    f"another replica applied {applied[entry.index]}"
                )
        else:
            applied.append(fact)
        committed = self.committed_terms
        if entry.index < len(committed):
            if committed[entry.index] == COMPACTED:
                committed[entry.index] = entry.term
            elif committed[entry.index] != entry.term:
                self._fail(
                    f"node {node} applied term {entry.term} at {entry.index}, "
                    f"committed term is {committed[entry.index]}"
                )
        else:
            self._fail(f"node {node} applied {entry.index} before anyone committed it")

    def applied_entries(self) -> list[tuple[int, int, bytes]]:
        """(term, type, data) of every applied index, from 1."""
        return self._applied[1:]


def _term_of(entries: Sequence[Entry], index: int) -> int | None:
    for entry in entries:
        if entry.index == index:
            return entry.term
    return None
