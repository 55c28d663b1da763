"""Options of the storage role (metadata conventions: see nameserver/config.py)."""

from dataclasses import dataclass, field


def parse_peers(text: str) -> dict[int, str]:
    """``1=host:port,2=host:port`` -> {1: "host:port", ...}; raises ValueError naming the part."""
    peers: dict[int, str] = {}
    for part in text.split(","):
        node, sep, address = part.strip().partition("=")
        if not sep or not node.isdigit() or ":" not in address:
            raise ValueError(f"peers: {part!r} is not ID=HOST:PORT")
        if int(node) in peers:
            raise ValueError(f"peers: node id {node} appears twice")
        peers[int(node)] = address.strip()
    return peers


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
    peers: str = field(
        default="",
        metadata={
            "help": "ID=host:port of every storage node, this one too (empty: this node alone); "
            "every node replicates every group",
            "kind": "peers",
        },
    )
    groups: int = field(
        default=64,
        metadata={
            "help": "raft groups of the cluster, fixed when it is created (queues hash to them)",
            "min": 1,
            "max": 65535,
        },
    )
    flush: str = field(
        default="sync",
        metadata={
            "help": "when an append is durable: sync = fsync on a majority before the ack",
            "choices": ["sync", "async"],
        },
    )
