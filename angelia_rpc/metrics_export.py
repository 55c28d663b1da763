"""How a server role (broker, storage node, nameserver) hands its Prometheus metrics to
the process endpoint, and keeps its gauges fresh.

The endpoint itself belongs to the process shell (rip5/metrics_endpoint.py): it
serves prometheus_client's process registry at ``--metrics-listen``. A role
builds its metrics in a registry of its own and, for the life of its ``serve``,
adds it to the process registry with :func:`exported`. Gauges that read a
role's state are set on the event loop by :func:`refresh_every`, so the scrape
thread never reads that state.

Roles run in one test process (tests/integration) may carry the same series
(a storage node's and a nameserver's ``rip5_raft_*``): the second is then not
exported, and says so in the log; a process runs one role otherwise.

SHELL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry

log = logging.getLogger("angelia_rpc.metrics_export")

REFRESH_MS = 1_000
"""How often the roles read their gauges (the tests' Prometheus scrapes every second)."""


@contextlib.contextmanager
def exported(registry: CollectorRegistry, listen: str) -> Iterator[None]:
    """Within the block the process registry includes ``registry``, when ``listen`` (the
    role's ``metrics_listen``) names an endpoint."""
    if not listen:
        yield
        return
    try:
        REGISTRY.register(registry)
    except ValueError as exc:
        log.info("metrics not exported: another role of this process has them (%s)", exc)
        yield
        return
    try:
        yield
    finally:
        REGISTRY.unregister(registry)


async def refresh_every(refresh: Callable[[], None], interval_ms: int = REFRESH_MS) -> None:
    """Call ``refresh`` now and every ``interval_ms`` until cancelled; a failure is
    logged and tried again next time (metrics never stop a role)."""
    while True:
        try:
            refresh()
        except Exception:  # logged; the role goes on
            log.exception("reading the metrics failed")
        await asyncio.sleep(interval_ms / 1000)
