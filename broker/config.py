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
    secret: str = field(
        default="",
        metadata={
            "help": "the cluster secret that signs receipt handles (the same on every broker; "
            "required; prefer the environment variable to the flag)",
            "secret": True,
        },
    )
    cluster: str = field(
        default="DefaultCluster",
        metadata={"help": "the storage cluster this broker serves (auto-created topics go there)"},
    )
    storage: str = field(
        default="",
        metadata={
            "help": "comma-separated host:port of storage nodes to try when a route names no "
            "replica of a queue's raft group (optional)"
        },
    )
    heartbeat_interval_ms: int = field(
        default=2_000,
        metadata={"help": "how often the broker tells the nameserver it is alive", "min": 100},
    )
