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

Readiness: ``rip5_ready`` is 1 once the role called ``ready`` (it accepts
work), 0 before. ``python -m rip5.metrics_endpoint HOST:PORT`` exits 0 when
the role at that endpoint is ready and 1 otherwise, naming why: the health
check of compose.yaml.

SHELL.
"""

from __future__ import annotations

import logging
import sys
import urllib.request
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, Gauge, disable_created_metrics, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger("rip5.metrics")

READY = Gauge("rip5_ready", "1 once the role accepts work (it called ready)", registry=REGISTRY)
CHECK_TIMEOUT_S = 3.0


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


def scrape(address: str, timeout_s: float = CHECK_TIMEOUT_S) -> list[Metric]:
    """The metric families the role whose endpoint is ``address`` (host:port) serves now;
    OSError if it cannot be read."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout_s) as response:
        text = response.read().decode()
    return list(text_string_to_metric_families(text))


def is_ready(address: str) -> tuple[bool, str]:
    """Whether the role whose metrics endpoint is ``address`` (host:port) is ready, and
    why not."""
    try:
        families = scrape(address)
    except OSError as error:
        return False, f"no metrics endpoint at {address}: {error}"
    for family in families:
        if family.name == "rip5_ready":
            ready = any(sample.value == 1 for sample in family.samples)
            return ready, "" if ready else "the role is not ready yet"
    return False, f"{address} serves no rip5_ready: not a rip5 role"


def main(argv: list[str]) -> int:
    """``python -m rip5.metrics_endpoint HOST:PORT``: 0 if that role is ready, else 1."""
    if len(argv) != 1:
        print("usage: python -m rip5.metrics_endpoint HOST:PORT", file=sys.stderr)
        return 2
    ready, why = is_ready(argv[0])
    if not ready:
        print(why, file=sys.stderr)
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
