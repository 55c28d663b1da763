"""Options of the storage role (metadata conventions: see nameserver/config.py)."""

from dataclasses import dataclass, field

from angelia_rpc.config import RpcOptions
from protocol.role_options import metrics_listen_field

GROUPS_DEFAULT = 64
"""The group count of a cluster created without one (issue 5; the nameserver agrees)."""


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
class StorageConfig(RpcOptions):
    """How one storage node listens, identifies itself and reaches the nameserver."""

    listen: str = field(
        default="127.0.0.1:7701",
        metadata={"help": "host:port for Angelia RPC (brokers, peers)", "kind": "address"},
    )
    advertise: str = field(
        default="",
        metadata={
            "help": "host:port brokers and peers are told to reach this node at (a relay in "
            "front of it, as the chaos suite's fault proxies); empty: the listen address",
            "kind": "address",
        },
    )
    node_id: int = field(
        default=1,
        metadata={"help": "this node's id, unique in the cluster", "min": 1, "max": 65535},
    )
    nameserver: str = field(
        default="",
        metadata={
            "help": "comma-separated host:port of the nameservers (any replica will do); "
            "empty: no nameserver (static placement from --peers)",
            "kind": "addresses",
        },
    )
    cluster: str = field(
        default="DefaultCluster",
        metadata={"help": "the storage cluster this node joins (at the nameserver)"},
    )
    peers: str = field(
        default="",
        metadata={
            "help": "ID=host:port of every storage node, this one too: static placement, every "
            "node replicates every group (wins over the nameserver's assignment); empty: the "
            "nameserver assigns groups (or, with no nameserver, this node alone)",
            "kind": "peers",
        },
    )
    groups: int = field(
        default=0,
        metadata={
            "help": "raft groups of the cluster, fixed when it is created (queues hash to them); "
            "0: the cluster's count at the nameserver (64 when this node creates it or has no "
            "nameserver); a count that disagrees with the cluster's is refused",
            "min": 0,
            "max": 65535,
        },
    )
    heartbeat_interval_ms: int = field(
        default=500,
        metadata={
            "help": "how often this node heartbeats (load, assignment) to the nameserver",
            "min": 50,
            "max": 60_000,
        },
    )
    wal_segment_bytes: int = field(
        default=64 << 20,
        metadata={
            "help": "bytes of one WAL segment file (small ones seal often: the chaos suite's "
            "corrupt fault needs sealed segments in a short run)",
            "min": 16 << 10,
            "max": 1 << 30,
        },
    )
    wal_retain_mb: int = field(
        default=256,
        metadata={
            "help": "MiB of live WAL segments past which the groups pinning the oldest "
            "are snapshotted and compacted (never past their truncate floors), so the "
            "segments of trimmed entries are collected: with local retention, a node's "
            "disk holds about this much WAL",
            "min": 1,
            "max": 1 << 20,
        },
    )
    flush: str = field(
        default="sync",
        metadata={
            "help": "when an append is durable: sync = fsync on a majority before the ack",
            "choices": ["sync", "async"],
        },
    )
    replication: str = field(
        default="raft",
        metadata={
            "help": "how groups replicate: raft (elections by majority) or controller "
            "(RIP-44: the nameserver's controller names each group's master; acks wait "
            "for the SyncStateSet); the same for every node of a cluster",
            "choices": ["raft", "controller"],
        },
    )
    min_in_sync: int = field(
        default=1,
        metadata={
            "help": "controller mode: a master acknowledges a write once at least this many "
            "replicas hold it (1: alone, when its SyncStateSet is itself)",
            "min": 1,
            "max": 3,
        },
    )
    retention_check_ms: int = field(
        default=10_000,
        metadata={
            "help": "how often the leader of each group applies its topics' retention "
            "(retention_ms, retention_bytes) and drops the data of deleted topics "
            "(topics read from the nameserver; without one, nothing is trimmed)",
            "min": 100,
            "max": 3_600_000,
        },
    )
    tier_url: str = field(
        default="",
        metadata={
            "help": "fsspec URL of the tier (file:///path, s3://bucket/prefix, gs://..., "
            "hdfs://...): group leaders upload committed messages there and local data is "
            "trimmed only once uploaded; credentials from the environment or the driver's "
            "config files (S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL); "
            "empty: no tier"
        },
    )
    tier_batch_messages: int = field(
        default=1000,
        metadata={
            "help": "pending messages of a queue that make a tier object at once",
            "min": 1,
            "max": 1_000_000,
        },
    )
    tier_batch_wait_ms: int = field(
        default=2000,
        metadata={
            "help": "the longest a committed message waits before its queue's pending "
            "messages are uploaded (fewer than --tier-batch-messages)",
            "min": 10,
            "max": 3_600_000,
        },
    )
    metrics_listen: str = metrics_listen_field(
        "127.0.0.1:5559", "rip5_raft_*, rip5_storage_*, consumer lag of the groups led here"
    )
