"""The Raft replica of one group as a sans-IO state machine (after etcd-io/raft).

:class:`raft.core.node.RawNode` is the API; the rest are its parts: the
replica's state and term rules (replica), the role step functions (leader,
follower), the log, progress, quorum, membership changes and read index.

PURE (the whole package): no I/O, no clock, no randomness of its own.
"""
