"""Free TCP ports on 127.0.0.1 for local clusters (dev, benchmarks, tests).

A port is found by binding port 0 and closing the socket; the kernel may hand
the same port to the next such bind, so a process that asks for several ports
before starting its servers could get one twice. :func:`free_port` never
returns a port it returned before in this process.
"""

from __future__ import annotations

import socket

_handed_out: set[int] = set()

_ATTEMPTS_MAX = 1_000


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, never the same one twice."""
    for _ in range(_ATTEMPTS_MAX):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise OSError(f"no new free port on 127.0.0.1 after {_ATTEMPTS_MAX} attempts")
