"""Options of the broker role (metadata conventions: see nameserver/config.py)."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BrokerConfig:
    """How one broker serves clients and reaches the cluster."""

    listen: str = field(
        default="127.0.0.1:8081",
        metadata={
            "help": "host:port of the RocketMQ gRPC v2 endpoint for clients",
            "kind": "address",
        },
    )
    nameserver: str = field(
        default="127.0.0.1:9876",
        metadata={"help": "comma-separated host:port of the nameservers", "kind": "addresses"},
    )
    auto_create: bool = field(
        default=False,
        metadata={"help": "create unknown topics and consumer groups on first use (dev only)"},
    )
