"""The broker reads a packed storage receive as the messages it stands for."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.domain import PoppedMessage, QueueRef
from broker.services import cluster_convert as convert
from protocol import storage_api as api
from protocol.records import MessageRecord, pack_records, unpack_records
from tests.unit.protocol.test_records import records


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    st.lists(records, min_size=1, max_size=4),
    st.integers(0, 1 << 40),
    st.integers(1, 1 << 40),
    st.integers(1, 20),
)
def test_a_packed_delivery_is_the_delivery_of_its_message(
    batch: list[MessageRecord], offset: int, generation: int, attempt: int
) -> None:
    deliveries = [
        api.PackedDelivery(r.topic, r.queue_id, offset + i, generation, attempt, 5_000, 7)
        for i, r in enumerate(batch)
    ]
    # Through the wire form, as storage packs and the broker unpacks.
    unpacked = unpack_records(pack_records(batch)).records
    packed = [convert.popped_from_packed(d, r) for d, r in zip(deliveries, unpacked, strict=True)]
    plain = [
        PoppedMessage(
            message=convert.message_from_wire(api.from_record(r)),
            queue=QueueRef(d.topic, d.queue_id),
            offset=d.queue_offset,
            store_timestamp_ms=d.store_timestamp_ms,
            delivery_attempt=d.delivery_attempt,
            generation=d.generation,
            invisible_until_ms=d.invisible_until_ms,
        )
        for d, r in zip(deliveries, batch, strict=True)
    ]
    assert packed == plain
