"""h2 without one waste: a frame's repr reads only the bytes it shows.

h2 logs every frame it receives at trace level and builds the message
eagerly, logger or not: ``repr(frame)``. For a DATA frame that calls
hyperframe's ``_raw_data_repr``, which hexlifies the whole payload to keep
its first 20 hex digits. On the broker's HTTP/2 server that was ~4% of its
CPU while publishing (py-spy), growing with frame size, when that server
still ran on h2. Importing this module replaces the function with one that
gives the same text from the first 10 bytes. ``angelia_rpc.transport.http2``
imports it.

SHELL: patches a third-party module when imported (idempotent).
"""

from __future__ import annotations

import binascii

import hyperframe.frame

SHOWN_BYTES = 10  # hyperframe shows 20 hex digits


def data_repr(data: bytes | memoryview | None) -> str:
    """hyperframe's text for a payload, ``<hex:...>`` or ``None``, reading 10 bytes."""
    if not data:
        return "None"
    shown = binascii.hexlify(data[:SHOWN_BYTES]).decode("ascii")
    return "<hex:" + shown + ("..." if len(data) > SHOWN_BYTES else "") + ">"


setattr(hyperframe.frame, "_raw_data_repr", data_repr)  # noqa: B010 - a private function
