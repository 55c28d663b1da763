"""The roles the launcher knows, their options, and where their code lives.

A role becomes available when its package provides the ``serve`` coroutine
named here (see rip5/shell.py for its signature). Until then the launcher
answers with a clear "not available yet" message instead of a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from broker.config import BrokerConfig
from connector.config import ConnectorConfig
from nameserver.config import NameserverConfig
from rip5.shell import ServeFn
from storage_node.config import StorageConfig


@dataclass(frozen=True)
class Role:
    """One kind of rip5 process."""

    name: str
    summary: str
    config_type: type
    serve_path: str
    issue: str

    def load_serve(self) -> ServeFn | None:
        """The role's serve coroutine, or None while the role is not built yet.

        A module that exists but fails to import raises: that is a bug, not a
        missing role.
        """
        module_name, _, attr = self.serve_path.partition(":")
        if importlib.util.find_spec(module_name) is None:
            return None
        module = importlib.import_module(module_name)
        serve: ServeFn | None = getattr(module, attr, None)
        return serve

    @property
    def available(self) -> bool:
        """Whether this role can run in this build."""
        return self.load_serve() is not None


ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role(
            "nameserver",
            "Raft-replicated metadata: topics, groups, placement, leaders.",
            NameserverConfig,
            "nameserver.server:serve",
            "[Nameserver]",
        ),
        Role(
            "storage",
            "Storage node: hosts raft groups, the commit logs of queues.",
            StorageConfig,
            "storage_node.server:serve",
            "[Storage]",
        ),
        Role(
            "broker",
            "Stateless broker: serves the official RocketMQ 5 clients (gRPC v2).",
            BrokerConfig,
            "broker.server:serve",
            "[Broker]",
        ),
        Role(
            "connector",
            "Replicates messages from one cluster to another.",
            ConnectorConfig,
            "connector.runner:serve",
            "[Connector]",
        ),
    )
}
