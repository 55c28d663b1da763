"""Running the Node.js gRPC clients of tests/clients/node (installed by ``make test``).

The official RocketMQ Node client and @grpc/grpc-js run as ``node`` subprocesses:
the scripts print one JSON line on success and exit non-zero, with the error on
stderr, on any failure, including an uncaught error event after a client shut down.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

NODE_DIR = Path(__file__).resolve().parents[1] / "clients" / "node"


def run_node(script: str, *args: str, home: Path, timeout_s: float = 90.0) -> dict[str, Any]:
    """Run ``script`` of the node folder with ``args``; its JSON result. HOME is ``home``
    (the official client writes its logs under ~/logs)."""
    modules = NODE_DIR / "node_modules"
    assert modules.is_dir(), f"{modules} is missing: run `make remoting-clients`"
    done = subprocess.run(
        ["node", script, *args],
        cwd=NODE_DIR,
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, f"node {script} exited {done.returncode}:\n{done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
