"""The tcp listener drops a connection accepted as it closes (no transport outlives it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from angelia_rpc.transport.tcp import TcpTransport


class _Handler:
    def __init__(self) -> None:
        self.events: list[str] = []

    def link_made(self, link: Any) -> None:
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.events.append("data")

    def link_lost(self, reason: str) -> None:
        self.events.append("lost")

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass


class _Accepted:
    """An accepted socket's transport, as the loop hands it to ``connection_made``."""

    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


async def test_a_connection_made_after_the_listener_closed_is_aborted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    real_create_server = loop.create_server
    factories: list[Any] = []

    async def create_server(factory: Any, *args: Any, **kwargs: Any) -> asyncio.Server:
        factories.append(factory)
        return await real_create_server(factory, *args, **kwargs)

    monkeypatch.setattr(loop, "create_server", create_server)
    handlers: list[_Handler] = []

    def new_handler() -> _Handler:
        handlers.append(_Handler())
        return handlers[-1]

    listener = await TcpTransport().listen("127.0.0.1:0", new_handler)
    # The loop accepted a socket and made its protocol; connection_made is still to come.
    link = factories[0]()
    await listener.close()
    accepted = _Accepted()
    link.connection_made(accepted)
    link.connection_lost(None)
    assert accepted.aborted
    assert handlers[0].events == []  # the connection never saw a link, nor lost one
    assert not listener.links


async def test_a_connection_made_while_listening_is_served() -> None:
    handler = _Handler()
    listener = await TcpTransport().listen("127.0.0.1:0", lambda: handler)
    host, port = listener.address.split(":")
    _reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"x")
    await writer.drain()
    deadline = asyncio.get_running_loop().time() + 10
    while handler.events[:2] != ["made", "data"]:
        assert asyncio.get_running_loop().time() < deadline, handler.events
        await asyncio.sleep(0.01)
    await listener.close()
    writer.close()
    await writer.wait_closed()
    assert handler.events[-1] == "lost"
