"""HPACK decoding (RFC 7541) of received header blocks, cheap for the blocks gRPC sends.

Why not ``hpack.Decoder``: for a gRPC request of a dozen fields it logs each
field twice (a debug call that is not emitted still costs its call), wraps
each in a ``HeaderTuple`` and decodes each integer through a function call;
that was about half of the broker's HTTP/2 CPU per unary call. Here one loop
reads the block: a field that the client's encoder indexed (most of them,
once the dynamic table is warm) is one table lookup. Huffman-coded strings
are still decoded by the hpack library (``decode_huffman``), and its static
table (RFC 7541 Appendix A) is the one used.

Contracts:

- One decoder per connection, fed every header block in the order received
  (the dynamic table follows the peer's encoder).
- The dynamic table holds at most ``table_bytes_max`` (our
  SETTINGS_HEADER_TABLE_SIZE, 4096 by default), counted as RFC 7541 4.1
  counts entries (name + value + 32); a size update may lower it, at the
  start of a block only, never above that.
- A block whose fields add up to more than ``header_list_bytes_max``
  (counted the same way), a bad index, a truncated field or bad Huffman
  code raises ``protocol.http2.FrameError`` with COMPRESSION_ERROR: the
  connection cannot go on, its table being out of step.

PURE.
"""

from __future__ import annotations

from hpack.exceptions import HPACKError
from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

from protocol.http2 import COMPRESSION_ERROR, FrameError

_STATIC: tuple[tuple[bytes, bytes], ...] = HeaderTable.STATIC_TABLE
_STATIC_COUNT = len(_STATIC)  # 61
ENTRY_OVERHEAD_BYTES = 32
"""What an entry costs beyond its name and value (RFC 7541 4.1)."""

TABLE_BYTES_MAX = 4096
HEADER_LIST_BYTES_MAX = 64 * 1024


class HpackDecoder:
    """The decoding side of one connection's HPACK context."""

    def __init__(
        self,
        table_bytes_max: int = TABLE_BYTES_MAX,
        header_list_bytes_max: int = HEADER_LIST_BYTES_MAX,
    ) -> None:
        """``table_bytes_max`` is our SETTINGS_HEADER_TABLE_SIZE."""
        self.table_bytes_max = table_bytes_max
        self.header_list_bytes_max = header_list_bytes_max
        self._table: list[tuple[bytes, bytes]] = []  # the dynamic table, oldest first
        self._table_bytes = 0
        self._table_limit = table_bytes_max  # the encoder's current size (size updates)

    @property
    def table(self) -> list[tuple[bytes, bytes]]:
        """The dynamic table, newest entry first (index 62 of the address space)."""
        return self._table[::-1]

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """The (name, value) fields of ``block``, in order; FrameError if it is bad."""
        try:
            return self._decode(block)
        except IndexError:
            raise FrameError(COMPRESSION_ERROR, "a header block ends inside a field") from None
        except HPACKError as exc:
            raise FrameError(COMPRESSION_ERROR, f"a header block: {exc}") from None

    def _decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        fields: list[tuple[bytes, bytes]] = []
        table = self._table
        list_bytes = 0
        size = len(block)
        i = 0
        while i < size:
            first = block[i]
            if first & 0x80:  # an indexed field (6.1)
                index = first & 0x7F
                i += 1
                if index == 0x7F:
                    index, i = _integer(block, i, index)
                # The lookups of _entry, inline: most of a request's fields come this way.
                if 0 < index <= _STATIC_COUNT:
                    field = _STATIC[index - 1]
                elif _STATIC_COUNT < index <= _STATIC_COUNT + len(table):
                    field = table[len(table) + _STATIC_COUNT - index]
                else:
                    field = self._entry(index)  # raises: out of range
            else:
                if first & 0x40:  # a literal that joins the table (6.2.1)
                    index = first & 0x3F
                    mask = 0x3F
                elif first & 0x20:  # a dynamic table size update (6.3)
                    if fields:
                        raise FrameError(
                            COMPRESSION_ERROR, "a table size update after a header field"
                        )
                    limit = first & 0x1F
                    i += 1
                    if limit == 0x1F:
                        limit, i = _integer(block, i, limit)
                    self._resize(limit)
                    continue
                else:  # a literal without indexing or never indexed (6.2.2, 6.2.3)
                    index = first & 0x0F
                    mask = 0x0F
                i += 1
                if index == mask:
                    index, i = _integer(block, i, index)
                if index:
                    name = self._entry(index)[0]
                else:
                    name, i = _string(block, i)
                value, i = _string(block, i)
                field = (name, value)
                if first & 0x40:
                    self._add(field)
            fields.append(field)
            list_bytes += len(field[0]) + len(field[1]) + ENTRY_OVERHEAD_BYTES
        if list_bytes > self.header_list_bytes_max:
            raise FrameError(
                COMPRESSION_ERROR,
                f"a header list of {list_bytes} bytes is over the {self.header_list_bytes_max}"
                " allowed",
            )
        return fields

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= _STATIC_COUNT:
            return _STATIC[index - 1]
        position = len(self._table) - 1 - (index - _STATIC_COUNT - 1)
        if index == 0 or position < 0:
            raise FrameError(COMPRESSION_ERROR, f"header table index {index} is out of range")
        return self._table[position]

    def _add(self, field: tuple[bytes, bytes]) -> None:
        size = len(field[0]) + len(field[1]) + ENTRY_OVERHEAD_BYTES
        if size > self._table_limit:  # too big for the table: it empties it (4.4)
            self._table.clear()
            self._table_bytes = 0
            return
        self._table.append(field)
        self._table_bytes += size
        self._evict()

    def _resize(self, limit: int) -> None:
        if limit > self.table_bytes_max:
            raise FrameError(
                COMPRESSION_ERROR,
                f"a table size update to {limit} is over the {self.table_bytes_max} allowed",
            )
        self._table_limit = limit
        self._evict()

    def _evict(self) -> None:
        table = self._table
        while self._table_bytes > self._table_limit:
            name, value = table.pop(0)
            self._table_bytes -= len(name) + len(value) + ENTRY_OVERHEAD_BYTES


def _integer(block: bytes, i: int, value: int) -> tuple[int, int]:
    """The rest of an integer whose prefix was full (RFC 7541 5.1): ``value`` is that
    prefix's maximum, ``i`` the next byte; the integer and the index after it."""
    shift = 0
    while True:
        byte = block[i]
        i += 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7
        if shift >= 28:  # four bytes of 7 bits carry what a header needs
            raise FrameError(COMPRESSION_ERROR, "an HPACK integer over 2**28")


def _string(block: bytes, i: int) -> tuple[bytes, int]:
    """A string literal (RFC 7541 5.2) at ``i``; the string and the index after it."""
    first = block[i]
    length = first & 0x7F
    i += 1
    if length == 0x7F:
        length, i = _integer(block, i, length)
    end = i + length
    if end > len(block):
        raise FrameError(COMPRESSION_ERROR, "a header block ends inside a string")
    data = block[i:end]
    return (decode_huffman(data) if first & 0x80 else data), end
