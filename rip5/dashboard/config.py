"""Options of the dashboard role (metadata conventions: see nameserver/config.py)."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DashboardConfig:
    """Where the dashboard listens and which cluster it shows."""

    listen: str = field(
        default="127.0.0.1:8088",
        metadata={"help": "host:port of the web pages", "kind": "address"},
    )
    nameserver: str = field(
        default="127.0.0.1:9876",
        metadata={"help": "comma-separated host:port of the nameservers", "kind": "addresses"},
    )
    cluster: str = field(
        default="DefaultCluster",
        metadata={"help": "the storage cluster shown"},
    )
    broker_metrics: str = field(
        default="",
        metadata={
            "help": "comma-separated host:port of the brokers' --metrics-listen: the "
            "throughput chart samples them (empty: no chart)",
            "kind": "addresses",
        },
    )
    tier_url: str = field(
        default="",
        metadata={
            "help": "the storage nodes' --tier-url: the tier page shows what each queue "
            "uploaded (credentials from the environment; empty: no tier)"
        },
    )
    connector_metrics: str = field(
        default="",
        metadata={
            "help": "comma-separated host:port of the connectors' --metrics-listen: the "
            "connectors page shows their rules (empty: none)",
            "kind": "addresses",
        },
    )
    acl: bool = field(
        default=False,
        metadata={
            "help": "ACL is on: every page needs a login as an ACL user of the nameserver, "
            "and changes are signed as that user"
        },
    )
    sample_interval_ms: int = field(
        default=2_000,
        metadata={"help": "how often the chart samples the brokers' metrics", "min": 100},
    )
