"""A real Angelia server process for fault tests: serves the conformance service.

Usage: python -m tests.integration.angelia_server TRANSPORT CODEC [ADDRESS]
Prints the bound address on stdout, then serves until killed.
"""

from __future__ import annotations

import asyncio
import sys

import uvloop

from angelia_rpc import RpcConfig, Server
from tests.contract.angelia_rig import Conformance, ConformanceImpl


async def main(transport: str, codec: str, address: str) -> None:
    server = Server(
        [Conformance.bind(ConformanceImpl())], RpcConfig(transport=transport, codec=codec)
    )
    print(await server.start(address), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1:0"))
