"""Options of the storage role (metadata conventions: see nameserver/config.py)."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StorageConfig:
    """How one storage node listens, identifies itself and reaches the nameserver."""

    listen: str = field(
        default="127.0.0.1:7701",
        metadata={"help": "host:port for Angelia RPC (brokers, peers)", "kind": "address"},
    )
    node_id: int = field(
        default=1,
        metadata={"help": "this node's id, unique in the cluster", "min": 1, "max": 65535},
    )
    nameserver: str = field(
        default="127.0.0.1:9876",
        metadata={"help": "comma-separated host:port of the nameservers", "kind": "addresses"},
    )
    flush: str = field(
        default="sync",
        metadata={
            "help": "when an append is durable: sync = fsync on a majority before the ack",
            "choices": ["sync", "async"],
        },
    )
