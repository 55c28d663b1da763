"""The shape of a request or response type, read once from its dataclass fields.

Every codec compiles its encoder and decoder from a :class:`Shape`, so the
three codecs agree on what a type is. Supported field types: ``int``,
``float``, ``bool``, ``str``, ``bytes``, ``Optional[T]`` (``T | None``),
``list[T]``, ``dict[str, T]``, nested frozen dataclasses or ``NamedTuple``
classes (records: their fields in declaration order) and ``IntEnum``.

PURE.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import dataclass
from typing import Any

from angelia_rpc.errors import LocalUsageError
from protocol import errors

PRIMITIVES: dict[Any, str] = {int: "int", float: "float", bool: "bool", str: "str", bytes: "bytes"}


@dataclass(frozen=True, slots=True)
class Shape:
    """One node of a type's shape tree.

    ``kind`` is one of the PRIMITIVES names, ``optional``, ``list``, ``dict``
    (``item`` is the value shape), ``record`` (``cls`` and ``fields``) or
    ``enum`` (``cls``).
    """

    kind: str
    item: Shape | None = None
    cls: type | None = None
    fields: tuple[tuple[str, Shape], ...] = ()
    is_tuple: bool = False  # a record whose class is a NamedTuple (a tuple of its fields)

    @property
    def is_primitive(self) -> bool:
        """Whether values of this shape need no conversion for msgpack or Avro."""
        return self.kind in PRIMITIVES.values()


_CACHE: dict[Any, Shape] = {}


def _misuse(message: str) -> LocalUsageError:
    return LocalUsageError(errors.BAD_REQUEST, message)


def shape_of(tp: Any) -> Shape:
    """The shape of ``tp`` (a dataclass type for messages); cached per type."""
    cached = _CACHE.get(tp)
    if cached is not None:
        return cached
    shape = _build(tp, ())
    _CACHE[tp] = shape
    return shape


def _build(tp: Any, stack: tuple[type, ...]) -> Shape:
    if tp in PRIMITIVES:
        return Shape(PRIMITIVES[tp])
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1 or len(typing.get_args(tp)) != 2:
            raise _misuse(f"only Optional[T] unions are supported, not {tp!r}")
        return Shape("optional", _build(args[0], stack))
    if origin is list:
        (item,) = typing.get_args(tp)
        return Shape("list", _build(item, stack))
    if origin is dict:
        key, value = typing.get_args(tp)
        if key is not str:
            raise _misuse(f"dict keys must be str, not {key!r} in {tp!r}")
        return Shape("dict", _build(value, stack))
    if isinstance(tp, type) and issubclass(tp, enum.IntEnum):
        return Shape("enum", cls=tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp in stack:
            raise _misuse(f"recursive dataclass {tp.__qualname__} is not supported")
        hints = typing.get_type_hints(tp)
        fields = tuple(
            (f.name, _build(hints[f.name], (*stack, tp))) for f in dataclasses.fields(tp) if f.init
        )
        return Shape("record", cls=tp, fields=fields)
    if is_named_tuple(tp):
        if tp in stack:
            raise _misuse(f"recursive record {tp.__qualname__} is not supported")
        hints = typing.get_type_hints(tp)
        fields = tuple((name, _build(hints[name], (*stack, tp))) for name in tp._fields)
        return Shape("record", cls=tp, fields=fields, is_tuple=True)
    raise _misuse(
        f"type {tp!r} cannot cross the wire: use int, float, bool, str, bytes, Optional, "
        "list, dict[str, T], IntEnum or a dataclass or NamedTuple of those"
    )


def is_named_tuple(tp: Any) -> bool:
    """Whether ``tp`` is a ``typing.NamedTuple`` class."""
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")


def message_shape(tp: Any) -> Shape:
    """The shape of a request or response type: a dataclass or a NamedTuple."""
    if not (isinstance(tp, type) and (dataclasses.is_dataclass(tp) or is_named_tuple(tp))):
        raise _misuse(f"request and response types must be dataclasses or NamedTuples, not {tp!r}")
    return shape_of(tp)
