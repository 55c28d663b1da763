"""The record batch format shared by storage and the Spark reader."""

from __future__ import annotations

import struct

import crc32c
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import errors
from protocol.records import (
    BATCH_MAGIC,
    MessageRecord,
    RecordCorrupted,
    array_bounds,
    decode_batch,
    decode_filter_columns,
    decode_record_at,
    encode_batch,
    encode_packed_batch,
    item_bounds,
    items_span,
    pack_items,
    pack_record,
    pack_records,
    packed_batch_parts,
    unpack_records,
)
from protocol.records import _columns_fast as columns_fast
from protocol.vocabulary import MessageType

text = st.text(max_size=12)
records = st.builds(
    MessageRecord,
    topic=text,
    queue_id=st.integers(0, 1 << 20),
    message_id=text,
    body=st.binary(max_size=64),
    tag=text,
    keys=st.lists(text, max_size=3).map(tuple),
    message_group=text,
    properties=st.dictionaries(text, text, max_size=3).map(MessageRecord.sorted_properties),
    born_timestamp_ms=st.integers(0, 1 << 45),
    delivery_timestamp_ms=st.integers(0, 1 << 45),
    message_type=st.sampled_from(list(MessageType)),
    born_host=text,
    dead_letter_topic=text,
    dead_letter_message_id=text,
)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(records, max_size=5), st.integers(-(1 << 62), 1 << 62))
def test_batches_round_trip(batch: list[MessageRecord], store_timestamp_ms: int) -> None:
    data = encode_batch(batch, store_timestamp_ms)
    decoded = decode_batch(data)
    assert decoded.records == tuple(batch)
    assert decoded.store_timestamp_ms == store_timestamp_ms
    assert encode_batch(decoded.records, store_timestamp_ms) == data


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.lists(records, min_size=1, max_size=6), st.data())
def test_one_record_reads_like_the_whole_batch(
    batch: list[MessageRecord], data: st.DataObject
) -> None:
    encoded = encode_batch(batch, 5)
    position = data.draw(st.integers(0, len(batch) - 1))
    assert decode_record_at(encoded, position) == batch[position]


# Values of the wrong wire type for some field: a bool is an int to ==, an ExtType is a
# tuple subclass, a list is not the tuple the fast paths unpack arrays as.
stray_values = st.one_of(
    st.booleans(),
    st.integers(-5, 5),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.none(),
    st.floats(allow_nan=False),
    st.just(msgpack.ExtType(1, b"x")),
    st.lists(st.text(max_size=2), max_size=2),
    st.lists(st.text(max_size=2), max_size=2).map(tuple),
    st.tuples(st.text(max_size=2), st.integers()),
    st.just((("k", "v"),)),
    st.just((("k",),)),
)


@settings(max_examples=600, deadline=None, derandomize=True, database=None)
@given(
    records,
    # Keys (5), properties (7) and the message type (10) have checks beyond the type.
    st.lists(st.tuples(st.sampled_from([5, 7, 10, *range(15)]), stray_values), max_size=2),
    st.booleans(),
)
def test_one_record_is_checked_as_a_batch_of_it_is(
    record: MessageRecord, strays: list[tuple[int, object]], short: bool
) -> None:
    """The one-record path of the column checks (an append to one of many queues)
    accepts exactly the records the batch path accepts, with the same columns."""
    item = list(msgpack.unpackb(pack_record(record), use_list=False, raw=False))
    item[10] = int(record.message_type)
    for field, value in strays:
        if field < len(item):
            item[field] = value
    if short:
        item = item[:-1]
    alone = columns_fast((tuple(item),))
    twice = columns_fast((tuple(item), tuple(item)))
    if twice is None:
        assert alone is None
    else:
        assert alone == tuple(column[:1] for column in twice)


