"""Options of the broker role (metadata conventions: see nameserver/config.py)."""

from dataclasses import dataclass, field

from angelia_rpc.config import RpcOptions
from protocol.role_options import metrics_listen_field


@dataclass(frozen=True)
class BrokerConfig(RpcOptions):
    """How one broker serves clients and reaches the cluster."""

    listen: str = field(
        default="127.0.0.1:8081",
        metadata={
            "help": "host:port of the RocketMQ gRPC v2 endpoint for clients",
            "kind": "address",
        },
    )
    remoting_listen: str = field(
        default="127.0.0.1:8080",
        metadata={
            "help": "host:port of the classic RocketMQ remoting endpoint for 4.x clients "
            "(empty: none)",
        },
    )
    grpc_server: str = field(
        default="h2",
        metadata={
            "help": "what serves the gRPC endpoint: h2 (sends a streamed call's responses "
            "together) or grpcio (grpc.aio)",
            "choices": ("h2", "grpcio"),
        },
    )
    tls_cert: str = field(
        default="",
        metadata={
            "help": "PEM certificate (chain) file: serve the client endpoint over TLS "
            "(with --tls-key)"
        },
    )
    tls_key: str = field(
        default="",
        metadata={"help": "PEM private key file of --tls-cert"},
    )
    tls_client_ca: str = field(
        default="",
        metadata={
            "help": "PEM file of the CA certificates that sign client certificates: with "
            "TLS on, a client must present one (mutual TLS); empty: none asked"
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
    route_stale_max_ms: int = field(
        default=120_000,
        metadata={
            "help": "while no nameserver can be reached, how long past their last confirmation "
            "cached routes and groups keep serving traffic (then lookups fail UNAVAILABLE "
            "until a nameserver answers)",
            "min": 0,
        },
    )
    heartbeat_interval_ms: int = field(
        default=2_000,
        metadata={"help": "how often the broker tells the nameserver it is alive", "min": 100},
    )
    peer_listen: str = field(
        default="",
        metadata={
            "help": "host:port where other brokers reach this one over Angelia (orphan "
            "check-backs); empty: the client listen host, on a free port"
        },
    )
    delay_max_ms: int = field(
        default=24 * 3600 * 1000,
        metadata={"help": "how far ahead a timed message may be due (ms)", "min": 1},
    )
    transaction_check_delay_ms: int = field(
        default=6_000,
        metadata={
            "help": "age of an undecided half message at its first check-back (ms)",
            "min": 0,
        },
    )
    transaction_check_interval_ms: int = field(
        default=30_000,
        metadata={"help": "time between check-backs of one half message (ms)", "min": 0},
    )
    transaction_check_max: int = field(
        default=15,
        metadata={"help": "check-backs of a half message before it is rolled back", "min": 1},
    )
    acl: bool = field(
        default=False,
        metadata={
            "help": "ACL 2.0: authenticate every gRPC call (the official clients' signed "
            "authorization header) and check it against the users and policies kept by the "
            "nameserver (rip5 admin user/acl)"
        },
    )
    acl_refresh_ms: int = field(
        default=1000,
        metadata={
            "help": "how often the ACL users and policies are read again from the nameserver "
            "(the last ones stay in force while it is away)",
            "min": 50,
            "max": 3_600_000,
        },
    )
    acl_inner_user_file: str = field(
        default="",
        metadata={
            "help": "ACL 2.0: a file holding NAME:SECRET of the user this broker signs its "
            "own nameserver writes as (auto-created topics and groups, retry and dead-letter "
            "topics); a super user, or one allowed Create on them"
        },
    )
    acl_skew_ms: int = field(
        default=15 * 60 * 1000,
        metadata={
            "help": "most a signed request's x-mq-date-time may differ from this broker's clock",
            "min": 1000,
            "max": 86_400_000,
        },
    )
    metrics_listen: str = metrics_listen_field(
        "127.0.0.1:5557", "RocketMQ's RIP-46 names, as RocketMQ's broker"
    )
    route_mode: str = field(
        default="endpoint",
        metadata={
            "help": "what QueryRoute answers: 'endpoint' (the address the client used: "
            "brokers behind a load balancer, as the RocketMQ 5 proxy) or 'brokers' (the "
            "live brokers from the nameserver, queues spread over them)",
            "choices": ("endpoint", "brokers"),
        },
    )
    drain_timeout_ms: int = field(
        default=60_000,
        metadata={
            "help": "how long a drained broker waits for its calls in flight (long polls) "
            "before it exits anyway (ms)",
            "min": 0,
        },
    )
