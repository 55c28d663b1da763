"""The chaos suite's fault proxy: it names the process at the other end of each
connection, and a cut between two names holds their bytes (none lost) until healed."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import pytest

from rip5.chaos.proxy import Faults, NamedProxy

pytestmark = pytest.mark.integration

# A process that, once told to go (a line on stdin), sends one line through the proxy
# and prints the echo it gets back.
PEER = """
import socket, sys
host, port = sys.argv[1].split(":")
sys.stdin.readline()
with socket.create_connection((host, int(port))) as s:
    s.sendall(b"from-peer\\n")
    print(s.makefile().readline().strip(), flush=True)
"""


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        writer.write(line)
        await writer.drain()
    writer.close()


@pytest.fixture
async def echo_server() -> AsyncIterator[str]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    yield f"{host}:{port}"
    server.close()


async def test_a_cut_holds_one_link_and_heal_lets_its_bytes_through(echo_server: str) -> None:
    faults = Faults()
    peer_pids: list[int] = []
    proxy = NamedProxy(
        "server",
        echo_server,
        faults,
        name_of_pid=lambda pid: "peer" if pid in peer_pids else None,
        pids=lambda: list(peer_pids),
        seed=1,
    )
    address = await proxy.start()
    try:
        faults.cut("peer", "server")
        peer = await asyncio.create_subprocess_exec(
            sys.executable, "-c", PEER, address,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        peer_pids.append(peer.pid)  # known before it connects: it waits for "go"
        assert peer.stdin is not None
        assert peer.stdout is not None
        peer.stdin.write(b"go\n")
        await peer.stdin.drain()
        # This process is no named peer: its link is not cut.
        reader, writer = await asyncio.open_connection(*address.split(":"))
        writer.write(b"from-client\n")
        assert await asyncio.wait_for(reader.readline(), 10) == b"from-client\n"
        # The peer's line is held while the cut lasts (a window to show an absence) ...
        echoed = asyncio.create_task(peer.stdout.readline())
        done, _ = await asyncio.wait({echoed}, timeout=1.0)
        assert not done
        # ... and goes through, whole, once healed.
        faults.heal()
        assert await asyncio.wait_for(echoed, 10) == b"from-peer\n"
        await peer.wait()
        writer.close()
    finally:
        await proxy.stop()
