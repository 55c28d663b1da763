"""The roles the launcher knows, their options, and where their code lives.

Each role's package provides the ``serve`` coroutine named here (see
rip5/shell.py for its signature).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from broker.config import BrokerConfig
from connector.config import ConnectorConfig
from nameserver.config import NameserverConfig
from rip5.dashboard.config import DashboardConfig
from rip5.shell import ServeFn
from storage_node.config import StorageConfig


@dataclass(frozen=True)
class Role:
    """One kind of rip5 process."""

    name: str
    summary: str
    config_type: type
    serve_path: str

    def load_serve(self) -> ServeFn:
        """The role's serve coroutine (imported on demand: a role loads only its own
        package)."""
        module_name, _, attr = self.serve_path.partition(":")
        serve: ServeFn = getattr(importlib.import_module(module_name), attr)
        return serve


ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role(
            "nameserver",
            "Raft-replicated metadata: topics, groups, placement, leaders.",
            NameserverConfig,
            "nameserver.server:serve",
        ),
        Role(
            "storage",
            "Storage node: hosts raft groups, the commit logs of queues.",
            StorageConfig,
            "storage_node.server:serve",
        ),
        Role(
            "broker",
            "Stateless broker: serves the official RocketMQ 5 clients (gRPC v2).",
            BrokerConfig,
            "broker.server:serve",
        ),
        Role(
            "connector",
            "Replicates messages from one cluster to another.",
            ConnectorConfig,
            "rip5.connector_commands:serve",
        ),
        Role(
            "dashboard",
            "Web console: nodes, raft groups, topics, groups and lag, clients, messages.",
            DashboardConfig,
            "rip5.dashboard.server:serve",
        ),
    )
}
