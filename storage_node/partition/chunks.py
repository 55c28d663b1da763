"""A memo of a long sequence's msgpack encoding, in chunks, so snapshots re-encode only changes.

The sequences (a queue's entries, the dedup window) have absolute positions:
their items sit at ``[first, end)``, where appends raise ``end`` and drops from
the front raise ``first``; neither goes down. Chunk ``k`` is the positions
``[k * CHUNK, (k + 1) * CHUNK)`` that lie in ``[first, end)``: chunks are aligned
to absolute positions, so dropping from the front cuts into one chunk only.
(``CHUNK``, the default size, is read when a memo is made: tests make small
chunks. The positions need not be single items: the dedup window's are its
runs of entries, and it gives its own size.)

:class:`PackedChunks` keeps per chunk a :class:`Piece`: the encodings of the
items at ``[lo, hi)`` back to back (no array header; see ``wire.pack_items``)
and ``meta``, a summary of those items its owner wants (merged with
``merge`` when a piece is extended).

Contract with the owner:

* a piece stays right while the items it covers are unchanged: the owner calls
  :meth:`PackedChunks.forget` for a chunk whose item it replaces in place;
* appends and drops from the front need no call: :meth:`PackedChunks.missing`,
  given the current ``first`` and ``end``, drops the pieces the front left or
  cut into and names what is not covered yet (a whole chunk, or the items past
  a piece's ``hi``), which the owner packs and hands to :meth:`PackedChunks.add`.

After that, :meth:`PackedChunks.pieces` covers ``[first, end)`` exactly, in
order. Costs: a refresh is O(chunks) plus what it names to pack, which is what
changed since the last one.

PURE.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

CHUNK = 1024
"""Items per chunk."""

M = TypeVar("M")


@dataclass(frozen=True, slots=True)
class Piece(Generic[M]):
    """The encodings of a chunk's items at ``[lo, hi)``, and their summary."""

    lo: int
    hi: int
    packed: bytes
    meta: M


class PackedChunks(Generic[M]):
    """Pieces by chunk number (see the module docstring for the contract)."""

    __slots__ = ("_merge", "_pieces", "size")

    def __init__(self, merge: Callable[[M, M], M], size: int | None = None) -> None:
        """``size``: positions per chunk (None: ``CHUNK``)."""
        self._merge = merge
        self._pieces: dict[int, Piece[M]] = {}
        self.size = CHUNK if size is None else size

    def forget(self, chunk: int) -> None:
        """Drop chunk ``chunk``'s piece (one of its items changed)."""
        self._pieces.pop(chunk, None)

    def missing(self, first: int, end: int) -> list[tuple[int, int, int]]:
        """``(chunk, lo, hi)`` for each range of ``[first, end)`` no piece covers, ascending.

        Drops the pieces that no longer start where their chunk does, and any
        outside the range.
        """
        pieces = self._pieces
        size = self.size
        first_chunk = first // size
        end_chunk = -(-end // size) if first < end else first_chunk
        for chunk in [chunk for chunk in pieces if not first_chunk <= chunk < end_chunk]:
            del pieces[chunk]
        wanted: list[tuple[int, int, int]] = []
        for chunk in range(first_chunk, end_chunk):
            lo = max(first, chunk * size)
            hi = min(end, (chunk + 1) * size)
            piece = pieces.get(chunk)
            if piece is not None and (piece.lo != lo or piece.hi > hi):
                del pieces[chunk]
                piece = None
            if piece is None:
                wanted.append((chunk, lo, hi))
            elif piece.hi < hi:
                wanted.append((chunk, piece.hi, hi))
        return wanted

    def add(self, chunk: int, lo: int, hi: int, packed: bytes, meta: M) -> None:
        """Cover ``[lo, hi)`` of ``chunk`` (a range :meth:`missing` named)."""
        piece = self._pieces.get(chunk)
        if piece is None:
            self._pieces[chunk] = Piece(lo, hi, packed, meta)
        else:
            assert piece.hi == lo, "an extension starts where its piece ends"
            self._pieces[chunk] = Piece(
                piece.lo, hi, piece.packed + packed, self._merge(piece.meta, meta)
            )

    def pieces(self) -> list[Piece[M]]:
        """The pieces in chunk order (all of ``[first, end)`` right after a refresh)."""
        return [self._pieces[chunk] for chunk in sorted(self._pieces)]
