"""Options of the connector role (metadata conventions: see nameserver/config.py).

The connector's durable state in its data directory: one marks file per rule
(``marks/<rule>.marks``: translation marks, and a pending line before each
send, see connector/runner.py). Its checkpoints are not
there: they are the committed offsets of each rule's consumer group on the
source cluster, so a connector started anywhere resumes from them.
"""

from dataclasses import dataclass, field

from connector.plan import RESEND_SAFE_MS
from protocol.role_options import metrics_listen_field


@dataclass(frozen=True)
class ConnectorConfig:
    """What the connector copies (the rules file) and where it reports."""

    rules: str = field(
        default="connector.toml",
        metadata={"help": "TOML rules file: clusters and copy rules (reloaded on SIGHUP)"},
    )
    resend_check_after_ms: int = field(
        default=RESEND_SAFE_MS,
        metadata={
            "help": "a batch left unfinished by a crash at least this long ago is sought on "
            "the target before it is sent again (the target's dedup window remembers ids "
            "for 2 minutes; this leaves 30 s for clock skew)",
            "min": 0,
            "max": 120_000,
        },
    )
    metrics_listen: str = metrics_listen_field("", "rip5_connector_* of every rule")