_PLAIN_ROW = (
    "t", 1, "m", b"b", "tag", ("k",), "g", (("p", "v"),), 1, 2,
    int(MessageType.NORMAL), "h", "", "",
)  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (5, ("k", 3)),  # a key that is not a string
        (5, msgpack.ExtType(1, b"x")),  # a tuple subclass
        (7, (("p",),)),  # a property that is not a pair
        (7, (("p", 3),)),  # a property value that is not a string
        (7, ("p", "v")),  # pairs flattened
        (10, 99),  # no such message type
        (1, True),  # a bool where an int goes
        (4, ["tag"]),
        (3, "body"),
    ],
)
def test_one_record_of_a_wrong_type_is_left_to_the_exact_path(field: int, value: object) -> None:
    assert columns_fast((_PLAIN_ROW,)) == tuple(zip(_PLAIN_ROW))
    row = list(_PLAIN_ROW)
    row[field] = value
    assert columns_fast((tuple(row),)) is None
    assert columns_fast((tuple(row), _PLAIN_ROW)) is None
    assert columns_fast((_PLAIN_ROW[:-1],)) is None
    assert columns_fast(((*_PLAIN_ROW, ""),)) is None
    assert columns_fast((list(_PLAIN_ROW),)) is None


@given(st.lists(records, min_size=1, max_size=6))
def test_filter_columns_are_the_records_tags_keys_and_properties(
    batch: list[MessageRecord],
) -> None:
    columns = decode_filter_columns(encode_batch(batch, 7))
    assert columns == (
        tuple(r.tag for r in batch),
        tuple(r.keys for r in batch),
        tuple(r.properties for r in batch),
    )


def _arrays_batch(*arrays: list[object]) -> bytes:
    """A batch of the given record arrays, written as they are."""
    return encode_packed_batch([msgpack.packb(array) for array in arrays], len(arrays), 7)


def test_filter_columns_give_way_to_what_the_exact_decoding_names() -> None:
    plain = list(MessageRecord("orders", 0, "m1", b"x", "t", ("k",), "", (("p", "v"),)))
    assert decode_filter_columns(_arrays_batch(plain)) == (("t",), (("k",),), ((("p", "v"),),))
    assert decode_filter_columns(encode_batch([], 7)) is None  # nothing to see
    refused = [
        ["orders", 0, "m1", b"x"],  # an older writer's array: decode_batch fills it in
        [*plain[:4], b"t", *plain[5:]],  # a tag that is not a string
        [*plain[:5], [1], *plain[6:]],  # a key that is not a string
        [*plain[:5], "k", *plain[6:]],  # keys that are not an array
        [*plain[:7], [["p"]], *plain[8:]],  # a property that is not a pair
        [*plain[:7], [["p", 1]], *plain[8:]],  # a property value that is not a string
        [*plain[:7], [msgpack.ExtType(1, b"")], *plain[8:]],  # an extension, not a pair
    ]
    for array in refused:
        assert decode_filter_columns(_arrays_batch(plain, array)) is None, array
    data = bytearray(_arrays_batch(plain))
    data[-1] ^= 1
    with pytest.raises(RecordCorrupted, match="CRC"):
        decode_filter_columns(bytes(data))


def test_one_record_outside_the_batch_or_from_a_bad_batch_is_refused() -> None:
    encoded = encode_batch([MessageRecord("t", 0, "a", b"x"), MessageRecord("t", 0, "b", b"y")], 1)
    for position in (-1, 2):
        with pytest.raises(RecordCorrupted, match=f"holds 2 records, not position {position}"):
            decode_record_at(encoded, position)
    flipped = bytearray(encoded)
    flipped[-1] ^= 0x01
    with pytest.raises(RecordCorrupted, match="CRC"):
        decode_record_at(bytes(flipped), 0)
    with pytest.raises(RecordCorrupted, match="header says 2"):
        decode_record_at(_framed(msgpack.packb([["t", 0, "m", b""]]), 2), 1)
    with pytest.raises(RecordCorrupted, match="not msgpack"):
        decode_record_at(_framed(b"\x92\xc1", 2), 1)
    with pytest.raises(RecordCorrupted, match="queue_id"):
        decode_record_at(_framed(msgpack.packb([["t", "0", "m", b""]]), 1), 0)


def test_properties_are_canonical() -> None:
    message = MessageRecord(
        "t", 0, "m", b"", properties=MessageRecord.sorted_properties({"b": "2", "a": "1"})
    )
    assert message.properties == (("a", "1"), ("b", "2"))
    assert message.property("b") == "2"
    assert message.property("zz") is None


