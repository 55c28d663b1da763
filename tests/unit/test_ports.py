"""Free ports for local clusters: never the same one twice in a process."""

from __future__ import annotations

import socket
from pathlib import Path

from angelia_rpc.ports import FIRST_PORT, ephemeral_range, free_port


def test_ports_are_distinct_and_free() -> None:
    ports = [free_port() for _ in range(64)]
    assert len(set(ports)) == len(ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))  # still free: nothing bound it


def test_ports_lie_below_the_range_outgoing_connections_take_theirs_from() -> None:
    low, high = ephemeral_range()
    assert 0 < low <= high
    ports = [free_port() for _ in range(32)]
    if low - FIRST_PORT > 2_000:  # room below the range (Linux's default leaves 22k ports)
        assert all(FIRST_PORT <= port < low for port in ports)


def test_a_span_of_consecutive_ports_is_free_and_handed_out_once() -> None:
    base = free_port(span=5)
    for port in range(base, base + 5):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
    assert not set(range(base, base + 5)) & {free_port() for _ in range(200)}


def test_an_unreadable_range_is_linuxs_default(tmp_path: Path) -> None:
    assert ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)
    (tmp_path / "garbled").write_text("not ports\n")
    assert ephemeral_range(str(tmp_path / "garbled")) == (32768, 60999)
    (tmp_path / "range").write_text("20000\t30000\n")
    assert ephemeral_range(str(tmp_path / "range")) == (20000, 30000)
