"""The node's shared write-ahead log: one sequence of segment files for all its groups.

:class:`raft.wal.logstore.LogStore` is the store; :mod:`raft.wal.format` is the
byte layout (docs/wal-format.md).
"""
