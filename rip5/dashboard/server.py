"""The dashboard role: ``rip5 dashboard`` (the shell contract of rip5/shell.py).

Binds ``listen`` itself (so port 0 works and the ready endpoint is the bound
address), serves the app (rip5/dashboard/app.py) with uvicorn on the role's
event loop, samples the brokers' metrics for the chart every
``sample_interval_ms``, and stops on ``stopping``. The shell owns the
signals: uvicorn's own handlers are not installed.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import uvicorn

from angelia_rpc.nameserver_client import parse_addresses
from rip5.dashboard.app import build_app
from rip5.dashboard.cluster import DashboardCluster
from rip5.dashboard.config import DashboardConfig

log = logging.getLogger("rip5.dashboard")


class _Server(uvicorn.Server):
    """uvicorn, leaving SIGINT and SIGTERM to the process shell."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Install nothing (the shell sets ``stopping``, which stops the server)."""
        yield


def _bind(listen: str) -> socket.socket:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def _sample(cluster: DashboardCluster, interval_ms: int) -> None:
    while True:
        await cluster.sample()
        await asyncio.sleep(interval_ms / 1000)


async def serve(
    config: DashboardConfig,
    data_dir: Path,
    stopping: asyncio.Event,
    ready: Callable[[str], None],
) -> None:
    """Serve the dashboard until ``stopping`` is set."""
    cluster = DashboardCluster(
        parse_addresses(config.nameserver),
        config.cluster,
        [a.strip() for a in config.broker_metrics.split(",") if a.strip()],
        config.tier_url,
        [a.strip() for a in config.connector_metrics.split(",") if a.strip()],
    )
    sock = _bind(config.listen)
    host, port = sock.getsockname()[:2]
    server = _Server(
        uvicorn.Config(
            build_app(cluster, acl=config.acl), log_config=None, access_log=False, lifespan="off"
        )
    )
    tasks = [asyncio.create_task(server.serve(sockets=[sock]), name="dashboard-http")]
    if cluster.broker_metrics:
        sampling = _sample(cluster, config.sample_interval_ms)
        tasks.append(asyncio.create_task(sampling, name="dashboard-chart"))
    address = f"{host}:{port}"
    log.info("serving", extra={"address": f"http://{address}/", "nameserver": config.nameserver})
    ready(address)
    try:
        stop = asyncio.create_task(stopping.wait())
        await asyncio.wait({stop, tasks[0]}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if tasks[0].done():
            tasks[0].result()  # the server failed: the role fails with its error
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[0]
        for task in tasks[1:]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        sock.close()
        await cluster.close()
