"""Options of the nameserver role.

Fields carry declarative metadata read by the launcher: ``help``, and for
validation ``kind`` ("address", "addresses", "peers"),
``min``/``max`` or ``choices``.
"""

from dataclasses import dataclass, field

from angelia_rpc.config import RpcOptions
from nameserver.forecast_placement import PLACEMENT_FORECAST, PLACEMENTS
from protocol.role_options import metrics_listen_field


@dataclass(frozen=True)
class NameserverConfig(RpcOptions):
    """How one nameserver process listens, finds its peers and detects failures."""

    listen: str = field(
        default="127.0.0.1:9876",
        metadata={
            "help": "host:port for Angelia RPC from brokers, storage nodes, peers and admins",
            "kind": "address",
        },
    )
    peers: str = field(
        default="",
        metadata={
            "help": "ID=host:port of EVERY nameserver, this one included "
            "(e.g. 1=h1:9876,2=h2:9876,3=h3:9876); empty: one node",
            "kind": "peers",
        },
    )
    node_id: int = field(
        default=1,
        metadata={"help": "this nameserver's id in --peers", "min": 1, "max": 1_000_000},
    )
    replication: str = field(
        default="raft",
        metadata={
            "help": "how the groups of --cluster replicate: raft, or controller (RIP-44: "
            "this nameserver group is their controller; give storage nodes the same flag)",
            "choices": ["raft", "controller"],
        },
    )
    controller_dead_after_ms: int = field(
        default=1000,
        metadata={
            "help": "controller mode: a storage node whose reads stopped this long is dead "
            "(its groups' masters are replaced; nodes read every 100 ms)",
            "min": 200,
            "max": 600_000,
        },
    )
    join: bool = field(
        default=False,
        metadata={
            "help": "start empty and wait to be added to the running group "
            "(rip5 admin nameserver add); --peers names the running members and this one"
        },
    )
    cluster: str = field(
        default="DefaultCluster",
        metadata={"help": "the storage cluster the leader creates if missing (empty: none)"},
    )
    groups: int = field(
        default=64,
        metadata={"help": "raft groups of that cluster when created", "min": 1, "max": 65_536},
    )
    replication_factor: int = field(
        default=3,
        metadata={"help": "replicas per raft group of that cluster", "min": 1, "max": 7},
    )
    tick_ms: int = field(
        default=50,
        metadata={
            "help": "raft tick; elections start 10-20 ticks after silence",
            "min": 5,
            "max": 10_000,
        },
    )
    expire_interval_ms: int = field(
        default=500,
        metadata={
            "help": "how often the leader sweeps for dead nodes and expired leases",
            "min": 50,
            "max": 600_000,
        },
    )
    storage_node_timeout_ms: int = field(
        default=2000,
        metadata={
            "help": "a storage node silent this long is marked down (storage nodes "
            "heartbeat every 500 ms by default)",
            "min": 100,
            "max": 3_600_000,
        },
    )
    evacuate_after_ms: int = field(
        default=30_000,
        metadata={
            "help": "the replicas of a storage node down this long are moved to live nodes",
            "min": 100,
            "max": 86_400_000,
        },
    )
    moves_max: int = field(
        default=8,
        metadata={
            "help": "most raft groups moving a replica at once (joins and evacuations); "
            "fewer while the storage nodes' append p99 is above twice its level before",
            "min": 1,
            "max": 65_536,
        },
    )
    placement: str = field(
        default=PLACEMENT_FORECAST,
        metadata={
            "help": "where new raft groups' replicas and moves go: 'count' evens replica "
            "counts; 'forecast' picks the nodes whose forecast load (Holt-Winters over each "
            "group's hourly message rate from heartbeats) peaks lowest over the next day, "
            "with counts kept within 25% of the mean (evened exactly until there is load "
            "history)",
            "choices": list(PLACEMENTS),
        },
    )
    broker_timeout_ms: int = field(
        default=10_000,
        metadata={"help": "a broker silent this long is marked down", "min": 100, "max": 3_600_000},
    )
    acl_super_user_file: str = field(
        default="",
        metadata={
            "help": "ACL 2.0: a file holding NAME:SECRET of the super user the leader creates "
            "while the cluster has no user (empty: none; ACL stays off until a user exists)",
        },
    )
    metrics_listen: str = metrics_listen_field("127.0.0.1:5558", "rip5_nameserver_*, rip5_raft_*")


def parse_peers(text: str) -> dict[int, str]:
    """``1=host:port,2=host:port`` -> {1: "host:port", 2: ...} (validated by the launcher)."""
    peers: dict[int, str] = {}
    for part in text.split(","):
        node, _, address = part.strip().partition("=")
        peers[int(node)] = address.strip()
    return peers
