"""The msgpack codec: the default and the hot path (raft traffic, storage appends).

A record (dataclass or NamedTuple) is encoded as a positional array of its
fields in declaration order: the positional form of ``protocol.positional``,
the one shared with the nameserver's and the storage groups' raft logs. Field
names never go over the wire; a NamedTuple of plain fields is packed as it
is, a dataclass of primitive fields with one ``attrgetter`` call. Decoding
checks arrays, their lengths, enums and nested records but trusts the scalars'
types (``check_scalars=False``): peers are built from the same declarations,
and checking each scalar would cost up to a third of a small request's decode.
Consequence: both peers must declare the same fields in the same order
(append new fields at the end, with defaults, to stay compatible).

PURE.
"""

from __future__ import annotations

from typing import Any

import msgpack

from angelia_rpc.codec.base import Decoder, Encoder, decode_failed, encode_failed, message_shape
from protocol.positional import plain_decoder, plain_encoder


class MsgpackCodec:
    """msgpack with records as positional arrays."""

    name = "msgpack"
    codec_id = 1

    def __init__(self) -> None:
        self._packer = msgpack.Packer(use_bin_type=True)

    def encoder(self, tp: type) -> Encoder:
        """See :meth:`angelia_rpc.codec.base.Codec.encoder`."""
        message_shape(tp)
        convert = plain_encoder(tp)
        pack = self._packer.pack

        def encode(value: Any) -> bytes:
            try:
                packed: bytes = pack(value if convert is None else convert(value))
                return packed
            except Exception as exc:
                self._packer.reset()
                raise encode_failed(tp, "msgpack", exc) from exc

        return encode

    def decoder(self, tp: type) -> Decoder:
        """See :meth:`angelia_rpc.codec.base.Codec.decoder`."""
        message_shape(tp)
        convert = plain_decoder(tp, check_scalars=False)
        unpackb = msgpack.unpackb

        def decode(data: bytes | memoryview) -> Any:
            try:
                return convert(unpackb(data, raw=False))
            except Exception as exc:
                raise decode_failed(tp, "msgpack", exc) from exc

        return decode