def _framed(payload: bytes, count: int, store_timestamp_ms: int = 0) -> bytes:
    rest = struct.pack(">qI", store_timestamp_ms, count) + payload
    return BATCH_MAGIC + b"\x01" + struct.pack(">I", crc32c.crc32c(rest)) + rest


def test_a_record_from_an_older_writer_takes_defaults() -> None:
    batch = decode_batch(_framed(msgpack.packb([["t", 3, "m", b"body"]]), 1))
    assert batch.records == (MessageRecord("t", 3, "m", b"body"),)


def test_trailing_fields_of_a_newer_writer_are_ignored() -> None:
    wire = ["t", 3, "m", b"x", "tag", [], "", [], 0, 0, 1, "", "", "", "future-field"]
    batch = decode_batch(_framed(msgpack.packb([wire]), 1))
    assert batch.records[0].tag == "tag"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"R5", "header bytes"),
        (b"NOPE" + bytes(17), "magic"),
        (BATCH_MAGIC + b"\x02" + bytes(16), "version"),
        (_framed(msgpack.packb([]), 1), "header says 1"),
        (_framed(b"\xc1", 0), "not msgpack"),
        (_framed(msgpack.packb([["t", 0, "m"]]), 1), "at least 4"),
        (_framed(msgpack.packb([["t", "0", "m", b""]]), 1), "queue_id"),
        (_framed(msgpack.packb([["t", True, "m", b""]]), 1), "queue_id"),
        (_framed(msgpack.packb([["t", 0, "m", "str body"]]), 1), "body"),
        (_framed(msgpack.packb([["t", 0, "m", b"", "", [], "", [["k"]]]]), 1), "pair"),
        (_framed(msgpack.packb([["t", 0, "m", b"", "", "k", "", []]]), 1), "keys"),
        (_framed(msgpack.packb([["t", 0, "m", b"", "", [1], "", []]]), 1), "strings"),
        (_framed(msgpack.packb([["t", 0, "m", b"", "", [], "", [["k", 2]]]]), 1), "non-string"),
        (_framed(msgpack.packb([["t", 0, "m", b"", "", [], "", [], 0, 0, 99]]), 1), "type 99"),
    ],
)
def test_corrupt_batches_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(RecordCorrupted, match=message) as caught:
        decode_batch(data)
    assert caught.value.code is errors.DECODE_FAILED


def test_a_flipped_bit_fails_the_crc() -> None:
    data = bytearray(encode_batch([MessageRecord("t", 0, "m", b"hello")], 7))
    data[-2] ^= 0x10
    with pytest.raises(RecordCorrupted, match="CRC"):
        decode_batch(bytes(data))


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.lists(st.lists(records, max_size=4), min_size=1, max_size=4))
def test_packed_records_join_into_the_batch_of_all_of_them(
    parts: list[list[MessageRecord]],
) -> None:
    # Each part is one append request's records; the batch joins their packed arrays.
    unpacked = [unpack_records(pack_records(part)) for part in parts]
    assert [u.records for u in unpacked] == [tuple(part) for part in parts]
    # The message type is the enum member, not just an int equal to it.
    assert all(type(r.message_type) is MessageType for u in unpacked for r in u.records)
    items = [u.items for u in unpacked]
    assert all(isinstance(i, bytes) for i in items)
    joined = [record for part in parts for record in part]
    data = encode_packed_batch([i for i in items if i is not None], len(joined), 77)
    assert decode_batch(data) == decode_batch(encode_batch(joined, 77))
    assert data == encode_batch(joined, 77)  # msgpack writes each value one way


def test_packed_records_of_an_older_writer_are_read_but_not_joined_as_they_are() -> None:
    unpacked = unpack_records(msgpack.packb([["t", 3, "m", b"body"]]))
    assert unpacked.records == (MessageRecord("t", 3, "m", b"body"),)
    assert unpacked.items is None  # the writer re-encodes them as current records


