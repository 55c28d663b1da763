"""Codecs by name: msgpack (default, fastest), avro, json.

PURE.
"""

from __future__ import annotations

from angelia_rpc.codec.avro import AvroCodec, avro_schema
from angelia_rpc.codec.base import Codec, Decoder, Encoder
from angelia_rpc.codec.json import JsonCodec
from angelia_rpc.codec.msgpack import MsgpackCodec
from angelia_rpc.errors import LocalUsageError
from protocol import errors

CODEC_NAMES = ("msgpack", "avro", "json")


def codec_named(name: str) -> Codec:
    """A new codec instance for ``name`` (one of :data:`CODEC_NAMES`)."""
    if name == "msgpack":
        return MsgpackCodec()
    if name == "avro":
        return AvroCodec()
    if name == "json":
        return JsonCodec()
    raise LocalUsageError(
        errors.BAD_REQUEST, f"unknown codec {name!r}: use one of {', '.join(CODEC_NAMES)}"
    )


__all__ = [
    "CODEC_NAMES",
    "AvroCodec",
    "Codec",
    "Decoder",
    "Encoder",
    "JsonCodec",
    "MsgpackCodec",
    "avro_schema",
    "codec_named",
]
