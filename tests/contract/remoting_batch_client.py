"""Scenarios run by PyPI ``rocketmq==0.4.4`` (another wrapper of the C++ 4.x client,
with batches and explicit queue selectors).

Run like ``remoting_cpp_client.py``: its own interpreter, its folder first on
``sys.path`` (``python remoting_batch_client.py NAMESRV SCENARIO``); the last
stdout line is one JSON object.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from rocketmq.client import Message, Producer, SendStatus

SELECTED_QUEUE = 1


def _message(topic: str, body: str, tag: str, keys: str, **properties: str) -> Message:
    message = Message(topic)
    message.set_tags(tag)
    message.set_keys(keys)
    message.set_body(body)
    for name, value in properties.items():
        message.set_property(name, value)
    return message


def _always_one_queue(queue_count: int, message: Any, arg: Any) -> int:
    return SELECTED_QUEUE % queue_count


def batch_and_select(namesrv: str, topic: str) -> dict[str, Any]:
    """One batch of 4 messages (SEND_MESSAGE with batch set), then 3 sends through a
    queue selector that always picks queue 1."""
    producer = Producer("PG_BATCH")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        batch = producer.send_batch(
            [_message(topic, f"batch-{i}", "bt", f"bk{i}", part=str(i)) for i in range(4)]
        )
        selected = [
            producer.send_orderly(
                _message(topic, f"selected-{i}", "sel", f"sk{i}"),
                0,
                queue_selector=_always_one_queue,
            )
            for i in range(3)
        ]
    finally:
        producer.shutdown()
    return {
        "ok": int(SendStatus.OK),
        "batch": {"status": int(batch.status), "id": batch.msg_id, "offset": batch.offset},
        "selected": [{"status": int(r.status), "offset": r.offset} for r in selected],
    }


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {"batch_and_select": batch_and_select}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[2]](sys.argv[1], *sys.argv[3:])))
