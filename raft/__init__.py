"""One Raft for the nameserver group and every storage group.

- :mod:`raft.core`: the sans-IO replica (RawNode) of one group, PURE.
- :mod:`raft.wal`: the node's shared write-ahead log and snapshot packs.
- :mod:`raft.host`: the multi-group host: the round over many groups, the
  asyncio driver that runs it over the shared WAL, and the transports.

:mod:`raft.types` and :mod:`raft.errors` are shared by all three.
"""
