"""The http2 link's HTTP/2 handling, driven byte by byte without sockets."""

from __future__ import annotations

import asyncio
from typing import Any

from angelia_rpc.transport.http2 import _H2Link


class Wire(asyncio.Transport):
    """Collects what a link writes; the test decides when and how it is delivered."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.sent += data

    def take(self) -> bytes:
        data, self.sent = bytes(self.sent), bytearray()
        return data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class Recorder:
    def __init__(self) -> None:
        self.received = bytearray()
        self.lost: list[str] = []
        self.link: Any = None

    def link_made(self, link: Any) -> None:
        self.link = link

    def data_received(self, data: bytes) -> None:
        self.received += data

    def link_lost(self, reason: str) -> None:
        self.lost.append(reason)

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass


async def test_a_burst_arriving_with_the_settings_ack_is_accepted() -> None:
    # Regression: with a raised MAX_FRAME_SIZE, DATA frames read in the same
    # chunk as the SETTINGS ACK were checked against the old 16 KiB limit.
    client_handler, server_handler = Recorder(), Recorder()
    client = _H2Link(True, lambda: client_handler, "127.0.0.1:1")
    server = _H2Link(False, lambda: server_handler)
    client_wire, server_wire = Wire(), Wire()
    client.connection_made(client_wire)
    server.connection_made(server_wire)
    server.data_received(client_wire.take())  # preface, SETTINGS, HEADERS
    client.data_received(server_wire.take())  # SETTINGS, response HEADERS
    burst = bytes(range(256)) * 800  # 200 KiB
    client_handler.link.write(burst)
    server.data_received(client_wire.take())  # SETTINGS ACK and the burst in one read
    assert server_handler.lost == []
    assert bytes(server_handler.received) == burst
    server_handler.link.write(b"reply")
    client.data_received(server_wire.take())
    assert bytes(client_handler.received) == b"reply"
    assert client_handler.lost == []
