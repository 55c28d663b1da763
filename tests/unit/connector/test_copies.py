"""What a copy keeps of the source message, what it adds, and where it goes."""

from __future__ import annotations

from connector.copies import (
    SOURCE_CLUSTER,
    SOURCE_OFFSET,
    SOURCE_QUEUE,
    SOURCE_TOPIC,
    copy_message,
    copy_messages,
)
from protocol.rocketmq.v2 import definition_pb2 as pb


def _pulled(**system: object) -> pb.Message:
    message = pb.Message(topic=pb.Resource(name="Orders"), body=b"body", user_properties={"k": "v"})
    message.system_properties.MergeFrom(
        pb.SystemProperties(
            message_id="01ABC",
            keys=["key-1", "key-2"],
            born_host="producer-1",
            queue_offset=17,
            queue_id=2,
            receipt_handle="",
            **system,  # type: ignore[arg-type]
        )
    )
    message.system_properties.born_timestamp.FromMilliseconds(1_000)
    message.system_properties.store_timestamp.FromMilliseconds(2_000)
    return message


def test_a_copy_keeps_the_message_and_names_its_source_and_target_queue() -> None:
    pulled = _pulled(tag="TagA", message_type=pb.DELAY)
    pulled.system_properties.delivery_timestamp.FromMilliseconds(9_000)
    copy, queue = copy_message(pulled, "east", 2, "OrdersCopy", [0, 1])
    system = copy.system_properties
    assert queue == 0  # source queue 2 -> the 2 mod 2 = 0th target queue
    assert system.HasField("queue_id")
    assert system.queue_id == 0
    assert copy.topic.name == "OrdersCopy"
    assert copy.body == b"body"
    assert (system.message_id, system.tag, list(system.keys)) == (
        "01ABC",
        "TagA",
        ["key-1", "key-2"],
    )
    assert system.message_type == pb.DELAY
    assert system.delivery_timestamp.ToMilliseconds() == 9_000
    assert (system.born_timestamp.ToMilliseconds(), system.born_host) == (1_000, "producer-1")
    assert not system.HasField("store_timestamp")
    assert not system.HasField("queue_offset")
    assert dict(copy.user_properties) == {
        "k": "v",
        SOURCE_CLUSTER: "east",
        SOURCE_TOPIC: "Orders",
        SOURCE_QUEUE: "2",
        SOURCE_OFFSET: "17",
    }


def test_a_fifo_copy_keeps_its_group_and_names_no_queue() -> None:
    copy, queue = copy_message(
        _pulled(message_type=pb.FIFO, message_group="g-1"), "east", 0, "OrdersCopy", [0, 1, 2]
    )
    assert copy.system_properties.message_group == "g-1"
    assert not copy.system_properties.HasField("queue_id")
    assert not copy.system_properties.HasField("tag")
    assert copy.system_properties.message_type == pb.FIFO
    assert queue in (0, 1, 2)


def test_a_committed_transaction_message_is_copied_as_normal() -> None:
    copy, _ = copy_message(_pulled(message_type=pb.TRANSACTION), "east", 0, "T", [0])
    assert copy.system_properties.message_type == pb.NORMAL


def test_a_copy_drops_the_source_stores_facts() -> None:
    """What a pull adds (store time and host, offset, receipt handle, attempts, trace,
    digest...) does not reach the copy; the kept properties do, unchanged."""
    pulled = _pulled(
        tag="TagA",
        message_type=pb.NORMAL,
        store_host="east-broker:8081",
        delivery_attempt=3,
        trace_context="trace-1",
        priority=2,
        body_digest=pb.Digest(type=pb.CRC32, checksum="abc"),
    )
    pulled.system_properties.receipt_handle = "handle-1"
    pulled.system_properties.invisible_duration.FromSeconds(30)
    copy, _ = copy_message(pulled, "east", 2, "OrdersCopy", [0, 1, 2, 3])
    system = copy.system_properties
    store_facts = ("store_timestamp", "store_host", "queue_offset", "receipt_handle")
    attempt = ("invisible_duration", "delivery_attempt", "trace_context", "priority")
    present = {field.name for field, _ in system.ListFields()}
    assert present.intersection((*store_facts, *attempt, "body_digest")) == set()
    assert (system.tag, system.message_type, system.queue_id) == ("TagA", pb.NORMAL, 2)
    assert system.body_encoding == pb.IDENTITY
    assert pulled.system_properties.queue_offset == 17  # the pulled message is untouched
    assert pulled.topic.name == "Orders"


def test_a_batch_copies_each_message_as_alone_in_order() -> None:
    pulled = [
        _pulled(tag="TagA", message_type=pb.NORMAL),
        _pulled(message_type=pb.FIFO, message_group="g-1"),
        _pulled(message_type=pb.TRANSACTION),
    ]
    pulled[1].system_properties.queue_offset = 18
    pulled[2].topic.name = "Other"
    copies, queues = copy_messages(pulled, "east", 3, "OrdersCopy", [5, 1, 2])
    alone = [copy_message(m, "east", 3, "OrdersCopy", [5, 1, 2]) for m in pulled]
    assert list(copies.messages) == [copy for copy, _ in alone]
    assert queues == [queue for _, queue in alone]
    assert queues[0] == 1  # source queue 3 -> the 3 mod 3 = 0th of [1, 2, 5]
    assert not copies.messages[1].system_properties.HasField("queue_id")
    assert copies.messages[2].system_properties.message_type == pb.NORMAL
    assert copies.messages[1].user_properties[SOURCE_OFFSET] == "18"
    assert copies.messages[2].user_properties[SOURCE_TOPIC] == "Other"
