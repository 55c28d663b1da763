"""The msgpack codec: the default and the hot path (raft traffic, storage appends).

A record (dataclass or NamedTuple) is encoded as a positional array of its
fields in declaration order, so field names never go over the wire and a
dataclass of primitive fields encodes with one ``attrgetter`` call and
decodes with one ``cls(*array)``. A NamedTuple whose fields need no
conversion is packed as it is (msgpack writes any tuple as an array): the
cheapest shape for hot messages.
Consequence: both peers must declare the same fields in the same order
(append new fields at the end, with defaults, to stay compatible).

PURE.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import msgpack

from angelia_rpc.codec.base import Decoder, Encoder, decode_failed, encode_failed
from angelia_rpc.codec.shapes import Shape, message_shape

Convert = Callable[[Any], Any] | None  # None means "no conversion needed"


def _optional(inner: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else inner(v)


def _list(inner: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: [inner(x) for x in v]


def _dict(inner: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: {k: inner(x) for k, x in v.items()}


def _to_plain(shape: Shape) -> Convert:
    kind = shape.kind
    if shape.is_primitive or kind == "enum":
        return None  # msgpack packs an IntEnum as its int
    if kind == "optional":
        assert shape.item is not None
        inner = _to_plain(shape.item)
        if inner is None:
            return None
        return _optional(inner)
    if kind == "list":
        assert shape.item is not None
        inner = _to_plain(shape.item)
        if inner is None:
            return None
        return _list(inner)
    if kind == "dict":
        assert shape.item is not None
        inner = _to_plain(shape.item)
        if inner is None:
            return None
        return _dict(inner)
    names = [name for name, _ in shape.fields]
    converts = [_to_plain(field) for _, field in shape.fields]
    if shape.is_tuple and all(c is None for c in converts):
        return None  # a NamedTuple of plain fields is its own positional array
    if not names:
        return lambda v: ()
    if all(c is None for c in converts):
        if len(names) == 1:
            get = operator.attrgetter(names[0])
            return lambda v: (get(v),)
        return operator.attrgetter(*names)
    pairs = [(name, c) for name, c in zip(names, converts, strict=True)]
    return lambda v: [getattr(v, name) if c is None else c(getattr(v, name)) for name, c in pairs]


def _from_plain(shape: Shape) -> Convert:
    kind = shape.kind
    if shape.is_primitive:
        return None
    if kind == "enum":
        assert shape.cls is not None
        return shape.cls
    if kind == "optional":
        assert shape.item is not None
        inner = _from_plain(shape.item)
        if inner is None:
            return None
        return _optional(inner)
    if kind == "list":
        assert shape.item is not None
        inner = _from_plain(shape.item)
        if inner is None:
            return None
        return _list(inner)
    if kind == "dict":
        assert shape.item is not None
        inner = _from_plain(shape.item)
        if inner is None:
            return None
        return _dict(inner)
    cls = shape.cls
    assert cls is not None
    converts = [_from_plain(field) for _, field in shape.fields]
    if all(c is None for c in converts):
        return lambda v: cls(*v)
    return lambda v: cls(*[x if c is None else c(x) for c, x in zip(converts, v, strict=True)])


class MsgpackCodec:
    """msgpack with dataclasses as positional arrays."""

    name = "msgpack"
    codec_id = 1

    def __init__(self) -> None:
        self._packer = msgpack.Packer(use_bin_type=True)

    def encoder(self, tp: type) -> Encoder:
        """See :meth:`angelia_rpc.codec.base.Codec.encoder`."""
        convert = _to_plain(message_shape(tp))
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
        convert = _from_plain(message_shape(tp))
        assert convert is not None
        unpackb = msgpack.unpackb

        def decode(data: bytes | memoryview) -> Any:
            try:
                return convert(unpackb(data, raw=False))
            except Exception as exc:
                raise decode_failed(tp, "msgpack", exc) from exc

        return decode
