"""Runs a Supervisor over echo_role children in its own process.

Usage: python supervise_echo.py DATA_DIR N
Prints ``pids <json>`` once every child is ready, then supervises until SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from rip5.supervisor import ChildSpec, Supervisor

ECHO = str(Path(__file__).with_name("echo_role.py"))


async def main(root: Path, count: int) -> int:
    specs = [
        ChildSpec(f"echo-{i}", (sys.executable, ECHO, str(root / f"echo-{i}"), "serve"))
        for i in range(count)
    ]
    supervisor = Supervisor(specs, out=lambda line: print(line, flush=True))
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    return await supervisor.run(
        stopping, lambda _: print("pids " + json.dumps(supervisor.pids), flush=True)
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]))))
