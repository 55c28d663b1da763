"""The remoting frame codec: round trips, incremental decoding, and bad input."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, LanguageCode, SerializeType
from protocol.remoting.errors import FrameError
from protocol.remoting.frames import (
    FrameDecoder,
    Malformed,
    RemotingCommand,
    decode_frame,
    encode,
)

FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None)

texts = st.text(max_size=40)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(1 << 15), (1 << 15) - 1),
    opaque=st.integers(-(1 << 31), (1 << 31) - 1),
    flag=st.integers(0, 3),
    language=st.sampled_from([code.name for code in LanguageCode]),
    version=st.integers(-(1 << 15), (1 << 15) - 1),
    remark=st.none() | st.text(min_size=1, max_size=40),
    ext_fields=st.dictionaries(texts, texts, max_size=6),
    body=st.binary(max_size=300),
    serialize_type=st.sampled_from(list(SerializeType)),
)


def _decode_all(data: bytes, frame_bytes_max: int = 1 << 20) -> list[RemotingCommand | Malformed]:
    decoder = FrameDecoder(frame_bytes_max)
    decoder.receive(data)
    out = []
    while (item := decoder.next_command()) is not None:
        out.append(item)
    assert decoder.end_of_stream() is None
    return out


def _frame(header: bytes, body: bytes = b"", type_code: int = 0) -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), type_code << 24 | len(header)) + (
        header + body
    )


@FUZZ
@given(commands)
def test_every_command_round_trips_in_both_header_serializations(command: RemotingCommand) -> None:
    (decoded,) = _decode_all(encode(command))
    assert decoded == command


@FUZZ
@given(st.lists(commands, min_size=1, max_size=5), st.data())
def test_commands_split_anywhere_decode_the_same(
    batch: list[RemotingCommand], data: st.DataObject
) -> None:
    stream = b"".join(encode(command) for command in batch)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = FrameDecoder()
    decoded: list[RemotingCommand | Malformed] = []
    previous = 0
    for cut in [*cuts, len(stream)]:
        decoder.receive(stream[previous:cut])
        previous = cut
        while (item := decoder.next_command()) is not None:
            decoded.append(item)
    assert decoded == batch
    assert decoder.buffered_bytes == 0


@FUZZ
@given(st.binary(max_size=400))
def test_garbage_never_escapes_as_anything_but_a_frame_error_or_malformed(data: bytes) -> None:
    decoder = FrameDecoder(frame_bytes_max=1024)
    decoder.receive(data)
    failure: FrameError | None = None
    try:
        while (item := decoder.next_command()) is not None:
            assert isinstance(item, (RemotingCommand, Malformed))
    except FrameError as error:
        failure = error
    if failure is not None:
        assert str(failure)
        with pytest.raises(FrameError):
            decoder.next_command()  # a failed decoder stays failed


@FUZZ
@given(st.binary(max_size=400))
def test_any_frame_body_decodes_or_says_why(payload: bytes) -> None:
    frame = struct.pack(">I", len(payload) & 0xFFFFFF) + payload
    item = decode_frame(frame)
    assert isinstance(item, RemotingCommand) or item.reason


def test_json_from_the_java_client_reads_with_string_fields() -> None:
    header = json.dumps(
        {
            "code": 310,
            "language": "JAVA",
            "version": 121,
            "opaque": 7,
            "flag": 0,
            "extFields": {"a": "group", "d": "4", "k": "false"},
            "serializeTypeCurrentRPC": "JSON",
        }
    ).encode()
    (command,) = _decode_all(_frame(header, b"body"))
    assert isinstance(command, RemotingCommand)
    assert (command.code, command.opaque, command.language, command.body) == (
        310,
        7,
        "JAVA",
        b"body",
    )
    assert dict(command.ext_fields) == {"a": "group", "d": "4", "k": "false"}


def test_numbers_and_booleans_in_ext_fields_become_the_java_text() -> None:
    """ali-ons writes numbers and booleans, the C++ client writes ints."""
    header = json.dumps(
        {
            "code": 10,
            "language": "CPP",
            "version": 63,
            "opaque": 1,
            "flag": 0,
            "extFields": {"d": 4, "k": False, "m": True, "x": 4.0, "y": 1.5, "z": None},
        }
    ).encode()
    (command,) = _decode_all(_frame(header))
    assert isinstance(command, RemotingCommand)
    assert dict(command.ext_fields) == {"d": "4", "k": "false", "m": "true", "x": "4", "y": "1.5"}


def test_numeric_strings_and_language_numbers_are_accepted() -> None:
    header = json.dumps({"code": "105", "opaque": "9", "language": 1}).encode()
    (command,) = _decode_all(_frame(header))
    assert isinstance(command, RemotingCommand)
    assert (command.code, command.opaque, command.language) == (105, 9, "CPP")


@pytest.mark.parametrize(
    ("header", "opaque", "reason"),
    [
        (b"{not json", 0, "not valid JSON"),
        (b"[1, 2]", 0, "not an object"),
        (b'{"opaque": 5, "flag": 2}', 5, "code is missing"),
        (b'{"code": 10, "opaque": 6, "extFields": [1]}', 6, "extFields is a list"),
        (b'{"code": 10, "opaque": 6, "extFields": {"a": {"b": 1}}}', 6, "extFields['a']"),
        (b'{"code": true, "opaque": 3}', 3, "boolean"),
        (b'{"code": 10, "opaque": 3, "remark": 4}', 3, "remark"),
        (b"[" * 100_000, 0, "not valid JSON"),
    ],
)
def test_unreadable_json_headers_come_out_malformed_with_what_was_recovered(
    header: bytes, opaque: int, reason: str
) -> None:
    (item,) = _decode_all(_frame(header))
    assert isinstance(item, Malformed)
    assert item.opaque == opaque
    assert reason in item.reason


def test_a_malformed_frame_leaves_the_next_frame_readable() -> None:
    good = RemotingCommand(code=34, opaque=2)
    items = _decode_all(_frame(b"{oops") + encode(good))
    assert isinstance(items[0], Malformed)
    assert items[1] == good


def test_header_longer_than_its_frame_is_malformed_not_fatal() -> None:
    frame = struct.pack(">II", 8, 100) + b"abcd"
    (item,) = _decode_all(frame)
    assert isinstance(item, Malformed)
    assert "header length 100" in item.reason


def test_unknown_serialize_type_is_malformed() -> None:
    (item,) = _decode_all(_frame(b"{}", type_code=7))
    assert isinstance(item, Malformed)
    assert "serialize type 7" in item.reason


def test_binary_header_with_lengths_past_its_end_is_malformed_with_its_opaque() -> None:
    header = struct.pack(">hbhii", 10, 0, 1, 77, FLAG_ONEWAY) + struct.pack(">i", 1000)
    header += struct.pack(">i", 0)
    (item,) = _decode_all(_frame(header, type_code=1))
    assert isinstance(item, Malformed)
    assert item.opaque == 77
    assert item.is_oneway
    assert "remark length 1000" in item.reason


def test_oversized_frame_is_a_frame_error_before_its_bytes_arrive() -> None:
    decoder = FrameDecoder(frame_bytes_max=1024)
    decoder.receive(struct.pack(">I", 1025))
    with pytest.raises(FrameError, match="1025 bytes exceeds the 1024-byte maximum"):
        decoder.next_command()
    assert isinstance(decoder.end_of_stream(), FrameError)


def test_frame_length_below_four_is_a_frame_error() -> None:
    decoder = FrameDecoder()
    decoder.receive(struct.pack(">I", 3) + b"abc")
    with pytest.raises(FrameError, match="below the 4 bytes"):
        decoder.next_command()


def test_a_stream_ending_inside_a_frame_says_how_much_came() -> None:
    frame = encode(RemotingCommand(code=10, opaque=1, body=b"x" * 50))
    decoder = FrameDecoder()
    decoder.receive(frame[:-10])
    assert decoder.next_command() is None
    error = decoder.end_of_stream()
    assert error is not None
    assert f"{len(frame) - 14} of {len(frame) - 4} bytes" in str(error)
    decoder = FrameDecoder()
    decoder.receive(frame[:2])
    assert "length field (2 of 4)" in str(decoder.end_of_stream())


def test_reply_keeps_the_opaque_and_serialization_and_sets_the_response_flag() -> None:
    request = RemotingCommand(
        code=105, opaque=42, flag=0, version=63, serialize_type=SerializeType.ROCKETMQ
    )
    reply = request.reply(0, "ok", {"k": "v"}, b"b")
    assert reply.is_response
    assert not reply.is_oneway
    assert reply.flag == FLAG_RESPONSE
    assert (reply.opaque, reply.serialize_type, reply.version) == (42, SerializeType.ROCKETMQ, 63)
    (decoded,) = _decode_all(encode(reply))
    assert decoded == reply


def test_json_reply_header_has_ext_fields_and_no_null_remark() -> None:
    """ali-ons and jsoncpp read these headers; an absent remark is left out."""
    frame = encode(RemotingCommand(code=0, opaque=1, flag=FLAG_RESPONSE))
    (length, mark) = struct.unpack_from(">II", frame)
    assert mark >> 24 == 0
    assert length == len(frame) - 4
    header = json.loads(frame[8 : 8 + (mark & 0xFFFFFF)])
    assert header["extFields"] == {}
    assert "remark" not in header


def test_binary_header_refuses_numbers_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        encode(RemotingCommand(code=1 << 16, opaque=1, serialize_type=SerializeType.ROCKETMQ))