def test_many_packed_records_keep_their_count() -> None:
    many = [MessageRecord("t", 0, f"m{i}", b"") for i in range(70_000)]  # a 32-bit array header
    unpacked = unpack_records(pack_records(many))
    assert len(unpacked.records) == 70_000
    assert unpacked.items is not None
    data = encode_packed_batch([unpacked.items], 70_000, 1)
    assert decode_batch(data).records == tuple(many)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\xc1", "not msgpack"),
        (msgpack.packb({"t": 1}), "not an array"),
        (msgpack.packb([["t", 0, "m"]]), "at least 4"),
        (msgpack.packb([["t", 0, "m", "str body"]]), "body"),
        (msgpack.packb([["t", 0, "m", b""]]) + b"\x00", "not msgpack"),
    ],
)
def test_bad_packed_records_are_refused(payload: bytes, message: str) -> None:
    with pytest.raises(RecordCorrupted, match=message):
        unpack_records(payload)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.lists(records, max_size=6), st.data())
def test_records_cut_out_of_a_batch_pack_as_if_encoded_again(
    batch: list[MessageRecord], data: st.DataObject
) -> None:
    encoded = encode_batch(batch, 9)
    bounds = item_bounds(encoded)
    assert len(bounds) == len(batch) + 1
    items = [encoded[bounds[i] : bounds[i + 1]] for i in range(len(batch))]
    assert items == [pack_record(record) for record in batch]
    assert items_span(encoded) == (len(batch), bounds[0])  # the arrays at once: the rest
    run = memoryview(encoded)[bounds[0] :]
    assert array_bounds(run, len(batch)) == [bound - bounds[0] for bound in bounds]
    views = [memoryview(encoded)[bounds[i] : bounds[i + 1]] for i in range(len(batch))]
    packed = encode_packed_batch(items, len(batch), 9)
    assert b"".join(packed_batch_parts(views, len(batch), 9)) == packed
    assert decode_batch(packed).records == tuple(batch)
    picked = data.draw(st.lists(st.integers(0, max(len(batch) - 1, 0)), max_size=len(batch)))
    chosen = [items[i] for i in picked] if batch else []
    assert pack_items(chosen) == pack_records([batch[i] for i in picked] if batch else [])


def test_an_older_writers_records_are_cut_out_as_written() -> None:
    old = msgpack.packb(["t", 3, "m", b"body"])
    encoded = _framed(msgpack.packb([["t", 3, "m", b"body"], ["t", 3, "n", b"x"]]), 2)
    bounds = item_bounds(encoded)
    assert encoded[bounds[0] : bounds[1]] == old
    assert unpack_records(pack_items([old])).records == (MessageRecord("t", 3, "m", b"body"),)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"R5", "header bytes"),
        (_framed(msgpack.packb([]), 1), "header says 1"),
        (_framed(msgpack.packb({"a": 1}), 1), "not msgpack"),
        (_framed(b"\x92\xc1\xc1", 2), "not msgpack"),
        (_framed(b"\x92\x01", 2), "not msgpack"),
        (_framed(msgpack.packb([1]) + b"\x01", 1), "bytes after its records"),
    ],
)
def test_records_are_not_cut_out_of_a_bad_batch(data: bytes, message: str) -> None:
    with pytest.raises(RecordCorrupted, match=message):
        item_bounds(data)
    flipped = bytearray(encode_batch([MessageRecord("t", 0, "m", b"hello")], 7))
    flipped[-2] ^= 0x10
    with pytest.raises(RecordCorrupted, match="CRC"):
        item_bounds(bytes(flipped))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"R5", "header bytes"),
        (_framed(msgpack.packb([]), 1), "header says 1"),
        (_framed(msgpack.packb({"a": 1}), 1), "not a msgpack array"),
        (_framed(b"", 1), "not a msgpack array"),
    ],
)
def test_no_span_of_records_is_given_for_a_bad_batch(data: bytes, message: str) -> None:
    with pytest.raises(RecordCorrupted, match=message):
        items_span(data)


def test_a_run_that_is_not_its_count_of_arrays_is_not_delimited() -> None:
    run = msgpack.packb(["a"]) + msgpack.packb(["b"])
    assert array_bounds(run, 2) == [0, 3, 6]
    with pytest.raises(RecordCorrupted, match="not 3 msgpack arrays"):
        array_bounds(run, 3)
    with pytest.raises(RecordCorrupted, match="bytes after their 1 arrays"):
        array_bounds(run, 1)
