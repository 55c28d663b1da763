"""The Avro codec (fastavro, schemaless binary): compact, with a schema per type.

The schema of a dataclass is derived from its fields (:func:`avro_schema`)
unless the class carries one written beside it as ``AVRO_SCHEMA`` (a dict in
Avro's JSON form); field names must match either way. IntEnums travel as
``int`` so a newer peer's values do not break an older reader's schema.

PURE.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import fastavro

from angelia_rpc.codec.base import Decoder, Encoder, decode_failed, encode_failed, message_shape
from protocol.shapes import Shape

_AVRO_PRIMITIVE = {
    "int": "long",
    "float": "double",
    "bool": "boolean",
    "str": "string",
    "bytes": "bytes",
}


def avro_schema(tp: type) -> dict[str, Any]:
    """The Avro record schema of the dataclass ``tp`` (its own ``AVRO_SCHEMA`` if it has one)."""
    written = getattr(tp, "AVRO_SCHEMA", None)
    if isinstance(written, dict):
        return written
    schema = _schema(message_shape(tp), set())
    assert isinstance(schema, dict)
    return schema


def _schema(shape: Shape, named: set[str]) -> Any:
    kind = shape.kind
    if kind in _AVRO_PRIMITIVE:
        return _AVRO_PRIMITIVE[kind]
    if kind == "enum":
        return "long"
    if kind == "optional":
        assert shape.item is not None
        return ["null", _schema(shape.item, named)]
    if kind in ("list", "tuple"):
        assert shape.item is not None
        return {"type": "array", "items": _schema(shape.item, named)}
    if kind == "dict":
        assert shape.item is not None
        return {"type": "map", "values": _schema(shape.item, named)}
    cls = shape.cls
    assert cls is not None
    full_name = f"{cls.__module__}.{cls.__qualname__}".replace("<", "_").replace(">", "_")
    if full_name in named:
        return full_name
    named.add(full_name)
    return {
        "type": "record",
        "name": full_name,
        "fields": [{"name": name, "type": _schema(field, named)} for name, field in shape.fields],
    }


def _to_plain(shape: Shape) -> Callable[[Any], Any] | None:
    kind = shape.kind
    if shape.is_primitive or kind == "enum":
        return None
    if kind in ("optional", "list", "tuple", "dict"):
        assert shape.item is not None
        inner = _to_plain(shape.item)
        if inner is None:
            return None
        if kind == "optional":
            return lambda v: None if v is None else inner(v)
        if kind in ("list", "tuple"):
            return lambda v: [inner(x) for x in v]
        return lambda v: {k: inner(x) for k, x in v.items()}
    pairs = [(name, _to_plain(field)) for name, field in shape.fields]
    return lambda v: {
        name: getattr(v, name) if c is None else c(getattr(v, name)) for name, c in pairs
    }


def _from_plain(shape: Shape) -> Callable[[Any], Any] | None:
    kind = shape.kind
    if shape.is_primitive:
        return None
    if kind == "enum":
        return shape.cls
    if kind == "tuple":  # Avro reads every array as a list
        assert shape.item is not None
        item = _from_plain(shape.item)
        if item is None:
            return tuple
        return lambda v: tuple(item(x) for x in v)
    if kind in ("optional", "list", "dict"):
        assert shape.item is not None
        inner = _from_plain(shape.item)
        if inner is None:
            return None
        if kind == "optional":
            return lambda v: None if v is None else inner(v)
        if kind == "list":
            return lambda v: [inner(x) for x in v]
        return lambda v: {k: inner(x) for k, x in v.items()}
    cls = shape.cls
    assert cls is not None
    pairs = [(name, _from_plain(field)) for name, field in shape.fields]
    return lambda v: cls(**{name: v[name] if c is None else c(v[name]) for name, c in pairs})


class AvroCodec:
    """Avro binary without a container: both peers hold the same schemas."""

    name = "avro"
    codec_id = 2

    def encoder(self, tp: type) -> Encoder:
        """See :meth:`angelia_rpc.codec.base.Codec.encoder`."""
        convert = _to_plain(message_shape(tp))
        assert convert is not None
        parsed = fastavro.parse_schema(avro_schema(tp), named_schemas={})
        write = fastavro.schemaless_writer

        def encode(value: Any) -> bytes:
            buffer = io.BytesIO()
            try:
                write(buffer, parsed, convert(value))
            except Exception as exc:
                raise encode_failed(tp, "avro", exc) from exc
            return buffer.getvalue()

        return encode

    def decoder(self, tp: type) -> Decoder:
        """See :meth:`angelia_rpc.codec.base.Codec.decoder`."""
        convert = _from_plain(message_shape(tp))
        assert convert is not None
        parsed = fastavro.parse_schema(avro_schema(tp), named_schemas={})
        read = fastavro.schemaless_reader

        def decode(data: bytes | memoryview) -> Any:
            buffer = io.BytesIO(data)
            try:
                value = convert(read(buffer, parsed, None))
            except Exception as exc:
                raise decode_failed(tp, "avro", exc) from exc
            if buffer.tell() != len(data):
                raise decode_failed(tp, "avro", ValueError("trailing bytes after the record"))
            return value

        return decode
