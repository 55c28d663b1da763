"""Options of the connector role (metadata conventions: see nameserver/config.py).

The connector's durable state in its data directory: one marks file per rule
(``marks/<rule>.marks``, for offset translation). Its checkpoints are not
there: they are the committed offsets of each rule's consumer group on the
source cluster, so a connector started anywhere resumes from them.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ConnectorConfig:
    """What the connector copies (the rules file) and where it reports."""

    rules: str = field(
        default="connector.toml",
        metadata={"help": "TOML rules file: clusters and copy rules (reloaded on SIGHUP)"},
    )
    metrics_listen: str = field(
        default="",
        metadata={
            "help": "host:port serving Prometheus metrics at /metrics (port 0: any free "
            "port, reported as the ready endpoint); empty: no metrics server"
        },
    )
