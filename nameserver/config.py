"""Options of the nameserver role.

Fields carry declarative metadata read by the launcher: ``help``, and for
validation ``kind`` ("address", "addresses"), ``min``/``max`` or ``choices``.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NameserverConfig:
    """How one nameserver process listens and finds its peers."""

    listen: str = field(
        default="127.0.0.1:9876",
        metadata={
            "help": "host:port for Angelia RPC from brokers and storage nodes",
            "kind": "address",
        },
    )
    peers: str = field(
        default="",
        metadata={
            "help": "comma-separated host:port of the other nameservers (empty: one node)",
            "kind": "addresses",
        },
    )
