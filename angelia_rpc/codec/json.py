"""The JSON codec: readable on the wire, slowest of the three.

Dataclasses are objects keyed by field name, ``bytes`` are base64 strings,
IntEnums are their numbers.

PURE.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Callable
from typing import Any

from angelia_rpc.codec.base import Decoder, Encoder, decode_failed, encode_failed, message_shape
from protocol.shapes import Shape

b2a_base64 = binascii.b2a_base64
a2b_base64 = binascii.a2b_base64


def _to_plain(shape: Shape) -> Callable[[Any], Any]:
    kind = shape.kind
    if kind == "bytes":
        return lambda v: b2a_base64(v, newline=False).decode("ascii")
    if kind == "enum":
        return int
    if kind == "float":
        return float
    if shape.is_primitive:
        return lambda v: v
    if kind == "optional":
        assert shape.item is not None
        inner = _to_plain(shape.item)
        return lambda v: None if v is None else inner(v)
    if kind in ("list", "tuple"):
        assert shape.item is not None
        inner = _to_plain(shape.item)
        return lambda v: [inner(x) for x in v]
    if kind == "dict":
        assert shape.item is not None
        inner = _to_plain(shape.item)
        return lambda v: {k: inner(x) for k, x in v.items()}
    pairs = [(name, _to_plain(field)) for name, field in shape.fields]
    return lambda v: {name: c(getattr(v, name)) for name, c in pairs}


def _base64_decode(text: str) -> bytes:
    # The lenient C decoder skips characters outside the alphabet (strict mode
    # is several times slower); a length check catches any skipped character.
    data = a2b_base64(text)
    if len(text) != (len(data) + 2) // 3 * 4:
        raise ValueError("bytes field is not canonical base64")
    return data


def _check(kind: str, v: Any) -> Any:
    expected = {"int": int, "str": str, "bool": bool}[kind]
    if type(v) is not expected:
        raise TypeError(f"expected {kind}, got {type(v).__name__}")
    return v


def _from_plain(shape: Shape) -> Callable[[Any], Any]:
    kind = shape.kind
    if kind == "bytes":
        return _base64_decode
    if kind == "float":
        return float
    if kind in ("int", "str", "bool"):
        return lambda v: _check(kind, v)
    if kind == "enum":
        assert shape.cls is not None
        return shape.cls
    if kind == "optional":
        assert shape.item is not None
        inner = _from_plain(shape.item)
        return lambda v: None if v is None else inner(v)
    if kind in ("list", "tuple"):
        assert shape.item is not None
        inner = _from_plain(shape.item)
        build = list if kind == "list" else tuple
        return lambda v: build(inner(x) for x in v)
    if kind == "dict":
        assert shape.item is not None
        inner = _from_plain(shape.item)
        return lambda v: {k: inner(x) for k, x in v.items()}
    cls = shape.cls
    assert cls is not None
    pairs = [(name, _from_plain(field)) for name, field in shape.fields]
    return lambda v: cls(**{name: c(v[name]) for name, c in pairs if name in v})


class JsonCodec:
    """JSON (stdlib), UTF-8, compact separators."""

    name = "json"
    codec_id = 3

    def encoder(self, tp: type) -> Encoder:
        """See :meth:`angelia_rpc.codec.base.Codec.encoder`."""
        convert = _to_plain(message_shape(tp))
        dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=True).encode

        def encode(value: Any) -> bytes:
            try:
                return dumps(convert(value)).encode()
            except Exception as exc:
                raise encode_failed(tp, "json", exc) from exc

        return encode

    def decoder(self, tp: type) -> Decoder:
        """See :meth:`angelia_rpc.codec.base.Codec.decoder`."""
        convert = _from_plain(message_shape(tp))

        def decode(data: bytes | memoryview) -> Any:
            try:
                return convert(json.loads(bytes(data)))
            except (ValueError, TypeError, KeyError, AttributeError, binascii.Error) as exc:
                raise decode_failed(tp, "json", exc) from exc

        return decode
