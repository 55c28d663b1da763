"""The one HTTP endpoint of a role's Prometheus metrics (every role, ``--metrics-listen``).

The process shell (rip5/shell.py) starts it before the role's ``serve`` and
stops it after. It serves prometheus_client's process registry (``REGISTRY``:
the library's process and platform collectors, plus what the role registered
there) as Prometheus text at ``/metrics``, from prometheus_client's own server
thread. A role registers its metrics there only when it runs as a process with
an endpoint (``metrics_listen`` set), so roles run in one test process never
share series.

A role's work never depends on its metrics: if the port is taken, the shell
logs an error naming it and the role runs without an endpoint.

SHELL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, disable_created_metrics, start_http_server

log = logging.getLogger("rip5.metrics")


@dataclass
class MetricsEndpoint:
    """A running endpoint: where it listens, and how to stop it."""

    address: str
    server: WSGIServer

    def stop(self) -> None:
        """Stop serving (the server thread ends)."""
        self.server.shutdown()
        self.server.server_close()


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (port 0: any free one) -> (host, port); ValueError naming the text
    if it is not one."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65_535:
        raise ValueError(f"--metrics-listen {listen!r} is not host:port")
    return host, int(port)


def start_metrics_endpoint(listen: str) -> MetricsEndpoint | None:
    """Serve the process registry at ``http://listen/metrics``; None (and an error
    logged) if the address cannot be bound."""
    host, port = split_listen(listen)
    disable_created_metrics()  # no ``*_created`` series: RocketMQ's exporter has none
    try:
        server, _thread = start_http_server(port, host, registry=REGISTRY)
    except OSError as exc:
        log.error(
            "metrics endpoint not served: cannot listen on %s (%s); the role runs on "
            "without one (give each process its own --metrics-listen)",
            listen,
            exc.strerror or exc,
        )
        return None
    address = f"{host}:{server.server_port}"
    log.info("serving metrics", extra={"metrics_address": address})
    return MetricsEndpoint(address, server)
