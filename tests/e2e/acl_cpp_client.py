"""The classic C++ client (4.x remoting) with session credentials, for the ACL tests.

Run in its own interpreter with the C++ client's folder on PYTHONPATH
(``python tests/e2e/acl_cpp_client.py NAMESRV TOPIC AK SK``): one sync send;
prints one JSON object, the send's status or the client's error message.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rocketmq.client import Message, Producer


def send(namesrv: str, topic: str, ak: str, sk: str) -> dict[str, Any]:
    """One sync send to ``topic`` signed as ``ak``."""
    producer = Producer("PG_ACL_CPP")
    producer.set_namesrv_addr(namesrv)
    producer.set_session_credentials(ak, sk, "")
    producer.start()
    try:
        message = Message(topic)
        message.set_body("classic")
        result = producer.send_sync(message)
        return {"status": int(result.status), "id": result.msg_id}
    except Exception as error:  # noqa: BLE001 - the observation
        return {"status": None, "error": str(error)}
    finally:
        producer.shutdown()


if __name__ == "__main__":
    print(json.dumps(send(*sys.argv[1:5])))
