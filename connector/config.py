"""Options of the connector role (metadata conventions: see nameserver/config.py)."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ConnectorConfig:
    """Where the connector reads from and writes to."""

    source: str = field(
        default="127.0.0.1:8081",
        metadata={"help": "client endpoint of the source cluster", "kind": "addresses"},
    )
    target: str = field(
        default="127.0.0.1:8091",
        metadata={"help": "client endpoint of the target cluster", "kind": "addresses"},
    )
