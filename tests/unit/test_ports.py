"""Free ports for local clusters: never the same one twice in a process."""

from __future__ import annotations

import socket

from angelia_rpc.ports import free_port


def test_ports_are_distinct_and_free() -> None:
    ports = [free_port() for _ in range(64)]
    assert len(set(ports)) == len(ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))  # still free: nothing bound it
