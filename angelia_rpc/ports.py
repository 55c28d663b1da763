"""Free TCP ports on 127.0.0.1 for local clusters (dev, benchmarks, tests).

A port is chosen at random below the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``) and checked by binding it. The
kernel gives outgoing connections their local port from that range: a port
found by binding port 0 is in it, and any connection opened before the
server binds may take it ("address already in use" when a dev cluster
starts). Below the range only another listener can take it. Where the range
leaves no room below it, the kernel picks (port 0).

:func:`free_port` never returns a port it returned before in this process.
"""

from __future__ import annotations

import random
import socket

_handed_out: set[int] = set()

_ATTEMPTS_MAX = 1_000
FIRST_PORT = 10_000
"""The lowest port handed out (clear of the well-known and most registered ones)."""
_ROOM_MIN = 1_000
_DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """The kernel's range of local ports for outgoing connections (Linux's default
    when it cannot be read)."""
    try:
        with open(path) as handle:
            low, high = (int(part) for part in handle.read().split())
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL
    return low, high


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def free_port(span: int = 1) -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, never the same one twice;
    with ``span`` > 1, the first of ``span`` consecutive such ports (all handed out)."""
    low, _high = ephemeral_range()
    below = low - FIRST_PORT >= _ROOM_MIN + span
    for _ in range(_ATTEMPTS_MAX):
        base = random.randrange(FIRST_PORT, low - span + 1) if below else _kernel_port()
        ports = range(base, base + span)
        if ports.stop > 65536 or any(port in _handed_out for port in ports):
            continue
        if all(_is_free(port) for port in ports):
            _handed_out.update(ports)
            return base
    raise OSError(f"no {span} new free port(s) on 127.0.0.1 after {_ATTEMPTS_MAX} attempts")
