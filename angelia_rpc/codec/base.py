"""The codec protocol: a codec compiles, once per message type, an encoder and a decoder.

Codecs are chosen per cluster by name (``RpcConfig.codec``); the id travels
in every frame so a peer with another codec is caught at connect time and a
stray frame is caught before its payload is misread.

PURE.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from angelia_rpc.errors import AngeliaError, LocalUsageError
from protocol import errors
from protocol.shapes import Shape, ShapeUnsupported, is_record, shape_of

Encoder = Callable[[Any], bytes]
Decoder = Callable[[bytes | memoryview], Any]


class Codec(Protocol):
    """Turns message objects into bytes and back."""

    name: str
    codec_id: int

    def encoder(self, tp: type) -> Encoder:
        """A function encoding instances of the dataclass ``tp``."""
        ...

    def decoder(self, tp: type) -> Decoder:
        """A function decoding bytes into an instance of ``tp``.

        It raises :class:`AngeliaError` with code DECODE_FAILED for bytes that
        are not a ``tp``.
        """
        ...


def decode_failed(tp: type, codec: str, exc: BaseException) -> AngeliaError:
    """The error for bytes that do not decode as ``tp``."""
    return AngeliaError(
        errors.DECODE_FAILED,
        f"{codec} payload is not a valid {tp.__qualname__}: {type(exc).__name__}: {exc}",
    )


def encode_failed(tp: type, codec: str, exc: BaseException) -> LocalUsageError:
    """The error for a value that does not match its declared type."""
    return LocalUsageError(
        errors.BAD_REQUEST,
        f"value does not encode as {tp.__qualname__} with {codec}: {type(exc).__name__}: {exc}",
    )


def message_shape(tp: Any) -> Shape:
    """The shape of a request or response type: a dataclass or a NamedTuple whose fields
    every codec can carry (``protocol.shapes``; fixed-size tuples excepted: Avro has
    no such type). :class:`LocalUsageError` otherwise."""
    if not is_record(tp):
        raise LocalUsageError(
            errors.BAD_REQUEST,
            f"request and response types must be dataclasses or NamedTuples, not {tp!r}",
        )
    try:
        shape = shape_of(tp)
    except ShapeUnsupported as exc:
        raise LocalUsageError(errors.BAD_REQUEST, str(exc)) from None
    _refuse_fixed_tuples(shape, tp)
    return shape


def _refuse_fixed_tuples(shape: Shape, tp: Any) -> None:
    if shape.kind == "fixed_tuple":
        raise LocalUsageError(
            errors.BAD_REQUEST,
            f"a fixed-size tuple in {tp!r} cannot cross the wire: use a NamedTuple or a list",
        )
    for inner in (shape.item, *(field for _, field in shape.fields)):
        if inner is not None:
            _refuse_fixed_tuples(inner, tp)
