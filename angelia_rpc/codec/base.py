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
