"""Protobuf wire bytes for the repeated entries of the hot answers, written directly.

Why: every protobuf message the Python upb runtime makes on its own, including
the stub behind each unset submessage a field is set through, is an arena,
and the runtime calls ``malloc_trim(0)`` after every 10,000 arena block frees.
Building a SendMessage answer entry by entry made two arenas per message: at
40,000 messages a second the broker trimmed its heap 16 times a second and
faulted ~70 MB/s of pages back in. Entries written here as bytes and parsed
into their answer in one ``FromString`` make one arena per answer.

Only what these entries need is written: varints, strings and nested
messages, in field-number order, with proto3's default values left out as
protobuf itself leaves them out. The contract tests parse the bytes with the
generated classes and compare them with entries built field by field.

PURE.
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol.protowire import LENGTH_DELIMITED, VARINT, field_key, varint
from protocol.rocketmq.v2 import definition_pb2 as pb


def message_field(number: int, data: bytes) -> bytes:
    """Length-delimited field ``number`` holding ``data``: a message (one element, for a
    repeated one) or a string's UTF-8."""
    return field_key(number, LENGTH_DELIMITED) + varint(len(data)) + data


def _text(number: int, value: str) -> bytes:
    """A string field; empty (proto3's default) is left out."""
    return message_field(number, value.encode()) if value else b""


def _number(number: int, value: int) -> bytes:
    """A varint field; zero (proto3's default) is left out."""
    if not value:
        return b""
    return field_key(number, VARINT) + varint(value)


def status(code: int, message: str) -> bytes:
    """The bytes of a ``Status``."""
    return _number(1, code) + _text(2, message)


STATUS_OK = status(pb.OK, "OK")
"""The success status (its message is the code name, as the proxy writes it)."""


def send_results(status_bytes: bytes, results: Iterable[tuple[str, int, str, str]]) -> bytes:
    """The repeated ``entries`` field (2) of a ``SendMessageResponse``: one
    ``SendResultEntry`` (status 1, message_id 2, transaction_id 3, offset 4,
    recall_handle 5) per (message id, offset, transaction id, recall handle) of
    ``results``, each with ``status_bytes``.

    Runs once per sent message: the status part is written once, the fields
    inline.
    """
    status_part = message_field(1, status_bytes)
    parts = []
    for message_id, offset, transaction_id, recall_handle in results:
        text = message_id.encode()
        entry = status_part + b"\x12" + varint(len(text)) + text if text else status_part
        if transaction_id:
            entry += _text(3, transaction_id)
        if offset:
            entry += b"\x20" + varint(offset)
        if recall_handle:
            entry += _text(5, recall_handle)
        parts.append(b"\x12" + varint(len(entry)) + entry)
    return b"".join(parts)


def ack_result(status_bytes: bytes, message_id: str, receipt_handle: str) -> bytes:
    """An ``AckMessageResultEntry``: message_id 1, receipt_handle 2, status 3."""
    return _text(1, message_id) + _text(2, receipt_handle) + message_field(3, status_bytes)
