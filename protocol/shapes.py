"""The shape of a record type, read once from its fields and type hints.

Every codec of records compiles its encoder and decoder from a :class:`Shape`,
so they all agree on what a type is: the positional codec
(``protocol.positional``: Angelia's msgpack, the nameserver's and the storage
groups' raft logs and snapshots) and Angelia's Avro and JSON codecs.

Supported field types: ``int``, ``float``, ``bool``, ``str``, ``bytes``,
``T | None``, ``list[T]``, ``tuple[T, ...]``, fixed ``tuple[A, B, ...]``,
``dict[str, T]``, ``IntEnum`` and nested records (frozen dataclasses or
``NamedTuple`` classes: their fields in declaration order).

PURE.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import dataclass
from typing import Any

PRIMITIVES: dict[Any, str] = {int: "int", float: "float", bool: "bool", str: "str", bytes: "bytes"}
"""The scalar types and their shape kinds."""


class ShapeUnsupported(TypeError):
    """A type that no record codec can carry (a programming error, found when a codec
    is built for the type)."""


@dataclass(frozen=True, slots=True)
class Shape:
    """One node of a type's shape tree.

    ``kind`` is one of the PRIMITIVES names; ``optional``, ``list``, ``tuple``
    (a ``tuple[T, ...]``) or ``dict`` (``item`` is the value shape);
    ``fixed_tuple`` (``items``); ``record`` (``cls`` and ``fields``; for a
    record, ``required`` counts the leading fields without a default); or
    ``enum`` (``cls``).
    """

    kind: str
    item: Shape | None = None
    cls: type | None = None
    fields: tuple[tuple[str, Shape], ...] = ()
    is_tuple: bool = False  # a record whose class is a NamedTuple (a tuple of its fields)
    items: tuple[Shape, ...] = ()
    required: int = 0

    @property
    def is_primitive(self) -> bool:
        """Whether values of this shape are scalars (no conversion for msgpack or Avro)."""
        return self.kind in PRIMITIVES.values()


_CACHE: dict[Any, Shape] = {}


def shape_of(tp: Any) -> Shape:
    """The shape of ``tp``, cached per type; :class:`ShapeUnsupported` if no codec
    can carry it."""
    cached = _CACHE.get(tp)
    if cached is not None:
        return cached
    shape = _build(tp, ())
    _CACHE[tp] = shape
    return shape


def is_record(tp: Any) -> bool:
    """Whether ``tp`` is a record type: a dataclass or a ``NamedTuple`` class."""
    return isinstance(tp, type) and (dataclasses.is_dataclass(tp) or is_named_tuple(tp))


def is_named_tuple(tp: Any) -> bool:
    """Whether ``tp`` is a ``typing.NamedTuple`` class."""
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")


def _build(tp: Any, stack: tuple[type, ...]) -> Shape:
    if tp in PRIMITIVES:
        return Shape(PRIMITIVES[tp])
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1 or len(typing.get_args(tp)) != 2:
            raise ShapeUnsupported(f"only X | None unions are supported, not {tp!r}")
        return Shape("optional", _build(args[0], stack))
    if origin is list:
        (item,) = typing.get_args(tp)
        return Shape("list", _build(item, stack))
    if origin is tuple:
        parts = typing.get_args(tp)
        if len(parts) == 2 and parts[1] is Ellipsis:
            return Shape("tuple", _build(parts[0], stack))
        return Shape("fixed_tuple", items=tuple(_build(part, stack) for part in parts))
    if origin is dict:
        key, value = typing.get_args(tp)
        if key is not str:
            raise ShapeUnsupported(f"dict keys must be str, not {key!r} in {tp!r}")
        return Shape("dict", _build(value, stack))
    if isinstance(tp, type) and issubclass(tp, enum.IntEnum):
        return Shape("enum", cls=tp)
    if is_record(tp):
        return _record(tp, stack)
    raise ShapeUnsupported(
        f"type {tp!r} cannot cross the wire: use int, float, bool, str, bytes, X | None, "
        "list, tuple, dict[str, T], IntEnum or a dataclass or NamedTuple of those"
    )


def _record(tp: type, stack: tuple[type, ...]) -> Shape:
    if tp in stack:
        raise ShapeUnsupported(f"recursive record {tp.__qualname__} is not supported")
    hints = typing.get_type_hints(tp)
    inner = (*stack, tp)
    if is_named_tuple(tp):
        names: list[str] = list(tp._fields)  # type: ignore[attr-defined]
        defaults: dict[str, object] = tp._field_defaults  # type: ignore[attr-defined]
        has_default = [name in defaults for name in names]
    else:
        declared = [f for f in dataclasses.fields(tp) if f.init]
        names = [f.name for f in declared]
        has_default = [
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            for f in declared
        ]
    fields = tuple((name, _build(hints[name], inner)) for name in names)
    required = has_default.index(True) if True in has_default else len(names)
    return Shape("record", cls=tp, fields=fields, is_tuple=is_named_tuple(tp), required=required)
