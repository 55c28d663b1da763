"""A small real role for testing the process shell and the supervisor.

Usage: python echo_role.py DATA_DIR MODE [SHUTDOWN_TIMEOUT_MS]
MODE: serve (echo server until stopped), crash-before-ready, crash-after-ready
(once per data dir: the second start serves), stubborn (ignores the graceful
stop), fail (serve raises after ready).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rip5.config import CommonConfig
from rip5.shell import run_role


@dataclass(frozen=True)
class EchoConfig:
    mode: str


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


async def serve(
    config: EchoConfig, data_dir: Path, stopping: asyncio.Event, ready: Callable[[str], None]
) -> None:
    if config.mode == "crash-before-ready":
        os._exit(7)
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ready(f"127.0.0.1:{port}")
    marker = data_dir / "crashed-once"
    if config.mode == "crash-after-ready" and not marker.exists():
        marker.write_text("1")
        os._exit(9)
    if config.mode == "fail":
        raise RuntimeError("serve failed on purpose")
    await stopping.wait()
    if config.mode == "stubborn":
        await asyncio.Event().wait()
    server.close()
    await server.wait_closed()


if __name__ == "__main__":
    timeout_ms = int(sys.argv[3]) if len(sys.argv) > 3 else 5000
    common = CommonConfig(data_dir=Path(sys.argv[1]), shutdown_timeout_ms=timeout_ms)
    sys.exit(run_role("echo", serve, EchoConfig(sys.argv[2]), common))
