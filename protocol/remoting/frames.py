"""Remoting commands to and from bytes.

A frame on the wire::

    int32 BE  length          4 + header length + body length (not counting itself)
    int32 BE  header mark     serialize type << 24 | header length (low 24 bits)
    bytes     header          JSON (type 0) or ROCKETMQ binary (type 1)
    bytes     body

The JSON header is an object ``{"code", "language", "version", "opaque",
"flag", "remark", "extFields"}``. The ROCKETMQ header is code (int16),
language (byte), version (int16), opaque (int32), flag (int32), remark
(int32 length + UTF-8), extFields (int32 length, then per entry an int16 key
length + key and an int32 value length + value).

extFields values are strings on the wire of the Java client only: the C++
client writes some as JSON numbers and ali-ons writes numbers and booleans.
The decoder turns every value into the string the Java client would have
sent (``true``/``false`` for booleans, decimal digits for integers), so
header readers see one form.

The decoder is incremental: :meth:`FrameDecoder.receive` takes bytes as they
arrive and :meth:`FrameDecoder.next_command` hands out whole commands. A
frame whose header cannot be read comes out as :class:`Malformed` (the
framing is intact: the connection can answer and go on); a length that
cannot be trusted (below 4, above the maximum) raises :class:`FrameError`
and the decoder stays failed.

PURE.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from protocol.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, LanguageCode, SerializeType
from protocol.remoting.errors import FrameError, HeaderError

FRAME_BYTES_MAX = 16 * 1024 * 1024
"""The largest frame accepted by default (RocketMQ's default too)."""
HEADER_BYTES_MAX = (1 << 24) - 1
"""The header length field has 24 bits."""

_U32 = struct.Struct(">I")
_FRAME_HEAD = struct.Struct(">II")
_BINARY_FIXED = struct.Struct(">hbhii")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

NO_FIELDS: Mapping[str, str] = MappingProxyType({})
_JSON_HEADER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""The JSON header's encoder (built once: ``json.dumps`` with options builds one a call)."""


@dataclass(frozen=True, slots=True)
class RemotingCommand:
    """One request or response. ``ext_fields`` are the header's string fields."""

    code: int
    opaque: int
    flag: int = 0
    language: str = "JAVA"
    version: int = 0
    remark: str | None = None
    ext_fields: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        """Whether this answers a request (flag bit 0)."""
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """Whether the sender wants no answer (flag bit 1)."""
        return bool(self.flag & FLAG_ONEWAY)

    def reply(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: Mapping[str, str] = NO_FIELDS,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to this request: its opaque, in its header serialization."""
        return RemotingCommand(
            code=code,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            language=LanguageCode.JAVA.name,
            version=self.version,
            remark=remark,
            ext_fields=ext_fields,
            body=body,
            serialize_type=self.serialize_type,
        )


@dataclass(frozen=True, slots=True)
class Malformed:
    """A whole frame whose header could not be read.

    ``opaque`` and ``flag`` are what could be recovered of them (0 when
    nothing could), so the sender can still be answered; ``reason`` says
    what was wrong.
    """

    opaque: int
    flag: int
    reason: str

    @property
    def is_oneway(self) -> bool:
        """Whether the sender asked for no answer (as far as the flag could be read)."""
        return bool(self.flag & FLAG_ONEWAY)


Decoded = RemotingCommand | Malformed


# ---------------------------------------------------------------------- encoding


def encode(command: RemotingCommand) -> bytes:
    """The frame of ``command``, header in its ``serialize_type``."""
    if command.serialize_type is SerializeType.ROCKETMQ:
        header = encode_binary_header(command)
    else:
        header = encode_json_header(command)
    if len(header) > HEADER_BYTES_MAX:
        raise ValueError(f"header of {len(header)} bytes exceeds the {HEADER_BYTES_MAX} maximum")
    return (
        _FRAME_HEAD.pack(
            4 + len(header) + len(command.body),
            int(command.serialize_type) << 24 | len(header),
        )
        + header
        + command.body
    )


def encode_json_header(command: RemotingCommand) -> bytes:
    """The JSON header of ``command`` (extFields always present, remark only if set)."""
    header: dict[str, object] = {
        "code": command.code,
        "language": command.language,
        "version": command.version,
        "opaque": command.opaque,
        "flag": command.flag,
        "extFields": fields if type(fields := command.ext_fields) is dict else dict(fields),
        "serializeTypeCurrentRPC": "JSON",
    }
    if command.remark is not None:
        header["remark"] = command.remark
    return _JSON_HEADER.encode(header).encode()


def encode_binary_header(command: RemotingCommand) -> bytes:
    """The ROCKETMQ binary header of ``command``; ValueError if a number does not fit."""
    try:
        language = LanguageCode[command.language]
    except KeyError:
        language = LanguageCode.OTHER
    try:
        fixed = _BINARY_FIXED.pack(
            command.code, int(language), command.version, command.opaque, command.flag
        )
    except struct.error as error:
        raise ValueError(f"a header number does not fit the ROCKETMQ header: {error}") from None
    remark = (command.remark or "").encode()
    fields = bytearray()
    for key, value in command.ext_fields.items():
        key_bytes, value_bytes = key.encode(), value.encode()
        fields += _I16.pack(len(key_bytes)) + key_bytes + _I32.pack(len(value_bytes)) + value_bytes
    return fixed + _I32.pack(len(remark)) + remark + _I32.pack(len(fields)) + fields


# ---------------------------------------------------------------------- decoding


class FrameDecoder:
    """Bytes in, commands out (see the module docstring).

    Invariant: ``_buffer[_start:]`` holds the bytes received and not yet
    decoded; a failed decoder (``failure`` set) decodes nothing more.
    """

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX) -> None:
        if frame_bytes_max < 8:
            raise ValueError("a frame needs at least 8 bytes")
        self.frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()
        self._start = 0
        self.failure: FrameError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received that are not yet part of a decoded command."""
        return len(self._buffer) - self._start

    def receive(self, data: bytes) -> None:
        """Add bytes read from the stream."""
        if self._start and self._start * 2 >= len(self._buffer):
            del self._buffer[: self._start]
            self._start = 0
        self._buffer += data

    def next_command(self) -> Decoded | None:
        """The next whole command, None until more bytes arrive; raises FrameError."""
        if self.failure is not None:
            raise self.failure
        available = len(self._buffer) - self._start
        if available < 4:
            return None
        (length,) = _U32.unpack_from(self._buffer, self._start)
        if length < 4:
            self.failure = FrameError(
                f"frame length {length} is below the 4 bytes of its header-length field"
            )
            raise self.failure
        if length > self.frame_bytes_max:
            self.failure = FrameError(
                f"frame of {length} bytes exceeds the {self.frame_bytes_max}-byte maximum"
            )
            raise self.failure
        if available < 4 + length:
            return None
        start = self._start + 4
        self._start = start + length
        # Read in place: the header and the body are the only copies made. The view is
        # released before returning (the buffer cannot grow while one is held).
        with memoryview(self._buffer) as buffer, buffer[start : start + length] as frame:
            return decode_frame(frame)

    def end_of_stream(self) -> FrameError | None:
        """At the end of the stream: the error for a frame cut short, if one was."""
        if self.failure is not None:
            return self.failure
        available = len(self._buffer) - self._start
        if available == 0:
            return None
        if available < 4:
            return FrameError(f"stream ended inside a frame's length field ({available} of 4)")
        (length,) = _U32.unpack_from(self._buffer, self._start)
        return FrameError(f"stream ended inside a frame: {available - 4} of {length} bytes came")


def decode_frame(frame: bytes | memoryview) -> Decoded:
    """One frame without its leading length: a command, or why its header is unreadable."""
    (mark,) = _U32.unpack_from(frame, 0)
    type_code, header_length = mark >> 24, mark & HEADER_BYTES_MAX
    if header_length > len(frame) - 4:
        return Malformed(
            0, 0, f"header length {header_length} exceeds the frame's {len(frame) - 4} bytes"
        )
    header = bytes(frame[4 : 4 + header_length])
    body = bytes(frame[4 + header_length :])
    if type_code == SerializeType.JSON:
        return _decode_json(header, body)
    if type_code == SerializeType.ROCKETMQ:
        return _decode_binary(header, body)
    return Malformed(0, 0, f"unknown header serialize type {type_code}")


def _decode_json(header: bytes, body: bytes) -> Decoded:
    try:
        parsed = json.loads(header)
    except (ValueError, RecursionError) as error:
        return Malformed(0, 0, f"JSON header is not valid JSON: {error}")
    if not isinstance(parsed, dict):
        return Malformed(0, 0, f"JSON header is a {type(parsed).__name__}, not an object")
    opaque = flag = 0
    try:
        opaque = _json_int(parsed, "opaque", 0)
        flag = _json_int(parsed, "flag", 0)
        code = _json_int(parsed, "code", None)
        version = _json_int(parsed, "version", 0)
        language = _json_language(parsed.get("language"))
        remark = parsed.get("remark")
        if remark is not None and not isinstance(remark, str):
            raise HeaderError(f"remark is a {type(remark).__name__}, not a string")
        fields = parsed.get("extFields")
        if fields is None:
            ext_fields: Mapping[str, str] = NO_FIELDS
        elif isinstance(fields, dict):
            if all(type(value) is str for value in fields.values()):
                ext_fields = fields  # as the Java client sends them (JSON keys are text)
            else:
                ext_fields = {
                    str(key): text
                    for key, value in fields.items()
                    if (text := field_text(str(key), value)) is not None
                }
        else:
            raise HeaderError(f"extFields is a {type(fields).__name__}, not an object")
    except HeaderError as error:
        return Malformed(opaque, flag, f"JSON header: {error}")
    return RemotingCommand(
        code, opaque, flag, language, version, remark, ext_fields, body, SerializeType.JSON
    )


def field_text(key: str, value: object) -> str | None:
    """An extFields value as the Java client would send it (None: absent); HeaderError
    for a value that is neither text, a number nor a boolean."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return repr(value)
    raise HeaderError(f"extFields[{key!r}] is a {type(value).__name__}, not a string or number")


def _json_int(header: dict[str, object], name: str, default: int | None) -> int:
    value = header.get(name)
    if value is None:
        if default is None:
            raise HeaderError(f"{name} is missing")
        return default
    if isinstance(value, bool):
        raise HeaderError(f"{name} is a boolean, not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise HeaderError(f"{name} is {value!r}, not an integer")


def _json_language(value: object) -> str:
    if value is None:
        return LanguageCode.OTHER.name
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return LanguageCode(value).name
        except ValueError:
            return LanguageCode.OTHER.name
    raise HeaderError(f"language is {value!r}, not a name")


def _decode_binary(header: bytes, body: bytes) -> Decoded:
    if len(header) < _BINARY_FIXED.size + 8:
        return Malformed(
            0, 0, f"ROCKETMQ header of {len(header)} bytes is shorter than its fixed part"
        )
    code, language_byte, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
    try:
        language = LanguageCode(language_byte).name
    except ValueError:
        language = LanguageCode.OTHER.name
    position = _BINARY_FIXED.size
    try:
        remark_bytes, position = _sized(header, position, _I32, "remark")
        fields_bytes, position = _sized(header, position, _I32, "extFields")
        if position != len(header):
            raise HeaderError(f"{len(header) - position} bytes follow the extFields")
        remark = remark_bytes.decode() if remark_bytes else None
        ext_fields: dict[str, str] = {}
        at = 0
        while at < len(fields_bytes):
            key, at = _sized(fields_bytes, at, _I16, "extFields key")
            value, at = _sized(fields_bytes, at, _I32, "extFields value")
            ext_fields[key.decode()] = value.decode()
    except UnicodeDecodeError as error:
        return Malformed(opaque, flag, f"ROCKETMQ header: text is not UTF-8 ({error.reason})")
    except HeaderError as error:
        return Malformed(opaque, flag, f"ROCKETMQ header: {error}")
    return RemotingCommand(
        code,
        opaque,
        flag,
        language,
        version,
        remark,
        ext_fields or NO_FIELDS,
        body,
        SerializeType.ROCKETMQ,
    )


def _sized(data: bytes, position: int, size: struct.Struct, what: str) -> tuple[bytes, int]:
    """A length-prefixed run of ``data`` at ``position``, and the position after it."""
    if position + size.size > len(data):
        raise HeaderError(f"{what} length runs past the header")
    (length,) = size.unpack_from(data, position)
    position += size.size
    if length < 0 or position + length > len(data):
        raise HeaderError(f"{what} length {length} runs past the header")
    return data[position : position + length], position + length
