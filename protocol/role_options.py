"""Options every role process declares alike, defined once: the Prometheus endpoint.

A role's config dataclass (broker, storage node, nameserver, connector) declares
``metrics_listen`` through :func:`metrics_listen_field`, so the option's help,
its form and what it accepts have one definition; the role gives its own
default and names the series it serves. (The internal-RPC options the server
roles share are ``angelia_rpc.config.RpcOptions``, a base dataclass.)

PURE.
"""

from __future__ import annotations

from dataclasses import field


def metrics_listen_field(default: str, series: str) -> str:
    """The ``metrics_listen`` option (``--metrics-listen``): host:port of the role's
    Prometheus endpoint at /metrics, serving ``series`` (as the help names them);
    port 0 takes any free port and empty serves none. A dataclass field, typed as
    its value (as :func:`dataclasses.field` is)."""
    return field(
        default=default,
        metadata={
            "help": f"host:port serving Prometheus metrics at /metrics ({series}; "
            "port 0: any free port; empty: none)"
        },
    )
