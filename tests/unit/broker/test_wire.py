"""The answer entries written as bytes parse to what the generated classes build."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.grpc import wire
from broker.grpc.status import ok
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb

texts = st.text(max_size=300)
codes = st.sampled_from([code for code in pb.Code.values() if code != pb.CODE_UNSPECIFIED])
int64s = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


def test_the_success_status_is_the_one_the_broker_answers_with() -> None:
    assert pb.Status.FromString(wire.STATUS_OK) == ok()
    assert ok().SerializeToString() == wire.STATUS_OK


@given(code=codes, message=texts)
def test_a_status_parses_back(code: int, message: str) -> None:
    assert pb.Status.FromString(wire.status(code, message)) == pb.Status(
        code=code,  # type: ignore[arg-type]
        message=message,
    )


@given(
    entries=st.lists(st.tuples(codes, texts, texts, int64s, texts, texts), max_size=40),
    code=codes,
)
def test_send_results_parse_to_the_entries_built_field_by_field(
    entries: list[tuple[int, str, str, int, str, str]], code: int
) -> None:
    data = wire.message_field(1, wire.status(code, "top")) + b"".join(
        wire.send_results(wire.status(c, m), [(mid, offset, txid, recall)])
        for c, m, mid, offset, txid, recall in entries
    )
    expected = spb.SendMessageResponse(status=pb.Status(code=code, message="top"))  # type: ignore[arg-type]
    for c, m, mid, offset, txid, recall in entries:
        expected.entries.add(
            status=pb.Status(code=c, message=m),  # type: ignore[arg-type]
            message_id=mid,
            offset=offset,
            transaction_id=txid,
            recall_handle=recall,
        )
    assert spb.SendMessageResponse.FromString(data) == expected
    assert data == expected.SerializeToString()  # field order and defaults as protobuf's own


@given(
    entries=st.lists(st.tuples(texts, int64s, texts, texts), max_size=40),
    code=codes,
    message=texts,
)
def test_send_results_of_one_status_are_the_entries_one_by_one(
    entries: list[tuple[str, int, str, str]], code: int, message: str
) -> None:
    status = wire.status(code, message)
    assert wire.send_results(status, entries) == b"".join(
        wire.send_results(status, [entry]) for entry in entries
    )


@given(entries=st.lists(st.tuples(codes, texts, texts, texts), max_size=40))
def test_ack_results_parse_to_the_entries_built_field_by_field(
    entries: list[tuple[int, str, str, str]],
) -> None:
    data = b"".join(
        wire.message_field(2, wire.ack_result(wire.status(c, m), mid, handle))
        for c, m, mid, handle in entries
    )
    expected = spb.AckMessageResponse()
    for c, m, mid, handle in entries:
        expected.entries.add(
            status=pb.Status(code=c, message=m),  # type: ignore[arg-type]
            message_id=mid,
            receipt_handle=handle,
        )
    assert spb.AckMessageResponse.FromString(data) == expected
    assert data == expected.SerializeToString()
